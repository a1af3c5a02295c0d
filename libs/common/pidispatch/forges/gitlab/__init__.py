"""GitLab: the constants every service reads.

What each service runs for this forge is in the modules beside this one (see ``pidispatch.forges``).
"""

from __future__ import annotations

from pidispatch.forges.base import Forge

FORGE = Forge(
    name="gitlab",
    display="GitLab",
    package=__name__,
    path="/gitlab",
    job_id_prefix="gl-",
    bang_pr=True,
    git_username="oauth2",
    settings_vars=(
        "GITLAB_WEBHOOK_MODE", "GITLAB_WEBHOOK_SECRET", "GITLAB_WEBHOOK_SECRET_PREVIOUS", "GITLAB_URL",
        "GITLAB_TOKEN", "GITLAB_SELF_ID",
    ),
    secret_vars=("GITLAB_WEBHOOK_SECRET", "GITLAB_WEBHOOK_SECRET_PREVIOUS", "GITLAB_TOKEN"),
    webhook_secret_var="GITLAB_WEBHOOK_SECRET",
    token_vars=("GITLAB_TOKEN", "GL_TOKEN"),
    credentials_hint="GITLAB_TOKEN (and GITLAB_URL for a self-hosted instance)",
    self_id_var="GITLAB_SELF_ID",
    identity_hint="GITLAB_URL and GITLAB_TOKEN (or set GITLAB_SELF_ID)",
    lookup_always=True,
    lookup_failed_event="gitlab_access_lookup_failed",
    pr_actions=frozenset({"open", "update", "reopen", "approved", "close"}),
    pr_close_word="close",
    issue_actions=frozenset({"close"}),
)
