"""Azure DevOps: the constants every service reads.

What each service runs for this forge is in the modules beside this one (see ``pidispatch.forges``).
"""

from __future__ import annotations

from pidispatch.forges.base import Forge

FORGE = Forge(
    name="azure",
    display="Azure DevOps",
    package=__name__,
    path="/azure",
    job_id_prefix="az-",
    bang_pr=True,
    git_username="pi-dispatch",
    settings_vars=(
        "AZURE_WEBHOOK_MODE", "AZURE_WEBHOOK_SECRET", "AZURE_WEBHOOK_SECRET_PREVIOUS",
        "AZURE_WEBHOOK_HEADER", "AZURE_ORG_URL", "AZURE_TOKEN", "AZURE_GRAPH_URL", "AZURE_SELF_ID",
        "AZURE_SELF_EMAIL",
    ),
    secret_vars=("AZURE_WEBHOOK_SECRET", "AZURE_WEBHOOK_SECRET_PREVIOUS", "AZURE_TOKEN"),
    webhook_secret_var="AZURE_WEBHOOK_SECRET",
    token_vars=("AZURE_DEVOPS_EXT_PAT", "SYSTEM_ACCESSTOKEN"),
    credentials_hint="AZURE_ORG_URL and AZURE_TOKEN",
    self_id_var="AZURE_SELF_ID/AZURE_SELF_EMAIL",
    identity_hint="AZURE_ORG_URL and AZURE_TOKEN (or set AZURE_SELF_ID / AZURE_SELF_EMAIL)",
    lookup_always=True,
    lookup_failed_event="azure_membership_lookup_failed",
    pr_actions=frozenset({"created", "updated"}),
)
