"""GitHub for the receiver: its webhook variables, the events it stores and its arm."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.common.settings import Settings
from pidispatch.forges.armconfig import ArmConfig, read_var, with_previous
from pidispatch.forges.arms import CONTENT_TYPE, Arm, Classification, RequestHead
from pidispatch.forges.github import FORGE
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

# What GitHub stores; every other event answers 204 unstored (the router could never act on it).
GITHUB_EVENTS = frozenset({"issues", "issue_comment", "pull_request", "pull_request_review"})


class GitHubArmConfig(msgspec.Struct, frozen=True, kw_only=True):
    secrets: tuple[Secret[bytes], ...]  # HMAC keys: current first, then the previous one while rotating


class GitHubArm:
    """GitHub: ``X-Hub-Signature-256`` HMAC over the raw body, event and delivery from headers."""

    name = FORGE.name
    path = FORGE.path
    table = DEFAULT_TABLE

    def __init__(self, config: GitHubArmConfig) -> None:
        self._secrets = tuple(s.reveal() for s in config.secrets)

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead:
        signature = headers.get(HUB_SIGNATURE)
        event = headers.get(GITHUB_EVENT)
        delivery = headers.get(GITHUB_DELIVERY)
        refusal = github_preamble(
            method, headers.get(CONTENT_TYPE), signature, event, delivery, content_length
        )
        return RequestHead(event, delivery, (signature,), refusal)

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal:
        signature = head.credential[0]
        assert signature is not None  # the preamble refused a delivery without one
        return hmac_verdict(hmac_hex_match(self._secrets, body, signature, GITHUB_SIGNATURE_PREFIX))

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal:
        return classify_by_header(head, body, GITHUB_EVENTS)


class GitHubReceive:
    """What the receiver runs for GitHub (``pidispatch.forges.receive.ReceiverForge``)."""

    setup_hint = "WEBHOOK_SECRET"
    refusals = (MISSING_EVENT_HEADERS,)

    def load(self, settings: Settings, env: Mapping[str, str]) -> GitHubArmConfig | None:
        """GitHub is served when ``WEBHOOK_SECRET`` or ``GITHUB_AUTH_SOURCE`` is set; the receiver never reads
        triggers.json, so the operator's secret, not "a github rule exists", is what arms it."""
        accepted = f"a non-blank secret shared with the {FORGE.display} webhook"
        secret = settings.webhook_secret
        if secret is None or not secret.strip():
            if settings.github_auth_source:
                raise ConfigError(
                    f"WEBHOOK_SECRET is required when GITHUB_AUTH_SOURCE is set; accepted: {accepted}"
                )
            if read_var(env, "WEBHOOK_SECRET_PREVIOUS") is not None:
                raise ConfigError(
                    f"WEBHOOK_SECRET is required when WEBHOOK_SECRET_PREVIOUS is set; accepted: {accepted}"
                )
            return None
        secrets = with_previous(env, "WEBHOOK_SECRET", secret.strip())
        return GitHubArmConfig(secrets=tuple(Secret(s.encode()) for s in secrets))

    def arm(self, config: ArmConfig) -> Arm:
        assert isinstance(config, GitHubArmConfig)  # configure_arms hands each forge the block it loaded
        return GitHubArm(config)


RECEIVE: ReceiverForge = GitHubReceive()
