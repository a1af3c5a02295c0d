"""The harness's own identity on each forge, resolved once at start (the bot-loop guard): the window, the
retries and the shared HTTP call here; what each forge asks in its package (``RouterForge.resolve_self``,
``pidispatch.forges.<name>.identity``).

An explicit id (each forge's ``self_id_var``) is used as given and skips the lookup. A forge without
credentials cannot author events, so it needs no identity (None). Otherwise the forge is asked.

A transient failure (network, timeout, 5xx, 429, rate-limited 403, bad JSON) is retried inside the
window, 5 s between attempts doubling to 30 s; exhausting it raises ``InfraError`` (exit 1, a restart
opens a fresh window). A determinate one (401, 404, other 4xx, no integer id) raises ``ConfigError`` at
once (exit 2). A router never routes with an unresolved identity.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import aiohttp
import yarl

from pidispatch import forges
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.log import get_logger
from pidispatch.common.runtime import EpochMsClock, now_ms
from pidispatch.forges import FORGES
from pidispatch.forges.config import ForgeConfig

# A generic HTTP rule kept in GitHub's auth module (the worker reads it there too); it belongs in
# pidispatch.forges.http, and until it moves this is the generic router's one import of a forge package.
from pidispatch.forges.http import BadBody, Unreachable, call, is_transient_status
from pidispatch.forges.route import TokenSources, route_of
from pidispatch.triggers.jsvalues import js_int
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.rules import Rules

Sleep = Callable[[float], Awaitable[Any]]

FIRST_DELAY_S = 5.0
DELAY_CAP_S = 30.0
ATTEMPT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 10.0
# Named in refusals: what the operator can check, or set to skip the lookup.
VARIABLES = {f.name: f.identity_hint for f in FORGES}


class IdentityTransient(Exception):
    """This attempt failed in a way a later one may not (network, 5xx, rate limit, bad JSON)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class IdentityCalls:
    """What a forge's ``resolve_self`` asks with: its config, token sources and one HTTP session."""

    def __init__(self, config: ForgeConfig, sources: TokenSources, http: aiohttp.ClientSession) -> None:
        self.config, self.sources, self.http = config, sources, http
        # Each forge's last answer's headers (lower-cased names): ``doctor`` reads a token's scopes there.
        self.headers: dict[str, Mapping[str, str]] = {}

    async def json(self, forge: str, what: str, url: str | yarl.URL, headers: Mapping[str, str], *,
                   denied: str | None = None) -> Any:
        """The 2xx body of one GET; ``IdentityTransient`` or ``ConfigError`` otherwise. ``denied``
        explains a 401/403 where the forge has a known reason for one."""
        try:
            reply = await call(self.http, "GET", url, headers=headers, timeout_s=REQUEST_TIMEOUT_S)
        except Unreachable as exc:
            raise IdentityTransient(exc.reason) from None
        except BadBody:
            raise IdentityTransient("bad-json") from None
        self.headers[forge] = reply.headers
        if not reply.ok:
            if is_transient_status(reply.status, reply.headers):
                raise IdentityTransient(f"status-{reply.status}")
            problem = f"could not resolve the {forge} identity: {what} answered {reply.status}"
            if denied is not None and reply.status in (401, 403):
                raise ConfigError(f"{problem}; {denied}")
            raise ConfigError(f"{problem}; check {VARIABLES[forge]}")
        try:
            return reply.json()
        except BadBody:
            raise IdentityTransient("bad-json") from None

    @staticmethod
    def id(forge: str, what: str, body: Any) -> int:
        # Read as the sender ids it is compared with are: 7.0 is 7.
        value = js_int(body.get("id")) if isinstance(body, dict) else None
        if value is None or value < 1:
            raise ConfigError(f"could not resolve the {forge} identity: {what} returned no integer id; "
                              f"check {VARIABLES[forge]}")
        return value


