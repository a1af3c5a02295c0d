"""GitHub: the constants every service reads.

What each service runs for this forge is in the modules beside this one (see ``pidispatch.forges``).
"""

from __future__ import annotations

from pidispatch.forges.base import Forge

FORGE = Forge(
    name="github",
    display="GitHub",
    package=__name__,
    path="/github",
    fallthrough=True,
    job_id_prefix="gh-",
    git_username="x-access-token",
    settings_vars=(
        "WEBHOOK_SECRET", "WEBHOOK_SECRET_PREVIOUS", "GITHUB_AUTH_SOURCE", "GITHUB_PAT", "GITHUB_PAT_VAR",
        "GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID", "GITHUB_APP_PRIVATE_KEY",
        "GITHUB_APP_PRIVATE_KEY_PATH", "GITHUB_API_URL", "GITHUB_SELF_ID", "GITHUB_HEAL_HOOKS",
    ),
    secret_vars=(
        "WEBHOOK_SECRET", "WEBHOOK_SECRET_PREVIOUS", "GITHUB_PAT", "GITHUB_APP_PRIVATE_KEY",
        "GITHUB_APP_PRIVATE_KEY_PATH",
    ),
    webhook_secret_var="WEBHOOK_SECRET",
    token_vars=("GITHUB_TOKEN", "GH_TOKEN"),
    credentials_hint="GITHUB_AUTH_SOURCE (gh, pat or app) and its credentials",
    self_id_var="GITHUB_SELF_ID",
    identity_hint="GITHUB_AUTH_SOURCE and its credentials (or set GITHUB_SELF_ID)",
    lookup_failed_event="github_permission_lookup_failed",
    pr_actions=frozenset({"labeled", "opened", "synchronize", "reopened", "review_submitted", "closed"}),
    pr_close_word="closed",
    pr_label_action="labeled",
    issue_actions=frozenset({"closed"}),
)
