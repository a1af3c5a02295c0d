"""The wait gate: a job whose rule says ``run.waitFor`` starts only once its conditions hold.

It runs at pickup, before anything is reserved, and answers go, defer (back to ``pd:delayed``: no attempt
used, nothing recorded) or refuse (a ``policy`` record with its ``wait-*`` reason, nothing reserved):

- ``{"after": <instant>}``: held until the instant exactly (no polling);
- ``{"profile": <name>}``: the check ``PI_WAIT_PROFILES`` names runs as ``<check> <owner/repo#N>`` (``!N``
  for GitLab and Azure pull requests), no shell, its output only counted: exit 0 go, 3 not yet, 2 never
  (``wait-refused``), anything else (a crash, a timeout) a fault. Not yet and faults come back after a
  backoff that doubles every ten intervals, within ``PI_WAIT_MAX_MS``, ``PI_WAIT_MAX_CHECKS`` and
  ``PI_WAIT_MAX_FAULTS`` (in a row), each tested after the check so a condition that cleared on the
  deciding wake still runs.

Two jobs for one target never both wait and run: the first to hold takes the target's lease and a second
is refused ``wait-superseded`` while the first waits, and for 15 minutes after its wait cleared.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pidispatch.common.keys import WAIT_AFTER_SLACK_MS, WAIT_THROTTLE_MIN_MS, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.waitsettings import WaitSettings
from pidispatch.triggers.jobs import item_ref, semantic_key
from pidispatch.triggers.waitfor import WAIT_CONDITION_MAX, after_instant_ms
from pidispatch.worker.engine.runner import OPERATOR_CANCEL, Abort
from pidispatch.worker.program import ProgramRun, executable_file, run_program
from pidispatch.worker.waits import state as waitstate

BACKOFF_CAP_MS = 900_000
JITTER = 0.10
GO, NOT_YET, NEVER, FAULT, ABORTED = "go", "not-yet", "never", "fault", "aborted"


@dataclass(frozen=True)
class Defer:
    """Back to ``pd:delayed`` for ``delay_ms``; ``why`` is logged."""

    delay_ms: int
    why: str


@dataclass(frozen=True)
class Refuse:
    reason: str


WaitVerdict = Defer | Refuse | None


# ---- pure decisions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conditions:
    after_ms: int | None
    profiles: tuple[str, ...]


def read_conditions(raw: Sequence[Mapping[str, str]]) -> Conditions | None:
    """The job's conditions as this worker reads them, or None when one is unreadable (the loader's rules:
    one ``after`` at most, known keys only, up to four)."""
    after: int | None = None
    profiles: list[str] = []
    if not 1 <= len(raw) <= WAIT_CONDITION_MAX:
        return None
    for condition in raw:
        if not isinstance(condition, Mapping) or len(condition) != 1:
            return None
        ((key, value),) = condition.items()
        if key == "after" and after is None and (at := after_instant_ms(value)) is not None:
            after = at
        elif key == "profile" and isinstance(value, str) and value and value not in profiles:
            profiles.append(value)
        else:
            return None
    return Conditions(after, tuple(profiles))


def dedup_id(job: Job) -> str:
    """The target of a wait: the job's dedup key and the rule that matched, so two rules on one item wait
    apart."""
    matched = job.trigger.matched if job.trigger else None
    index = str(matched.index) if matched is not None and matched.index is not None else "?"
    return f"{semantic_key(job)}#{index}"


def backoff_ms(base_ms: int, elapsed_ms: int) -> int:
    """``base * 2^floor(elapsed / (10 * base))`` within ``[base, max(15 min, base)]``."""
    step: int = min(max(elapsed_ms, 0) // (10 * base_ms), 32)
    return min(base_ms * (1 << step), max(BACKOFF_CAP_MS, base_ms))


def answer(run: ProgramRun) -> str:
    """One check run as go, not yet, never, a fault, or aborted (counted as nothing)."""
    if run.failure == "abort":
        return ABORTED
    if run.failure is not None or run.code is None:
        return FAULT
    return {0: GO, 3: NOT_YET, 2: NEVER}.get(run.code, FAULT)


def after_check(s: WaitSettings, *, checks: int, faults: int, held_ms: int) -> str | None:
    """The bound a held profile wait has reached after a check, or None while it may wait on."""
    if faults >= s.max_faults:
        return "wait-unanswerable"
    if checks >= s.max_checks or held_ms >= s.max_ms:
        return "wait-expired"
    return None


# ---- the gate ---------------------------------------------------------------------------------------


class WaitGate:
    """One per worker: its check slots are shared by every job it holds."""

    def __init__(
        self, settings: WaitSettings, redis: Redis, keys: Keys, clock: EpochMsClock, env: Mapping[str, str],
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.s, self.redis, self.keys, self.clock = settings, redis, keys, clock
        self.env, self.rand = env, rand
        self.profiles = dict(settings.profiles)
        self.slots = asyncio.Semaphore(settings.check_slots)

    def _jitter(self, ms: int) -> int:
        return ms + int(ms * JITTER * self.rand())

    async def decide(self, job: Job, abort: Abort) -> WaitVerdict:
        """Go (None), defer or refuse. Redis errors propagate: the job is then held, never refused."""
        if not job.wait_for:
            return None
        target = dedup_id(job)
        verdict = await self._decide(job, target, abort)
        if isinstance(verdict, Refuse):
            await waitstate.release_hold(self.redis, self.keys, job.id, target, cleared=False)
            get_logger().info("wait_refused", job=job.id, reason=verdict.reason)
        elif isinstance(verdict, Defer):
            get_logger().info("wait_deferred", job=job.id, why=verdict.why, delayMs=verdict.delay_ms)
        return verdict

    async def _decide(self, job: Job, target: str, abort: Abort) -> WaitVerdict:
        now = self.clock()
        done = await waitstate.done_by(self.redis, self.keys, target)
        if done is not None and done != job.id:
            return Refuse("wait-superseded")
        conditions = read_conditions(job.wait_for or ())
        if conditions is None:
            return Refuse("wait-unreadable")
        if any(p not in self.profiles for p in conditions.profiles):
            return Refuse("wait-profile-unknown")
        after = conditions.after_ms
        if after is not None and after - now > self.s.after_max_ms:
            return Refuse("wait-after-beyond-max")
        if after is not None and after > now + WAIT_AFTER_SLACK_MS:
            return await self._hold(job, target, now, until=after, why="after")
        if conditions.profiles:
            verdict = await self._check(job, target, conditions, abort)
            if verdict is not None:
                return verdict
        hold = await waitstate.read_hold(self.redis, self.keys, job.id)
        cleared = hold is not None and hold.held  # only a wait that really held leaves the done marker
        await waitstate.release_hold(self.redis, self.keys, job.id, target, cleared=cleared)
        if hold is not None:
            get_logger().info("wait_cleared", job=job.id, heldForMs=now - hold.since)
        return None

    async def _hold(self, job: Job, target: str, now: int, *, until: int, why: str) -> WaitVerdict:
        ttl = waitstate.hold_ttl_ms(now, until)
        holder = await waitstate.take_hold(
            self.redis, self.keys, job_id=job.id, dedup_id=target, ttl_ms=ttl, now_ms=now,
            fields=self._fields(job, target),
        )
        if holder is not None:
            return Refuse("wait-superseded")
        await waitstate.mark_deferred(self.redis, self.keys, job.id, next_ms=until, ttl_ms=ttl)
        return Defer(until - now, why)

    def _fields(self, job: Job, target: str) -> dict[str, str]:
        return {"target": item_ref(job), "dedupId": target,
                "conditions": waitstate.conditions_json(job.wait_for or ())}

    async def _check(self, job: Job, target: str, conditions: Conditions, abort: Abort) -> WaitVerdict:
        """Run the profiles in order, stopping at the first that is not go; None when all said go. The
        bounds of a profile wait count from its ``after`` instant, not from a hold before it."""
        now = self.clock()
        prior = await waitstate.read_hold(self.redis, self.keys, job.id)
        since = max(prior.since if prior is not None else now, conditions.after_ms or 0)
        if self.slots.locked():
            first, throttles = await waitstate.note_throttle(self.redis, self.keys, job.id, now,
                                                             self._fields(job, target))
            since = max(first, conditions.after_ms or 0)
            if throttles == 5:
                get_logger().warning("wait_capacity_exceeded", job=job.id, slots=self.s.check_slots)
            if now - since >= self.s.max_ms:
                return Refuse("wait-expired")
            base = max(WAIT_THROTTLE_MIN_MS, backoff_ms(self.s.interval_ms, now - since) // 4)
            return Defer(self._jitter(base), "check-throttled")
        async with self.slots:
            if await waitstate.take_hold(self.redis, self.keys, job_id=job.id, dedup_id=target,
                                         ttl_ms=waitstate.hold_ttl_ms(now, now + self.s.max_ms),
                                         now_ms=now, fields=self._fields(job, target)) is not None:
                return Refuse("wait-superseded")
            said = await self._run_profiles(job, conditions.profiles, abort)
        if said == GO:
            return None
        if said == ABORTED:
            if abort.reason == OPERATOR_CANCEL:
                return Refuse(OPERATOR_CANCEL)
            return Defer(WAIT_THROTTLE_MIN_MS, "check-aborted")
        if said in (NEVER, "wait-profile-unknown"):
            return Refuse("wait-refused" if said == NEVER else said)
        checks, faults = await waitstate.note_check(self.redis, self.keys, job.id, fault=said == FAULT)
        now = self.clock()
        held = now - since
        bound = after_check(self.s, checks=checks, faults=faults, held_ms=held)
        if bound is not None:
            return Refuse(bound)
        delay = max(1000, min(self._jitter(backoff_ms(self.s.interval_ms, held)), self.s.max_ms - held))
        await waitstate.mark_deferred(self.redis, self.keys, job.id, next_ms=now + delay,
                                      ttl_ms=waitstate.hold_ttl_ms(now, now + delay))
        return Defer(delay, "check-" + said)

    async def _run_profiles(self, job: Job, profiles: Sequence[str], abort: Abort) -> str:
        ref = item_ref(job)
        for name in profiles:
            program = await asyncio.to_thread(executable_file, self.profiles[name])
            if program is None:
                return "wait-profile-unknown"  # declared at boot, gone or not executable now
            run = await run_program(program, [ref], env=self.env, timeout_s=self.s.check_timeout_ms / 1000,
                                    abort=abort, stdout_cap=None)
            said = answer(run)
            get_logger().info("wait_checked", job=job.id, profile=name, answer=said, code=run.code,
                              failure=run.failure, stdoutBytes=run.stdout_bytes, stderrBytes=run.stderr_bytes)
            if said != GO:
                return said
        return GO