async def _retrying(
    forge: str, attempt: Callable[[], Awaitable[Any]], *, window_s: float, clock: EpochMsClock, sleep: Sleep,
    attempt_timeout_s: float,
) -> Any:
    """Retry transient failures until ``window_s`` has passed; the last gap is clamped to the window's
    edge so a forge that returns just before it closes is still picked up."""
    log = get_logger()
    deadline = clock() + int(window_s * 1000)
    delay, tries = FIRST_DELAY_S, 0
    while True:
        tries += 1
        try:
            return await asyncio.wait_for(attempt(), attempt_timeout_s)
        except TimeoutError:
            reason = "timeout"
        except IdentityTransient as exc:
            reason = exc.reason
        remaining_s = (deadline - clock()) / 1000
        if remaining_s <= 0:
            log.error("identity_retry_exhausted", forge=forge, attempts=tries, reason=reason)
            raise InfraError(f"could not resolve the {forge} identity within {int(window_s)} s ({reason}); "
                             f"check {VARIABLES[forge]}")
        gap = min(delay, remaining_s)
        log.warning("identity_retry", forge=forge, attempt=tries, reason=reason, delay_s=gap)
        await sleep(gap)
        delay = min(delay * 2, DELAY_CAP_S)


async def resolve_self_ids(
    config: ForgeConfig,
    sources: TokenSources,
    http: aiohttp.ClientSession,
    clock: EpochMsClock = now_ms,
    *,
    window_s: float | None = None,
    sleep: Sleep = asyncio.sleep,
    attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
) -> SelfIds:
    """Every forge's self id, concurrently, each with its own retry window (default
    ``PD_IDENTITY_RETRY_SECONDS``). Raises ``ConfigError`` (determinate) or ``InfraError`` (window spent)."""
    log = get_logger()
    calls = IdentityCalls(config, sources, http)
    window = float(config.identity_retry_s if window_s is None else window_s)
    configured = config.configured_forges()

    async def one(forge: forges.Forge) -> object | None:
        route = route_of(forge)
        explicit = route.explicit_self(config)
        if explicit is not None:
            log.info("self_identity", forge=forge.name, resolved=True, source=forge.self_id_var)
            return explicit
        if forge.name not in configured:
            log.info("self_identity", forge=forge.name, resolved=False, reason="no-credentials")
            return None
        value: object = await _retrying(forge.name, lambda: route.resolve_self(calls), window_s=window,
                                        clock=clock, sleep=sleep, attempt_timeout_s=attempt_timeout_s)
        log.info("self_identity", forge=forge.name, resolved=True, source="api")
        return value

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(forge)) for forge in FORGES]
    except BaseExceptionGroup as failed:
        # One forge's refusal cancels the others; surface the determinate one first (exit 2 over 1).
        errors = failed.exceptions
        raise next((e for e in errors if isinstance(e, ConfigError)), errors[0]) from None
    return _fold(zip(FORGES, (t.result() for t in tasks), strict=True))


def explicit_self_ids(config: ForgeConfig) -> SelfIds:
    """The identities the operator set explicitly, no lookup (for ``explain``, which asks no forge)."""
    return _fold((forge, route_of(forge).explicit_self(config)) for forge in FORGES)


def _fold(values: Iterable[tuple[forges.Forge, object | None]]) -> SelfIds:
    ids = SelfIds()
    for forge, value in values:
        if value is not None:
            ids = route_of(forge).with_self(ids, value)
    return ids


def require_knowable(rules: Rules, config: ForgeConfig) -> None:
    """Refuse to start (exit 2) when rules name a forge whose own account the router cannot know: with
    neither ``<FORGE>_SELF_ID`` nor credentials to look it up, the bot-loop guard would be off, and the
    harness's own comments could start jobs."""
    for forge in FORGES:
        if not rules.group(forge.name).has_rules():
            continue
        if route_of(forge).explicit_self(config) is None and forge.name not in config.configured_forges():
            raise ConfigError(
                f"triggers.json has {forge.name} rules but the harness's own {forge.display} account cannot "
                f"be known, so its own comments could start jobs; set {forge.self_id_var}, or "
                f"{forge.credentials_hint}"
            )


def unguarded(rules: Rules, ids: SelfIds) -> list[str]:
    """Pure: the forges ``rules`` have rules for whose identity was not resolved at start (a reload
    that adds them is refused: identities are resolved once)."""
    return [f.name for f in FORGES if rules.group(f.name).has_rules() and ids.of(f.name) is None]
