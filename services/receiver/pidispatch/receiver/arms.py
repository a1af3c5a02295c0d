"""Which forges this receiver serves, decided once at boot from the settings (spec ingest §1.1, §1.7).

An arm is a small value: the forge's name, its path, the function that checks a delivery's credential
over the raw bytes, the header names it reads, and the events the router can act on. GitLab, Forgejo
and Azure (issue #3) become more arms; Forgejo's transport is GitHub's with its own secret.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from multidict import istr

from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import Settings
from pidispatch.receiver.verify import github_signature_ok

# Paths with their own forge; every other path falls through to GitHub, so "/" and "/github" reach it.
FORGE_PATHS: Mapping[str, str] = {"/gitlab": "gitlab", "/forgejo": "forgejo", "/azure": "azure"}
FALLTHROUGH_FORGE = "github"

# GitHub events some trigger type can act on; anything else (ping, push, ...) answers 204 unstored.
GITHUB_EVENTS = frozenset({"issues", "issue_comment", "pull_request", "pull_request_review"})


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    path: str
    verify: Callable[[bytes, str], bool]  # (raw body, signature header value) -> authentic
    signature_header: istr
    event_header: istr
    delivery_header: istr
    events: frozenset[str]


def forge_for_path(path: str) -> str:
    """The forge a normalised path belongs to (spec §1.1: routing never looks at headers)."""
    return FORGE_PATHS.get(path, FALLTHROUGH_FORGE)


def normalise_path(path: str) -> str:
    """Spec §1.1: one trailing slash is removed from any path longer than ``/`` (the query is not part
    of the path aiohttp hands us)."""
    if len(path) > 1 and path[-1] == "/":
        return path[:-1]
    return path


def github_arm(secret: str) -> Arm:
    return Arm(
        name="github",
        path="/github",
        verify=functools.partial(github_signature_ok, secret.encode()),
        signature_header=istr("X-Hub-Signature-256"),
        event_header=istr("X-GitHub-Event"),
        delivery_header=istr("X-GitHub-Delivery"),
        events=GITHUB_EVENTS,
    )


def _blank(value: str | None) -> bool:
    return value is None or not value.strip()


def configure_arms(settings: Settings) -> dict[str, Arm]:
    """The arms to serve, by forge name; refuses a half-configured forge or none at all (exit 2).

    GitHub is served when ``WEBHOOK_SECRET`` or ``GITHUB_AUTH_SOURCE`` is set; the receiver never reads
    triggers.json, so the spec's "a github rule exists" clause is the operator's secret here.
    """
    arms: dict[str, Arm] = {}
    secret = settings.webhook_secret
    if not _blank(settings.github_auth_source) and _blank(secret):
        raise ConfigError(
            "WEBHOOK_SECRET is required when GITHUB_AUTH_SOURCE is set; accepted: a non-blank secret "
            "shared with the GitHub webhook"
        )
    if not _blank(secret):
        assert secret is not None
        arms["github"] = github_arm(secret)
    if not arms:
        raise ConfigError(
            "no webhook arm is configured; set WEBHOOK_SECRET (the GitHub webhook secret) to receive "
            "GitHub deliveries"
        )
    return arms
