"""Azure DevOps for the receiver: its webhook variables and modes, the events it stores and its arm."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

import msgspec
from multidict import istr

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.common.settings import Settings
from pidispatch.forges.armconfig import ArmConfig, first_present, required, with_previous
from pidispatch.forges.arms import CONTENT_TYPE, Arm, Classification, RequestHead
from pidispatch.forges.azure import FORGE
from pidispatch.forges.azure.verify import read_azure_body
from pidispatch.forges.receive import ReceiverForge
from pidispatch.forges.refusals import ENQUEUE_FAILED, INVALID_JSON, ReceiverRefusal, Table, json_refusal
from pidispatch.forges.verify import (
    NO_MATCH,
    digest_match,
    is_json_media_type,
    token_digest,
    too_large,
    valid_delivery_id,
)

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
AZURE_VARIABLES = (
    "AZURE_WEBHOOK_MODE",
    "AZURE_WEBHOOK_SECRET",
    "AZURE_WEBHOOK_HEADER",
    "AZURE_TOKEN",
    "AZURE_ORG_URL",
    "AZURE_WEBHOOK_SECRET_PREVIOUS",
)
AZURE_MODES = ("basic", "header")
# RFC 9110 token characters: the only header names a request can carry.
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")
_AUTHORIZATION = istr("Authorization")

# Azure DevOps spells its errors with hyphens.
AZURE_TABLE = Table(
    method_not_allowed=json_refusal(405, "method-not-allowed", "method-not-allowed"),
    unsupported_media_type=json_refusal(415, "unsupported-media-type", "unsupported-media-type"),
    payload_too_large=json_refusal(413, "payload-too-large", "payload-too-large"),
    body_incomplete=json_refusal(400, "incomplete-body", "body-incomplete"),
    invalid_delivery_id=json_refusal(400, "invalid-delivery-id", "invalid-delivery-id"),
    invalid_json=INVALID_JSON,
    enqueue_failed=ENQUEUE_FAILED,
    internal_error=json_refusal(500, "internal", "internal-error"),
)
# One 401 body, two log tokens so the operator can tell "sent nothing" from "wrong".
AZURE_MISSING_CREDENTIAL = json_refusal(401, "unauthorized", "missing-credential")
AZURE_INVALID_CREDENTIAL = json_refusal(401, "unauthorized", "invalid-credential")
AZURE_MISSING_DELIVERY_ID = json_refusal(400, "missing-delivery-id", "missing-delivery-id")


class AzureArmConfig(msgspec.Struct, frozen=True, kw_only=True):
    mode: Literal["basic", "header"]
    header: str | None  # the custom header's name (header mode)
    secrets: tuple[Secret[bytes], ...]  # SHA-256 digests of the credential


def azure_preamble(
    method: str, content_type: str | None, content_length: int | None,
) -> ReceiverRefusal | None:
    """Method, media type, declared length; the delivery id is in the body, read only after the credential."""
    if method != "POST":
        return AZURE_TABLE.method_not_allowed
    if not is_json_media_type(content_type):
        return AZURE_TABLE.unsupported_media_type
    if too_large(content_length):
        return AZURE_TABLE.payload_too_large
    return None


def azure_credential_match(
    digests: Sequence[bytes], presented: str | None, basic: bool,
) -> int | ReceiverRefusal:
    """Azure DevOps: the secret is the whole credential, nothing covers the body.

    ``basic``: ``Authorization`` must start with exactly ``Basic `` and the trimmed rest (the base64 of
    ``user:password``) is the secret; a ``Bearer`` header is wrong, not absent. Header mode: the
    configured header's value is the secret, exactly. Comparing digests rather than checking lengths
    first decides the same and leaks not even the length.
    """
    if not presented:
        return AZURE_MISSING_CREDENTIAL
    if basic:
        if not presented.startswith("Basic "):
            return AZURE_INVALID_CREDENTIAL
        presented = presented[6:].strip()
    index = digest_match(digests, presented)
    return index if index != NO_MATCH else AZURE_INVALID_CREDENTIAL


class AzureArm:
    """Azure DevOps: a static credential (Basic or a custom header), the delivery id from the body."""

    name = FORGE.name
    path = FORGE.path
    table = AZURE_TABLE

    def __init__(self, config: AzureArmConfig) -> None:
        self._basic = config.mode == "basic"
        self._header = _AUTHORIZATION if self._basic else istr(config.header or "")
        self._secrets = tuple(s.reveal() for s in config.secrets)

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead:
        refusal = azure_preamble(method, headers.get(CONTENT_TYPE), content_length)
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


def _header_name(env: Mapping[str, str]) -> str:
    """Header mode's ``AZURE_WEBHOOK_HEADER``: a name a request can carry, else the start is refused."""
    header = required(
        env, "AZURE_WEBHOOK_HEADER", "AZURE_WEBHOOK_MODE=header", "an HTTP header name (X-Pi-Secret)"
    )
    if not _HEADER_NAME_RE.match(header):
        raise ConfigError(
            f"AZURE_WEBHOOK_HEADER={header!r} is refused; accepted: an HTTP header name, up to 64 "
            "characters without spaces or separators (X-Pi-Secret)"
        )
    return header


class AzureReceive:
    """What the receiver runs for Azure DevOps (``pidispatch.forges.receive.ReceiverForge``)."""

    setup_hint = "AZURE_WEBHOOK_MODE and AZURE_WEBHOOK_SECRET"
    refusals = (*AZURE_TABLE, AZURE_MISSING_CREDENTIAL, AZURE_INVALID_CREDENTIAL, AZURE_MISSING_DELIVERY_ID)

    def load(self, settings: Settings, env: Mapping[str, str]) -> AzureArmConfig | None:
        trigger = first_present(env, AZURE_VARIABLES)
        if trigger is None:
            return None
        because = f"the {FORGE.display} arm is configured ({trigger} is set)"
        raw_mode = required(env, "AZURE_WEBHOOK_MODE", because, "basic, header")
        if raw_mode not in AZURE_MODES:
            raise ConfigError(f"AZURE_WEBHOOK_MODE={raw_mode!r} is refused; accepted: basic, header")
        mode: Literal["basic", "header"] = "basic" if raw_mode == "basic" else "header"
        header = _header_name(env) if mode == "header" else None
        accepted = (
            "the base64 of user:password set on the service hook" if mode == "basic" else "the header's value"
        )
        secret = required(env, "AZURE_WEBHOOK_SECRET", because, accepted)
        credentials = with_previous(env, "AZURE_WEBHOOK_SECRET", secret)
        return AzureArmConfig(
            mode=mode, header=header, secrets=tuple(Secret(token_digest(c.encode())) for c in credentials)
        )

    def arm(self, config: ArmConfig) -> Arm:
        assert isinstance(config, AzureArmConfig)  # configure_arms hands each forge the block it loaded
        return AzureArm(config)


RECEIVE: ReceiverForge = AzureReceive()
