"""Healing: deliveries GitHub failed to bring are asked for again, from GitHub's own delivery log.

GitHub never retries a failed delivery: while the receiver is unreachable its deliveries are lost. Every
``PD_HEAL_INTERVAL_S`` one router (the holder of the lease ``pd:leader:heal``) reads each log back to
``PD_HEAL_WINDOW_H`` (``forges.github.deliveries``), keeps the deliveries of event types the receiver
stores, asks the receiver's dedup memory (``scripts.REMEMBERED``: read-only) which it never stored, and
asks GitHub to redeliver each of those once. Having asked is remembered by guid in ``pd:heal-asked`` for
the window, before the redelivery arrives, so the next pass asks nothing twice; the router marks the
decision of a delivery found there ``healed=yes``. Requests are paced (``HEAL_PACE_S``) and a pass stops
when GitHub's rate limit runs low. ``pi-dispatch heal`` runs one pass by hand, under the same lease.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence

import aiohttp
import msgspec

from pidispatch.common.dedup import remembered
from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import HEAL_LEASE_MS, HEAL_MARKS_RECHECK_S, HEAL_PACE_S, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import EpochMsClock, every, iso_ms, stopped
from pidispatch.common.scripts import LEASE_DROP, LEASE_HOLD, REMEMBERED
from pidispatch.common.settings import Settings
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.github import FORGE
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.github.config import block_of
from pidispatch.forges.github.deliveries import (
    DeliveryLog,
    LoggedDelivery,
    LogSource,
    LogUnread,
    pause_s,
    sources_of,
)
from pidispatch.forges.github.receive import GITHUB_EVENTS
from pidispatch.forges.route import TokenSources

LEASE_ROLE = "heal"
ROWS_MAX = 1_000  # deliveries a report lists; the counts go on


def identity(guid: str) -> str:
    """How the receiver remembers a delivery (``receiver.ingest``), and how ``pd:heal-asked`` names it."""
    return f"{FORGE.name}:{guid}"


def candidates(
    page: Iterable[LoggedDelivery], stored: frozenset[str], seen: set[str]
) -> list[LoggedDelivery]:
    """Pure: the page's deliveries of an event type the receiver stores, each once (its newest attempt:
    the log lists the newest first), leaving out those ``seen`` earlier in the pass; ``seen`` grows."""
    found = []
    for attempt in page:
        if attempt.event in stored and attempt.guid not in seen:
            seen.add(attempt.guid)
            found.append(attempt)
    return found


def ends_pass(error: str, source: LogSource) -> bool:
    """Pure: whether a log's ``error`` ends the whole pass: GitHub limits or fails every call alike, the
    lease is another router's now, or the App's own credentials were refused. A hook's refusal (its
    token may not read that repository's hooks, a hook deleted) ends that hook's part only."""
    if error == "credentials" or error.startswith("status-4"):
        return source.repo is None
    return error in ("rate-limited", "unavailable", "lease-lost", "stopped")


def to_ask(
    found: Sequence[LoggedDelivery], stored: Sequence[bool], asked: Sequence[bool]
) -> tuple[list[LoggedDelivery], int]:
    """Pure: those never stored and never asked for, and how many were asked for by an earlier pass."""
    missing = [(d, a) for d, s, a in zip(found, stored, asked, strict=True) if not s]
    return [d for d, a in missing if not a], sum(1 for _, a in missing if a)


class SourceReport(msgspec.Struct, kw_only=True):
    """One log's pass: attempts ``read`` in the window, deliveries ``missing`` (never stored), ``asked``
    now (or, dry, that would be), ``before`` (asked by an earlier pass), ``gone`` (GitHub refused that one
    redelivery), ``error`` (why it ended early: ``rate-limited``, ``status-404``, ``credentials``, ...)."""

    source: str
    read: int = 0
    missing: int = 0
    asked: int = 0
    before: int = 0
    gone: int = 0
    error: str | None = None


class HealRow(msgspec.Struct, frozen=True):
    """A delivery asked for (or, dry, to be): no payload, only what the log says about it."""

    source: str
    guid: str
    event: str
    action: str | None
    delivered_at: str
    status_code: int


class HealReport(msgspec.Struct, kw_only=True):
    dry_run: bool
    window_h: int
    sources: list[SourceReport] = msgspec.field(default_factory=list)
    rows: list[HealRow] = msgspec.field(default_factory=list)
    lease: str | None = None  # the holder of the lease when another one held it: nothing was read

    @property
    def asked(self) -> int:
        return sum(s.asked for s in self.sources)


class Healer:
    """One pass at a time over ``sources``; ``on_asked`` counts each redelivery GitHub accepted."""

    def __init__(
        self, redis: Redis, keys: Keys, log: DeliveryLog, sources: Sequence[LogSource], window_ms: int,
        clock: EpochMsClock, *, pace_s: float = HEAL_PACE_S, on_asked: Callable[[int], None] | None = None,
    ) -> None:
        self.redis, self.keys, self.log, self.sources = redis, keys, log, tuple(sources)
        self.window_ms, self.clock, self.pace_s, self.on_asked = window_ms, clock, pace_s, on_asked
        self.stored = frozenset(GITHUB_EVENTS)

    async def hold(self, holder: str) -> bool:
        """Take or keep the lease: only its holder reads and asks."""
        return bool(await LEASE_HOLD(self.redis, [self.keys.leader(LEASE_ROLE)], [holder, HEAL_LEASE_MS]))

    async def holder(self) -> str | None:
        value = await self.redis.get(self.keys.leader(LEASE_ROLE))
        return value.decode() if isinstance(value, bytes) else value

    async def run_pass(self, holder: str, stop: asyncio.Event, *, dry_run: bool = False) -> HealReport:
        """Read every log back to the window and ask for what was never stored (``dry_run``: ask nothing,
        write nothing, take no lease). Redis errors propagate; GitHub's end one log's part (``error``)."""
        report = HealReport(dry_run=dry_run, window_h=self.window_ms // 3_600_000)
        if not dry_run:
            if not await self.hold(holder):
                report.lease = await self.holder() or "?"
                return report
            await self.redis.zremrangebyscore(self.keys.heal_asked, "-inf", self.clock() - self.window_ms)
        try:
            for source in self.sources:
                part = SourceReport(source=source.name)
                report.sources.append(part)
                if await self._source(source, part, report, holder, stop, dry_run) or stop.is_set():
                    break
        finally:
            if not dry_run:
                await LEASE_DROP(self.redis, [self.keys.leader(LEASE_ROLE)], [holder])
        return report

    async def _source(
        self, source: LogSource, part: SourceReport, report: HealReport, holder: str, stop: asyncio.Event,
        dry_run: bool,
    ) -> bool:
        """One log, page by page; True when the whole pass must stop (``ends_pass``)."""
        seen: set[str] = set()
        pages = self.log.pages(source, self.clock() - self.window_ms)
        try:
            async for page, headers in pages:
                if not dry_run and not await self.hold(holder):  # renewed as it goes; lost: another heals
                    part.error = "lease-lost"
                    break
                part.read += len(page)
                ask, before = await self._missing(candidates(page, self.stored, seen))
                part.missing, part.before = part.missing + len(ask) + before, part.before + before
                part.error = await self._ask_all(source, ask, part, report, holder, stop, dry_run)
                if part.error is not None:
                    break
                if (wait := pause_s(headers, 0.0, self.clock() / 1000)) is None:
                    part.error = "rate-limited"
                    break
                if await stopped(stop, wait):
                    break
        except LogUnread as exc:
            part.error = exc.reason
        finally:
            await pages.aclose()
        return stop.is_set() or (part.error is not None and ends_pass(part.error, source))

    async def _missing(self, found: list[LoggedDelivery]) -> tuple[list[LoggedDelivery], int]:
        """Of ``found``, those the receiver never stored and no pass asked for, and how many of the never
        stored an earlier pass asked for: one round trip."""
        if not found:
            return [], 0
        now = self.clock()
        async with self.redis.pipeline(transaction=False) as pipe:
            for d in found:
                seen = remembered(self.keys.deliveries, identity(d.guid), now)
                REMEMBERED.in_pipeline(pipe, seen.keys, seen.args)
                pipe.zscore(self.keys.heal_asked, identity(d.guid))
            replies = await pipe.execute()
        return to_ask(found, [bool(r) for r in replies[::2]], [r is not None for r in replies[1::2]])

    async def _ask_all(
        self, source: LogSource, ask: list[LoggedDelivery], part: SourceReport, report: HealReport,
        holder: str, stop: asyncio.Event, dry_run: bool,
    ) -> str | None:
        """Ask for each in turn, paced; None when all were asked, else why the rest were not."""
        for d in ask:
            if stop.is_set():
                return "stopped"
            if dry_run:
                part.asked += 1
                self._row(report, source, d)
                continue
            if not await self.hold(holder):  # lost (a pause past its TTL): another router heals now
                return "lease-lost"
            verdict, headers = await self.log.redeliver(source, d.id)
            if verdict == "retry":
                return "rate-limited" if headers.get("x-ratelimit-remaining") == "0" else "unavailable"
            if verdict == "stop":
                return "credentials"
            await self._remember(d.guid)  # asked, or refused for good: never asked again in the window
            if verdict == "gone":
                part.gone += 1
            else:
                part.asked += 1
                self._row(report, source, d)
                if self.on_asked is not None:
                    self.on_asked(1)
                get_logger().info("heal_redelivery_requested", source=source.name, delivery=d.guid,
                                  forge_event=d.event)
            wait = pause_s(headers, self.pace_s, self.clock() / 1000)
            if wait is None:
                return "rate-limited"
            if await stopped(stop, wait):
                return "stopped"
        return None

    async def _remember(self, guid: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(self.keys.heal_asked, {identity(guid): self.clock()})
            pipe.pexpire(self.keys.heal_asked, self.window_ms)
            await pipe.execute()

    @staticmethod
    def _row(report: HealReport, source: LogSource, d: LoggedDelivery) -> None:
        if len(report.rows) < ROWS_MAX:
            report.rows.append(HealRow(source.name, d.guid, d.event, d.action, iso_ms(d.delivered_at),
                                       d.status_code))


class HealMarks:
    """Which decisions are of deliveries the healer asked GitHub to send again, for their ``healed`` mark.

    Off the hot path while nothing was asked: whether ``pd:heal-asked`` exists is read at most once a
    second (``HEAL_MARKS_RECHECK_S``), and a page pays its ``ZMSCORE`` only while it does. A redelivery
    decided within that second of the very first ask goes unmarked (stored and routed all the same).
    """

    __slots__ = ("_checked", "_exists", "_keys", "_redis")

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self._redis, self._keys = redis, keys
        self._checked = -HEAL_MARKS_RECHECK_S
        self._exists = False

    async def of(self, named: Sequence[tuple[str, str]]) -> list[bool]:
        """For each (forge, delivery), whether the healer asked for it."""
        now = time.monotonic()
        if now - self._checked >= HEAL_MARKS_RECHECK_S:
            self._exists = bool(await self._redis.exists(self._keys.heal_asked))
            self._checked = now
        if not named or not self._exists:
            return [False] * len(named)
        scores = await self._redis.zmscore(self._keys.heal_asked, [f"{f}:{d}" for f, d in named])
        return [score is not None for score in scores]


def require_logs(settings: Settings, config: ForgeConfig) -> None:
    """``PD_HEAL_INTERVAL_S`` with no log to read would heal nothing while looking configured: exit 2."""
    if settings.heal.interval_s is not None and not sources_of(block_of(config)):
        raise ConfigError("PD_HEAL_INTERVAL_S is set but no delivery log can be read; accepted: "
                          "GITHUB_AUTH_SOURCE=app (the App's log) or GITHUB_HEAL_HOOKS=owner/repo:hook_id "
                          "(repository webhooks' logs), or unset PD_HEAL_INTERVAL_S")


def delivery_log(sources: TokenSources, http: aiohttp.ClientSession) -> DeliveryLog | None:
    """The log reader over the router's own GitHub credentials (shared with its lookups), if any."""
    auth = sources.get(FORGE.name)
    return DeliveryLog(http, auth) if isinstance(auth, GithubAuth) else None


