"""The fleet gate on schedules: a worker installs (or prunes) the schedules its triggers file asks for only
when no live peer wants one of them defined differently.

Two hosts serving one schedule id with different patterns, runs or time zones would queue different
occurrence ids, so the at-most-once enqueue could not stop both from running: the gate refuses the change
(``cron_divergence_refused``), the running set stays, and it looks again every heartbeat. Only shared ids
are compared: hosts whose folders differ serve different sets by design. Each host publishes what it
wants, not what it serves, so hosts that take the same edit one after the other converge.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from pidispatch.common.log import get_logger
from pidispatch.common.registry import HostRow, RegistryUnreachable, read_live_hosts
from pidispatch.common.runtime import stopped
from pidispatch.worker.cron.schedules import Scheduler, definitions, fleet_fingerprint

if TYPE_CHECKING:
    pass


# ---- pure decisions -------------------------------------------------------------------------------


def conflicts(mine: Mapping[str, str], peers: Iterable[HostRow], me: str) -> list[HostRow]:
    """The live peers that want one of my schedule ids with another definition."""
    return [p for p in peers if p.name != me and any(p.cron_sigs.get(i, d) != d for i, d in mine.items())]


def divergent_ids(peers: Iterable[HostRow]) -> set[str]:
    """Schedule ids that two live hosts want defined differently (``schedules`` shows them divergent)."""
    seen: dict[str, set[str]] = {}
    for p in peers:
        for sid, d in p.cron_sigs.items():
            seen.setdefault(sid, set()).add(d)
    return {sid for sid, ds in seen.items() if len(ds) > 1}


# ---- the gate ---------------------------------------------------------------------------------------


class Gate:
    """Installs the scheduler's wanted set when the fleet agrees; re-checks while a refusal holds."""

    def __init__(self, scheduler: Scheduler, host: str, recheck_s: float) -> None:
        self.scheduler, self.host, self.recheck_s = scheduler, host, recheck_s
        self.refused: tuple[tuple[str, str], ...] = ()

    async def reconcile(self) -> None:
        """Install the wanted set unless a live peer diverges. An unreadable registry lets it through:
        with Redis down nothing fires anyway, and a boot must not wait on it."""
        s = self.scheduler
        wanted = s.wanted
        if wanted is None or wanted is s.installed:
            return
        mine = definitions(wanted.mine, s.tz)
        try:
            peers: Sequence[HostRow] = await read_live_hosts(s.redis, s.keys, s.clock())
        except RegistryUnreachable:
            peers = ()
        against = conflicts(mine, peers, self.host)
        if against:
            sides = tuple((p.name, p.fp_cron) for p in against)
            if sides != self.refused:  # once per change of who disagrees, not every beat
                self.refused = sides
                get_logger().warning(
                    "cron_divergence_refused", mine=fleet_fingerprint(mine), cronCount=len(mine),
                    peers=[{"host": p.name, "fpCron": p.fp_cron, "cronCount": p.cron_count} for p in against],
                    kept=sorted(s.active),
                )
            return
        if self.refused:
            get_logger().info("cron_divergence_cleared", fpCron=fleet_fingerprint(mine))
            self.refused = ()
        s.install(wanted)

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile on every new file and every ``recheck_s`` until stop. Never raises."""
        s = self.scheduler
        while not stop.is_set():
            s.changed.clear()
            try:
                await self.reconcile()
            except Exception as exc:  # a bug here must not end the worker's schedules
                get_logger().error("cron_gate_failed", error=type(exc).__name__)
            if await stopped(stop, self.recheck_s, wake=s.changed):
                return
