"""Cron schedules: which cron triggers this host serves, when each fires next, and the loop that fires them.

Every worker whose disk has a schedule's folder serves it, and each occurrence becomes one local job whose
id, ``repeat:<id>:<epoch ms>``, is the ENQUEUE dedup key: however many hosts serve a schedule, an
occurrence is queued once. A host that was down across an occurrence fires nothing for it (no catch-up).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from pidispatch.common.cronpattern import MIN_INTERVAL_DEFAULT_S, next_occurrence, occurrence_id
from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import REDIS_OP_TIMEOUT_S
from pidispatch.common.log import get_logger
from pidispatch.common.models import LOCAL_KIND, Job, Trigger
from pidispatch.common.redis import bounded
from pidispatch.common.runtime import EpochMsClock, stopped
from pidispatch.triggers.loader import load_triggers
from pidispatch.triggers.rules import CronRule
from pidispatch.worker.cron.firings import record_firing, torn_down
from pidispatch.worker.local import enqueue_once

if TYPE_CHECKING:
    from pidispatch.common.keys import Keys
    from pidispatch.common.redis import Redis

# How late an occurrence may still fire: a loop tick or a slow Redis, never a host that was down.
GRACE_MS = 2000
# The loop re-reads its set at least this often, so a reload or a clock step is seen promptly.
TICK_S = 0.5
_ZONEINFO = "zoneinfo/"


# ---- pure decisions -------------------------------------------------------------------------------


def host_zone(env: Mapping[str, str]) -> tuple[ZoneInfo, str]:
    """The zone patterns are read in, and its name: ``TZ`` when set, else the system's ``/etc/localtime``
    (else UTC). A ``TZ`` that names no IANA zone raises ``ConfigError``: a silent UTC would fire
    every schedule at the wrong hour."""
    raw = (env.get("TZ") or "").strip().removeprefix(":")
    if raw:
        try:
            return ZoneInfo(raw), raw
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(f"TZ {raw!r} is not an IANA time zone; accepted: a name such as "
                              "Europe/Amsterdam, or unset for the system zone") from None
    try:
        target = os.path.realpath("/etc/localtime")
        name = target.split(_ZONEINFO, 1)[1] if _ZONEINFO in target else "localtime"
        with open("/etc/localtime", "rb") as f:
            return ZoneInfo.from_file(f, key=name), name
    except (OSError, ValueError):
        return ZoneInfo("UTC"), "UTC"


def served(rules: Iterable[CronRule], has_folder: Callable[[str], bool]) -> tuple[CronRule, ...]:
    """The schedules this host serves: those whose ``run.folder`` is an absolute folder on its disk."""
    return tuple(r for r in rules if os.path.isabs(str(r.run["folder"])) and has_folder(r.run["folder"]))


def load_schedules(
    path: str, has_folder: Callable[[str], bool] = os.path.isdir, *,
    cron_floor_s: int = MIN_INTERVAL_DEFAULT_S,
) -> Loaded:
    """The file's cron rules and those this host serves (blocking: call through a thread). A bad file
    raises the loader's ``ConfigError``."""

    rules = load_triggers(path, cron_floor_s=cron_floor_s).cron
    return Loaded(rules=rules, mine=served(rules, has_folder))


def cron_job(rule: CronRule, at_ms: int, now_ms: int) -> Job:
    """Pure: the local job of one occurrence. Every run field the loader accepted is carried over."""
    run = rule.run
    folder = str(run["folder"])
    return Job(
        id=occurrence_id(rule.id, at_ms), kind=LOCAL_KIND,
        repo=f"local:{os.path.basename(folder.rstrip('/'))}", folder=folder, task=run.get("task"),
        flow=run.get("flow"), command=run.get("command"), provider=run.get("provider"),
        model=run.get("model"), max_turns=run.get("maxTurns"), models=_list(run.get("models")),
        image=run.get("image"), backend=run.get("backend"), exclude_tools=_list(run.get("excludeTools")),
        max_cost_usd=run.get("maxCostUsd"), secrets=run.get("secrets"),
        secrets_profile=run.get("secretsProfile"),
        trigger=Trigger(event="cron", id=rule.id, pattern=rule.pattern), enqueued_at=now_ms,
    )


def _list(value: object) -> list[str] | None:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else None


def due(nexts: Mapping[str, int], now_ms: int) -> tuple[list[str], list[str]]:
    """Which schedules to fire now and which occurrences are too late to fire (more than the grace)."""
    fire = sorted(i for i, at in nexts.items() if now_ms - GRACE_MS <= at <= now_ms)
    missed = sorted(i for i, at in nexts.items() if at < now_ms - GRACE_MS)
    return fire, missed


# ---- the serving loop -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Loaded:
    rules: tuple[CronRule, ...]
    mine: tuple[CronRule, ...]


def definitions(rules: Iterable[CronRule], tz: str) -> dict[str, str]:
    """Each schedule's definition in 12 hex: its pattern, its whole run and the zone it is read in."""
    def digest(r: CronRule) -> str:
        return hashlib.sha256(msgspec.json.encode([tz, r.id, r.pattern, r.run], order="sorted")).hexdigest()

    return {r.id: digest(r)[:12] for r in rules}


