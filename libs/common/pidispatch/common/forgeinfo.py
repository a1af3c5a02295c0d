"""The forges pi-dispatch speaks to, and each one's constants: the one place that lists them.

Modules that loop over forges or keep a per-forge table read ``FORGES`` or ``by_name`` here, so adding a
forge means adding its entry. Constants only; what a forge does lives with its receiver arm, router
matcher and worker API class. (``common.forges`` is the forge API configuration read from the environment.)
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec


class ForgeInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # the forge's kind in jobs, rules, streams and logs
    display: str  # for people
    path: str  # the receiver path its webhooks arrive on
    fallthrough: bool = False  # the receiver forge for every path no other forge claims
    job_id_prefix: str
    # Its pull requests number apart from issues, so a PR reference uses "!" rather than "#".
    bang_pr: bool = False
    git_username: str  # offered to git with a minted token as the password
    token_vars: tuple[str, ...]  # every container variable that carries the job's minted token
    credentials_hint: str  # what an operator sets to give it API credentials
    self_id_var: str  # the variable(s) that name the harness's own account there, skipping the lookup
    identity_hint: str  # what to check when resolving that account fails
    # Every firing delivery needs an API lookup (GitHub only for close rules).
    lookup_always: bool = False
    lookup_failed_event: str  # log event when its authority lookup cannot be answered
    pr_actions: frozenset[str]  # the rule action words its pull request rules accept
    pr_close_word: str | None = None  # the PR action that means closed, where PR close rules exist
    pr_label_action: str | None = None  # the PR action that means "a label was added", where one exists
    issue_actions: frozenset[str] | None = None  # None: no issue rules on this forge


GITHUB = ForgeInfo(
    name="github",
    display="GitHub",
    path="/github",
    fallthrough=True,
    job_id_prefix="gh-",
    git_username="x-access-token",
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
GITLAB = ForgeInfo(
    name="gitlab",
    display="GitLab",
    path="/gitlab",
    job_id_prefix="gl-",
    bang_pr=True,
    git_username="oauth2",
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
FORGEJO = ForgeInfo(
    name="forgejo",
    display="Forgejo",
    path="/forgejo",
    job_id_prefix="fj-",
    git_username="pi-dispatch",
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
AZURE = ForgeInfo(
    name="azure",
    display="Azure DevOps",
    path="/azure",
    job_id_prefix="az-",
    bang_pr=True,
    git_username="pi-dispatch",
    token_vars=("AZURE_DEVOPS_EXT_PAT", "SYSTEM_ACCESSTOKEN"),
    credentials_hint="AZURE_ORG_URL and AZURE_TOKEN",
    self_id_var="AZURE_SELF_ID/AZURE_SELF_EMAIL",
    identity_hint="AZURE_ORG_URL and AZURE_TOKEN (or set AZURE_SELF_ID / AZURE_SELF_EMAIL)",
    lookup_always=True,
    lookup_failed_event="azure_membership_lookup_failed",
    pr_actions=frozenset({"created", "updated"}),
)

# In this order everywhere forges are listed (help text, configured lists, log lines).
FORGES: tuple[ForgeInfo, ...] = (GITHUB, GITLAB, FORGEJO, AZURE)
_BY_NAME: Mapping[str, ForgeInfo] = {f.name: f for f in FORGES}


def names() -> tuple[str, ...]:
    return tuple(f.name for f in FORGES)


def by_name(name: str) -> ForgeInfo:
    """The forge called ``name``; KeyError for anything else (``local`` included)."""
    return _BY_NAME[name]


def find(name: str) -> ForgeInfo | None:
    """The forge called ``name``, or None: for callers that take any job kind."""
    return _BY_NAME.get(name)


def fallthrough() -> ForgeInfo:
    """The receiver's forge for a path no other forge claims."""
    return next(f for f in FORGES if f.fallthrough)
