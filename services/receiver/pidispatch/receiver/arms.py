"""Which forges this receiver serves, and how each one reads a delivery (docs/receiver.md).

An arm turns the pure checks of ``verify`` into three steps the HTTP layer runs in order:

1. ``head``: every row decidable from the method and headers, before a body byte is read;
2. ``authenticate``: the credential over the raw bytes (index of the secret that matched, or a refusal);
3. ``classify``: the minimal read of the verified body: stored event name, delivery id, and whether the
   router could ever act on it (the others answer 204 unstored).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

from multidict import istr

from pidispatch import forges
from pidispatch.forges.azure import FORGE as AZURE
from pidispatch.forges.forgejo import FORGE as FORGEJO
from pidispatch.forges.github import FORGE as GITHUB
from pidispatch.forges.gitlab import FORGE as GITLAB
from pidispatch.receiver.config import AzureConfig, ForgejoConfig, GitHubConfig, GitLabConfig, ReceiverConfig
from pidispatch.receiver.refusals import (
    AZURE_MISSING_DELIVERY_ID,
    AZURE_TABLE,
    GITHUB_TABLE,
    INVALID_SIGNATURE,
    ReceiverRefusal,
    Table,
)
from pidispatch.receiver.verify import (
    GITHUB_SIGNATURE_PREFIX,
    NO_MATCH,
    azure_credential_match,
    azure_preamble,
    github_preamble,
    gitlab_preamble,
    gitlab_signature_match,
    gitlab_token_match,
    hmac_hex_match,
    is_json_object,
    read_azure_body,
    read_gitlab_body,
    valid_delivery_id,
)

# Paths with their own forge; every other path falls through to GitHub, so "/" and "/github" reach it.
FORGE_PATHS: Mapping[str, str] = {f.path: f.name for f in forges.FORGES if not f.fallthrough}
FALLTHROUGH_FORGE = forges.fallthrough().name
FORGES = forges.names()

# What each forge stores; every other event answers 204 unstored (the router could never act on it).
GITHUB_EVENTS = frozenset({"issues", "issue_comment", "pull_request", "pull_request_review"})
# Forgejo/Gitea name the event header after the hook's family ("issues" for a label change); reviews get
# their own names, and versions that fall back to the hook type send that (issue_label, ...).
FORGEJO_EVENTS = frozenset(
    {
        "issues",
        "issue_comment",
        "pull_request",
        "pull_request_approved",
        "pull_request_rejected",
        "pull_request_comment",
        "issue_assign",
        "issue_label",
        "issue_milestone",
        "pull_request_assign",
        "pull_request_label",
        "pull_request_milestone",
        "pull_request_sync",
        "pull_request_review_request",
        "pull_request_review_approved",
        "pull_request_review_rejected",
        "pull_request_review_comment",
    }
)
# GitLab routes on the body's object_kind; X-Gitlab-Event only has to be present.
GITLAB_OBJECT_KINDS = frozenset({"issue", "merge_request", "note"})
AZURE_EVENT_TYPES = frozenset(
    {
        "workitem.created",
        "workitem.updated",
        "workitem.commented",
        "git.pullrequest.created",
        "git.pullrequest.updated",
        "ms.vss-code.git-pullrequest-comment-event",
    }
)


class RequestHead(NamedTuple):
    """What an arm read from the request line and headers."""

    event: str | None  # the event header as sent (not yet authenticated: logged only when name-shaped)
    delivery: str | None  # the header delivery id (Azure's is in the body: None here)
    credential: tuple[str | None, ...]  # what this arm's ``authenticate`` checks
    refusal: ReceiverRefusal | None  # the first failed check, in the arm's fixed order


class Classification(NamedTuple):
    """A verified delivery: the event name it is stored under, its delivery id, and whether to store it."""

    event: str | None
    delivery: str
    store: bool


class Arm(Protocol):
    name: str
    path: str
    table: Table

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead: ...

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal: ...

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal: ...


_CONTENT_TYPE = istr("Content-Type")
_HUB_SIGNATURE = istr("X-Hub-Signature-256")
_GITHUB_EVENT = istr("X-GitHub-Event")
_GITHUB_DELIVERY = istr("X-GitHub-Delivery")


def _hmac_verdict(index: int) -> int | ReceiverRefusal:
    return INVALID_SIGNATURE if index == NO_MATCH else index


def _classify_by_header(
    head: RequestHead, body: bytes, events: frozenset[str],
) -> Classification | ReceiverRefusal:
    if not is_json_object(body):
        return GITHUB_TABLE.invalid_json
    assert head.delivery is not None  # the preamble refused a delivery without one
    return Classification(head.event, head.delivery, head.event in events)


class GitHubArm:
    """GitHub: ``X-Hub-Signature-256`` HMAC over the raw body, event and delivery from headers."""

    name = GITHUB.name
    path = GITHUB.path
    table = GITHUB_TABLE

    def __init__(self, config: GitHubConfig) -> None:
        self._secrets = tuple(s.reveal() for s in config.secrets)

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead:
        signature = headers.get(_HUB_SIGNATURE)
        event = headers.get(_GITHUB_EVENT)
        delivery = headers.get(_GITHUB_DELIVERY)
        refusal = github_preamble(
            method, headers.get(_CONTENT_TYPE), signature, event, delivery, content_length
        )
        return RequestHead(event, delivery, (signature,), refusal)

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal:
        signature = head.credential[0]
        assert signature is not None  # the preamble refused a delivery without one
        return _hmac_verdict(hmac_hex_match(self._secrets, body, signature, GITHUB_SIGNATURE_PREFIX))

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal:
        return _classify_by_header(head, body, GITHUB_EVENTS)


# Forgejo sends its own headers plus Gitea's and GitHub's names for the same values; a Gitea sender has
# no Forgejo ones. The first signature present is the one checked: a bad one is not rescued by another.
_FORGEJO_SIGNATURES = (
    (istr("X-Forgejo-Signature"), ""),
    (istr("X-Gitea-Signature"), ""),
    (_HUB_SIGNATURE, GITHUB_SIGNATURE_PREFIX),
)
# (delivery header, its family's event header)
_FORGEJO_IDS = (
    (istr("X-Forgejo-Delivery"), istr("X-Forgejo-Event")),
    (istr("X-Gitea-Delivery"), istr("X-Gitea-Event")),
    (_GITHUB_DELIVERY, _GITHUB_EVENT),
)


class ForgejoArm:
    """Forgejo/Gitea: GitHub's transport and status rows with Forgejo's own secret and header names."""

    name = FORGEJO.name
    path = FORGEJO.path
    table = GITHUB_TABLE

    def __init__(self, config: ForgejoConfig) -> None:
        self._secrets = tuple(s.reveal() for s in config.secrets)

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead:
        prefix, signature = "", None
        for name, name_prefix in _FORGEJO_SIGNATURES:
            if value := headers.get(name):
                prefix, signature = name_prefix, value
                break
        event = delivery = None
        for delivery_name, event_name in _FORGEJO_IDS:
            if delivery := headers.get(delivery_name):
                event = headers.get(event_name)
                break
        refusal = github_preamble(
            method, headers.get(_CONTENT_TYPE), signature, event, delivery, content_length
        )
        return RequestHead(event, delivery, (prefix, signature), refusal)

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal:
        prefix, signature = head.credential
        assert prefix is not None and signature is not None
        return _hmac_verdict(hmac_hex_match(self._secrets, body, signature, prefix))

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal:
        return _classify_by_header(head, body, FORGEJO_EVENTS)


_GITLAB_EVENT = istr("X-Gitlab-Event")
_WEBHOOK_ID = istr("webhook-id")
_IDEMPOTENCY_KEY = istr("Idempotency-Key")
_WEBHOOK_SIGNATURE = istr("webhook-signature")
_WEBHOOK_TIMESTAMP = istr("webhook-timestamp")
_GITLAB_TOKEN = istr("X-Gitlab-Token")


class GitLabArm:
    """GitLab: one declared mode, never negotiated from the request; object_kind decides storage."""

    name = GITLAB.name
    path = GITLAB.path
    table = GITHUB_TABLE

    def __init__(self, config: GitLabConfig) -> None:
        self._signature_mode = config.mode == "signature"
        self._secrets = tuple(s.reveal() for s in config.secrets)

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead:
        # webhook-id is the Standard Webhooks name (GitLab 19.0+), Idempotency-Key the same value under
        # its 17.4 name. Never synthesised from the payload: that would not be stable across retries.
        msg_id = headers.get(_WEBHOOK_ID)
        delivery = msg_id if msg_id is not None else headers.get(_IDEMPOTENCY_KEY)
        event = headers.get(_GITLAB_EVENT)
        credential: tuple[str | None, ...]
        if self._signature_mode:
            # The MAC always covers webhook-id, even when Idempotency-Key supplied the delivery id.
            credential = (headers.get(_WEBHOOK_SIGNATURE), msg_id, headers.get(_WEBHOOK_TIMESTAMP))
        else:
            credential = (headers.get(_GITLAB_TOKEN),)
        refusal = gitlab_preamble(method, headers.get(_CONTENT_TYPE), event, delivery, content_length)
        return RequestHead(event, delivery, credential, refusal)

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal:
        if self._signature_mode:
            signature, msg_id, timestamp = head.credential
            return gitlab_signature_match(self._secrets, signature, msg_id, timestamp, body, now_ms)
        return gitlab_token_match(self._secrets, head.credential[0])

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal:
        read = read_gitlab_body(body)
        if read is None:
            return GITHUB_TABLE.invalid_json
        assert head.delivery is not None  # the preamble refused a delivery without one
        kind = read.object_kind
        return Classification(kind, head.delivery, kind in GITLAB_OBJECT_KINDS)


_AUTHORIZATION = istr("Authorization")


class AzureArm:
    """Azure DevOps: a static credential (Basic or a custom header), the delivery id from the body."""

    name = AZURE.name
    path = AZURE.path
    table = AZURE_TABLE

    def __init__(self, config: AzureConfig) -> None:
        self._basic = config.mode == "basic"
        self._header = _AUTHORIZATION if self._basic else istr(config.header or "")
        self._secrets = tuple(s.reveal() for s in config.secrets)

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead:
        refusal = azure_preamble(method, headers.get(_CONTENT_TYPE), content_length)
        return RequestHead(None, None, (headers.get(self._header),), refusal)

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal:
        # Checked after the body is read though it covers no byte of it: no field of an
        # unauthenticated body is ever read, the same order as the HMAC forges.
        return azure_credential_match(self._secrets, head.credential[0], self._basic)

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal:
        read = read_azure_body(body)
        if read is None:
            return AZURE_TABLE.invalid_json
        # The top-level id is the delivery (notificationId is a per-subscription counter).
        if read.id is None:
            return AZURE_MISSING_DELIVERY_ID
        if not valid_delivery_id(read.id):
            return AZURE_TABLE.invalid_delivery_id
        return Classification(read.event_type, read.id, read.event_type in AZURE_EVENT_TYPES)


def forge_for_path(path: str) -> str:
    """The forge a normalised path belongs to (routing never looks at headers)."""
    return FORGE_PATHS.get(path, FALLTHROUGH_FORGE)


def normalise_path(path: str) -> str:
    """One trailing slash is removed from any path longer than ``/`` (the query is not part
    of the path aiohttp hands us)."""
    if len(path) > 1 and path[-1] == "/":
        return path[:-1]
    return path


def configure_arms(config: ReceiverConfig) -> dict[str, Arm]:
    """The arms ``config`` describes, by forge name (``load_receiver_config`` refused bad ones)."""
    arms: dict[str, Arm] = {}
    if config.github is not None:
        arms[GitHubArm.name] = GitHubArm(config.github)
    if config.gitlab is not None:
        arms[GitLabArm.name] = GitLabArm(config.gitlab)
    if config.forgejo is not None:
        arms[ForgejoArm.name] = ForgejoArm(config.forgejo)
    if config.azure is not None:
        arms[AzureArm.name] = AzureArm(config.azure)
    return arms