def fleet_fingerprint(defs: Mapping[str, str]) -> str:
    """The whole wanted set in 16 hex (the host row's ``fpCron``); empty when the host wants none."""
    if not defs:
        return ""
    material = "\n".join(sorted(f"{i}={d}" for i, d in defs.items()))
    return hashlib.sha256(material.encode()).hexdigest()[:16]



@dataclass
class Scheduler:
    """The schedules this worker serves and each one's next occurrence. ``swap`` takes a new file's set
    as wanted; the fleet gate (``crongate``) calls ``install`` once no live peer defines one of them
    differently; ``run`` fires occurrences until stop."""

    redis: Redis
    keys: Keys
    stream: str
    clock: EpochMsClock
    zone: ZoneInfo
    tz: str
    rules: tuple[CronRule, ...] = ()
    active: dict[str, CronRule] = field(default_factory=dict)
    nexts: dict[str, int] = field(default_factory=dict)
    unserved: set[str] = field(default_factory=set)
    wanted: Loaded | None = None
    installed: Loaded | None = None
    # Set by ``swap`` so the gate looks at a new file at once rather than at its next re-check.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def swap(self, loaded: Loaded) -> None:
        """Want ``loaded.mine``; the file's other schedules are logged ``schedule_unserved`` once."""
        log = get_logger()
        mine = {r.id for r in loaded.mine}
        for rule in loaded.rules:
            if rule.id not in mine and rule.id not in self.unserved:
                self.unserved.add(rule.id)
                log.info("schedule_unserved", id=rule.id, reason="folder-not-on-this-host")
        self.unserved &= {r.id for r in loaded.rules} - mine
        self.wanted = loaded
        self.changed.set()

    def install(self, loaded: Loaded) -> None:
        """Serve ``loaded.mine``: a kept schedule keeps its next occurrence, a dropped one is pruned."""
        mine = {r.id: r for r in loaded.mine}
        for sid in sorted(set(self.active) - set(mine)):
            get_logger().info("scheduler_removed_orphan", id=sid)
            self.nexts.pop(sid, None)
        now = self.clock()
        for sid, rule in mine.items():
            old = self.active.get(sid)
            if old is None or old.pattern != rule.pattern or sid not in self.nexts:
                self.nexts[sid] = next_occurrence(rule.pattern, now, self.zone)
        self.active, self.rules, self.installed = mine, loaded.rules, loaded

    def row_fields(self) -> dict[str, str]:
        """The host row's cron fields. ``cron``/``cronCount``: the ids served now (token-safe by the
        loader). ``fpCron``/``cronSigs``: what this host *wants* to serve, so two hosts that take the
        same edit each see the other's new definitions and install instead of waiting on each other.
        ``tz``: the IANA zone its patterns are read in."""
        ids = sorted(self.active)
        defs = definitions(self.wanted.mine if self.wanted else (), self.tz)
        return {"cron": ",".join(ids), "cronCount": str(len(ids)), "fpCron": fleet_fingerprint(defs),
                "cronSigs": ",".join(f"{i}={d}" for i, d in sorted(defs.items())), "tz": self.tz}

    async def run(self, stop: asyncio.Event) -> None:
        """Fire due occurrences until ``stop``. Never raises: one failed enqueue loses that occurrence on
        this host only (a peer serving the schedule may still queue it)."""
        while not stop.is_set():
            try:
                await self._tick(self.clock())
            except Exception as exc:  # a bug here must not end every schedule of the host
                get_logger().error("schedules_tick_failed", error=type(exc).__name__)
            wait_ms = min(self.nexts.values(), default=self.clock() + 1000) - self.clock()
            if await stopped(stop, min(TICK_S, max(wait_ms, 0) / 1000)):
                return

    async def _tick(self, now: int) -> None:
        fire, missed = due(self.nexts, now)
        taken = {sid: self.nexts[sid] for sid in (*fire, *missed)}
        for sid in missed:
            get_logger().warning("schedule_missed", id=sid, scheduledFor=taken[sid], lateMs=now - taken[sid])
        for sid in fire:
            if sid in self.active and self.nexts.get(sid) == taken[sid]:
                await self._fire(self.active[sid], taken[sid], now)
        for sid, at in taken.items():
            # A reload during a fire may have removed or re-timed the schedule: its value stands.
            if self.nexts.get(sid) != at or sid not in self.active:
                continue
            after = max(at, now - GRACE_MS)  # never one that is already too late
            self.nexts[sid] = next_occurrence(self.active[sid].pattern, after, self.zone)

    async def _fire(self, rule: CronRule, at_ms: int, now_ms: int) -> None:

        job = cron_job(rule, at_ms, now_ms)
        try:
            if await bounded(torn_down(self.redis, self.keys, rule.id), REDIS_OP_TIMEOUT_S):
                get_logger().warning("schedule_torn_down", id=rule.id, jobId=job.id)
                return
            status, job_id, _ = await bounded(
                enqueue_once(self.redis, self.keys, self.stream, job), 2 * REDIS_OP_TIMEOUT_S
            )
            if status == "queued":
                await bounded(record_firing(self.redis, self.keys, job_id), REDIS_OP_TIMEOUT_S)
        except Exception as exc:  # Redis down, a script fault: this occurrence is lost here, not the loop
            get_logger().warning("schedule_fire_failed", id=rule.id, jobId=job.id, error=type(exc).__name__)
            return
        get_logger().info("schedule_fired", id=rule.id, jobId=job_id, status=status, lateMs=now_ms - at_ms)
