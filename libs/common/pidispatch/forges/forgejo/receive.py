"""Forgejo (and Gitea) for the receiver: its webhook variables, the events it stores and its arm."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from multidict import istr

from pidispatch.common.secret import Secret
from pidispatch.common.settings import Settings
from pidispatch.forges.armconfig import ArmConfig, first_present, required, with_previous
from pidispatch.forges.arms import CONTENT_TYPE, Arm, Classification, RequestHead
from pidispatch.forges.forgejo import FORGE
from pidispatch.forges.receive import ReceiverForge
from pidispatch.forges.refusals import DEFAULT_TABLE, ReceiverRefusal
from pidispatch.forges.verify import GITHUB_SIGNATURE_PREFIX, hmac_hex_match
from pidispatch.forges.webhook import (
    GITHUB_DELIVERY,
    GITHUB_EVENT,
    HUB_SIGNATURE,
    MISSING_EVENT_HEADERS,
    classify_by_header,
    github_preamble,
    hmac_verdict,
)

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
# Any of these opens the arm; only the webhook secret is required (the receiver never calls the API).
FORGEJO_VARIABLES = (
    "FORGEJO_WEBHOOK_SECRET",
    "FORGEJO_TOKEN",
    "FORGEJO_URL",
    "FORGEJO_WEBHOOK_SECRET_PREVIOUS",
)

# Forgejo sends its own headers plus Gitea's and GitHub's names for the same values; a Gitea sender has
# no Forgejo ones. The first signature present is the one checked: a bad one is not rescued by another.
_SIGNATURES = (
    (istr("X-Forgejo-Signature"), ""),
    (istr("X-Gitea-Signature"), ""),
    (HUB_SIGNATURE, GITHUB_SIGNATURE_PREFIX),
)
# (delivery header, its family's event header)
_IDS = (
    (istr("X-Forgejo-Delivery"), istr("X-Forgejo-Event")),
    (istr("X-Gitea-Delivery"), istr("X-Gitea-Event")),
    (GITHUB_DELIVERY, GITHUB_EVENT),
)


class ForgejoArmConfig(msgspec.Struct, frozen=True, kw_only=True):
    secrets: tuple[Secret[bytes], ...]


class ForgejoArm:
    """Forgejo/Gitea: GitHub's transport and status rows with Forgejo's own secret and header names."""

    name = FORGE.name
    path = FORGE.path
    table = DEFAULT_TABLE

    def __init__(self, config: ForgejoArmConfig) -> None:
        self._secrets = tuple(s.reveal() for s in config.secrets)

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead:
        prefix, signature = "", None
        for name, name_prefix in _SIGNATURES:
            if value := headers.get(name):
                prefix, signature = name_prefix, value
                break
        event = delivery = None
        for delivery_name, event_name in _IDS:
            if delivery := headers.get(delivery_name):
                event = headers.get(event_name)
                break
        refusal = github_preamble(
            method, headers.get(CONTENT_TYPE), signature, event, delivery, content_length
        )
        return RequestHead(event, delivery, (prefix, signature), refusal)

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal:
        prefix, signature = head.credential
        assert prefix is not None and signature is not None
        return hmac_verdict(hmac_hex_match(self._secrets, body, signature, prefix))

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal:
        return classify_by_header(head, body, FORGEJO_EVENTS)


class ForgejoReceive:
    """What the receiver runs for Forgejo (``pidispatch.forges.receive.ReceiverForge``)."""

    setup_hint = "FORGEJO_WEBHOOK_SECRET"
    refusals = (MISSING_EVENT_HEADERS,)

    def load(self, settings: Settings, env: Mapping[str, str]) -> ForgejoArmConfig | None:
        trigger = first_present(env, FORGEJO_VARIABLES)
        if trigger is None:
            return None
        secret = required(
            env,
            "FORGEJO_WEBHOOK_SECRET",
            f"the {FORGE.display} arm is configured ({trigger} is set)",
            f"a non-blank secret shared with the {FORGE.display}/Gitea webhook",
        )
        secrets = with_previous(env, "FORGEJO_WEBHOOK_SECRET", secret)
        return ForgejoArmConfig(secrets=tuple(Secret(s.encode()) for s in secrets))

    def arm(self, config: ArmConfig) -> Arm:
        assert isinstance(config, ForgejoArmConfig)  # configure_arms hands each forge the block it loaded
        return ForgejoArm(config)


RECEIVE: ReceiverForge = ForgejoReceive()
