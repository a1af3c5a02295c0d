"""Forgejo and Gitea (one forge: Gitea's hooks are accepted too): the constants every service reads.

What each service runs for this forge is in the modules beside this one (see ``pidispatch.forges``).
"""

from __future__ import annotations

from pidispatch.forges.base import Forge

FORGE = Forge(
    name="forgejo",
    display="Forgejo",
    package=__name__,
    path="/forgejo",
    job_id_prefix="fj-",
    git_username="pi-dispatch",
    settings_vars=(
        "FORGEJO_WEBHOOK_SECRET", "FORGEJO_WEBHOOK_SECRET_PREVIOUS", "FORGEJO_URL", "FORGEJO_TOKEN",
        "FORGEJO_BOT_ID",
    ),
    secret_vars=("FORGEJO_WEBHOOK_SECRET", "FORGEJO_WEBHOOK_SECRET_PREVIOUS", "FORGEJO_TOKEN"),
    webhook_secret_var="FORGEJO_WEBHOOK_SECRET",
    token_vars=("FORGEJO_TOKEN", "GITEA_SERVER_TOKEN"),
    credentials_hint="FORGEJO_URL and FORGEJO_TOKEN",
    self_id_var="FORGEJO_BOT_ID",
    identity_hint="FORGEJO_URL and FORGEJO_TOKEN (or set FORGEJO_BOT_ID)",
    lookup_always=True,
    lookup_failed_event="forgejo_permission_lookup_failed",
    pr_actions=frozenset({"label_updated", "opened", "synchronized", "reopened", "closed"}),
    pr_close_word="closed",
    pr_label_action="label_updated",
    issue_actions=frozenset({"closed"}),
)
