"""GitLab for the receiver: its webhook variables and modes, the object kinds it stores and its arm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import msgspec
from multidict import istr

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.common.settings import Settings
from pidispatch.forges.armconfig import ArmConfig, first_present, required, with_previous
from pidispatch.forges.arms import CONTENT_TYPE, Arm, Classification, RequestHead
from pidispatch.forges.gitlab import FORGE
from pidispatch.forges.gitlab.verify import (
    decode_gitlab_signing_key,
    gitlab_signature_match,
    gitlab_token_match,
    read_gitlab_body,
)
from pidispatch.forges.receive import ReceiverForge
from pidispatch.forges.refusals import (
    DEFAULT_TABLE,
    INVALID_DELIVERY_ID,
    METHOD_NOT_ALLOWED,
    PAYLOAD_TOO_LARGE,
    UNSUPPORTED_MEDIA_TYPE,
    ReceiverRefusal,
    json_refusal,
)
from pidispatch.forges.verify import is_json_media_type, token_digest, too_large, valid_delivery_id

# GitLab routes on the body's object_kind; X-Gitlab-Event only has to be present.
GITLAB_OBJECT_KINDS = frozenset({"issue", "merge_request", "note"})
GITLAB_VARIABLES = (
    "GITLAB_WEBHOOK_MODE",
    "GITLAB_WEBHOOK_SECRET",
    "GITLAB_TOKEN",
    "GITLAB_WEBHOOK_SECRET_PREVIOUS",
)
GITLAB_MODES = ("signature", "token")

_GITLAB_EVENT = istr("X-Gitlab-Event")
_WEBHOOK_ID = istr("webhook-id")
_IDEMPOTENCY_KEY = istr("Idempotency-Key")
_WEBHOOK_SIGNATURE = istr("webhook-signature")
_WEBHOOK_TIMESTAMP = istr("webhook-timestamp")
_GITLAB_TOKEN = istr("X-Gitlab-Token")

# The transport rows GitLab shares with GitHub use the same bodies; these two are its own.
MISSING_GITLAB_EVENT = json_refusal(400, "missing gitlab event header", "missing-event-header")
MISSING_GITLAB_DELIVERY = ReceiverRefusal(
    400,
    "missing-delivery-id",
    msgspec.json.encode(
        {
            "error": "missing delivery id",
            "detail": "no webhook-id or Idempotency-Key header; pi-dispatch needs GitLab 17.4 or later "
            "to dedup redeliveries",
        }
    ),
)


class GitLabArmConfig(msgspec.Struct, frozen=True, kw_only=True):
    mode: Literal["signature", "token"]
    # signature mode: the decoded signing keys; token mode: SHA-256 digests of the tokens.
    secrets: tuple[Secret[bytes], ...]


class GitLabArm:
    """GitLab: one declared mode, never negotiated from the request; object_kind decides storage."""

    name = FORGE.name
    path = FORGE.path
    table = DEFAULT_TABLE

    def __init__(self, config: GitLabArmConfig) -> None:
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
        refusal = gitlab_preamble(method, headers.get(CONTENT_TYPE), event, delivery, content_length)
        return RequestHead(event, delivery, credential, refusal)

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal:
        if self._signature_mode:
            signature, msg_id, timestamp = head.credential
            return gitlab_signature_match(self._secrets, signature, msg_id, timestamp, body, now_ms)
        return gitlab_token_match(self._secrets, head.credential[0])

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal:
        read = read_gitlab_body(body)
        if read is None:
            return DEFAULT_TABLE.invalid_json
        assert head.delivery is not None  # the preamble refused a delivery without one
        kind = read.object_kind
        return Classification(kind, head.delivery, kind in GITLAB_OBJECT_KINDS)


def _signing_keys(env: Mapping[str, str], secret: str) -> tuple[Secret[bytes], ...]:
    """The key bytes of the signing token and of its previous one while rotating."""
    keys = []
    for name, value in zip(
        ("GITLAB_WEBHOOK_SECRET", "GITLAB_WEBHOOK_SECRET_PREVIOUS"),
        with_previous(env, "GITLAB_WEBHOOK_SECRET", secret),
        strict=False,
    ):
        key = decode_gitlab_signing_key(value)
        if key is None:
            # A token that decodes to nothing can never verify anything: refuse to come up believing
            # there is a gate.
            raise ConfigError(
                f"{name} is not a signing token in signature mode; accepted: whsec_ followed by "
                f"non-empty base64 (the token {FORGE.display} shows for the webhook)"
            )
        keys.append(Secret(key))
    return tuple(keys)


def gitlab_preamble(
    method: str, content_type: str | None, event: str | None, delivery: str | None, content_length: int | None
) -> ReceiverRefusal | None:
    """In order: method, media type, event header, delivery id, declared length; the credential after."""
    if method != "POST":
        return METHOD_NOT_ALLOWED
    if not is_json_media_type(content_type):
        return UNSUPPORTED_MEDIA_TYPE
    if not event:
        return MISSING_GITLAB_EVENT
    if not delivery:
        return MISSING_GITLAB_DELIVERY
    if not valid_delivery_id(delivery):
        return INVALID_DELIVERY_ID
    if too_large(content_length):
        return PAYLOAD_TOO_LARGE
    return None


class GitLabReceive:
    """What the receiver runs for GitLab (``pidispatch.forges.receive.ReceiverForge``)."""

    setup_hint = "GITLAB_WEBHOOK_MODE and GITLAB_WEBHOOK_SECRET"
    refusals = (MISSING_GITLAB_EVENT, MISSING_GITLAB_DELIVERY)

    def load(self, settings: Settings, env: Mapping[str, str]) -> GitLabArmConfig | None:
        trigger = first_present(env, GITLAB_VARIABLES)
        if trigger is None:
            return None
        because = f"the {FORGE.display} arm is configured ({trigger} is set)"
        mode = required(env, "GITLAB_WEBHOOK_MODE", because, "signature, token")
        if mode not in GITLAB_MODES:
            raise ConfigError(f"GITLAB_WEBHOOK_MODE={mode!r} is refused; accepted: signature, token")
        if mode == "token":
            secret = required(env, "GITLAB_WEBHOOK_SECRET", because, "the webhook's secret token")
            tokens = with_previous(env, "GITLAB_WEBHOOK_SECRET", secret)
            digests = tuple(Secret(token_digest(t.encode())) for t in tokens)
            return GitLabArmConfig(mode="token", secrets=digests)
        accepted = "the webhook's signing token (whsec_<base64>)"
        secret = required(env, "GITLAB_WEBHOOK_SECRET", because, accepted)
        return GitLabArmConfig(mode="signature", secrets=_signing_keys(env, secret))

    def arm(self, config: ArmConfig) -> Arm:
        assert isinstance(config, GitLabArmConfig)  # configure_arms hands each forge the block it loaded
        return GitLabArm(config)


RECEIVE: ReceiverForge = GitLabReceive()