async def run_healer(
    settings: Settings, redis: Redis, keys: Keys, log: DeliveryLog | None, holder: str, stop: asyncio.Event,
    clock: EpochMsClock, on_asked: Callable[[int], None] | None = None, *, pace_s: float = HEAL_PACE_S,
) -> None:
    """A pass every ``PD_HEAL_INTERVAL_S`` (the first at once) by whichever router holds the lease then,
    until ``stop``; a router that finds it held waits for its next turn."""
    interval = settings.heal.interval_s
    if interval is None or log is None:  # off; without credentials ``require_logs`` refused the start
        return
    sources, window_ms = sources_of(log.auth.config), settings.heal.window_ms
    healer = Healer(redis, keys, log, sources, window_ms, clock, on_asked=on_asked, pace_s=pace_s)

    async def step() -> None:
        report = await healer.run_pass(holder, stop)
        if report.lease is None:
            _log_pass(report)

    await every(interval, step, stop, None, bug_event="heal_error")


def _log_pass(report: HealReport) -> None:
    for part in report.sources:
        fields = {"source": part.source, "read": part.read, "missing": part.missing, "asked": part.asked,
                  "before": part.before, "gone": part.gone}
        if part.error is not None:
            get_logger().warning("heal_pass", **fields, error=part.error)
        elif part.missing:
            get_logger().info("heal_pass", **fields)
