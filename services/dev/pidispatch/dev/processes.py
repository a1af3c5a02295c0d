"""dev's child processes: started so they die with it, recorded so the next dev finds any that did not.

Every child (redis-server, receiver, router, worker) runs in one process group apart from dev's (so the
terminal's Ctrl-C reaches dev alone, which stops them in order) and gets SIGTERM if dev dies
(``pidispatch.dev.deathsig``). ``dev.pids`` in the state folder holds dev's and each child's pid and
start time and is locked while dev runs: a second dev in the folder is refused by the lock, and after a
``kill -9`` the next start stops what the file names, each checked against /proc before any signal.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pidispatch.common import devstate
from pidispatch.common.errors import InfraError

PIDS_FILE = "dev.pids"
# redis-server last: the services stop while it still takes their last writes.
STOP_ORDER = ("worker", "router", "receiver", "redis-server")
ORPHAN_STOP_S = 8.0


@dataclass(frozen=True)
class Recorded:
    """A process as ``dev.pids`` names it: the start time (clock ticks since boot, /proc stat field 22)
    tells it from a later process that got the same pid."""

    name: str
    pid: int
    start: int


def start_time(pid: int) -> int | None:
    """The process's start time from /proc, None when there is no such process (or it is a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)[:120] or "?"


def parse_pids(text: str) -> tuple[Recorded | None, list[Recorded]]:
    """Pure: (dev, children) from a ``dev.pids`` text; nothing from a text that is not one."""
    try:
        data = json.loads(text)
        dev = data.get("dev")
        found = [Recorded(str(c["name"]), int(c["pid"]), int(c["start"])) for c in data.get("children", [])]
        return (Recorded("dev", int(dev["pid"]), int(dev["start"])) if dev else None), found
    except (ValueError, TypeError, KeyError, AttributeError):
        return None, []


def still_running(recorded: Sequence[Recorded], starts: Mapping[int, int | None]) -> list[Recorded]:
    """Pure: the recorded processes that still run (same pid *and* same start time), in stop order."""
    alive = [r for r in recorded if starts.get(r.pid) is not None and starts[r.pid] == r.start]
    rank = {name: i for i, name in enumerate(STOP_ORDER)}
    return sorted(alive, key=lambda r: rank.get(r.name, len(rank)))


def kill_line(found: Sequence[Recorded]) -> str:
    """Pure: the command that stops ``found``, as the operator would type it."""
    return "kill " + " ".join(str(r.pid) for r in found)


class PidFile:
    """``dev.pids``, locked for as long as this dev runs (the lock dies with the process, even on -9)."""

    def __init__(self, state: Path) -> None:
        self.path = state / PIDS_FILE
        self.children: list[Recorded] = []
        self._file: IO[str] | None = None

    def acquire(self) -> tuple[Recorded | None, list[Recorded]]:
        """Lock the file; what an earlier dev left in it. Raises when a dev holds it now."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        f = os.fdopen(fd, "r+")  # close-on-exec: no child keeps the lock
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            dev, _ = parse_pids(f.read())
            f.close()
            who = f"dev pid {dev.pid}" if dev else "another dev"
            raise InfraError(f"{who} already runs here ({self.path.parent}); stop it first (Ctrl-C in its "
                             f"terminal{f', or kill {dev.pid}' if dev else ''}), or give this one "
                             "another folder: pi-dispatch dev --dir DIR") from None
        self._file = f
        earlier = parse_pids(f.read())
        self._write()
        return earlier

    def add(self, name: str, pid: int) -> None:
        self.children.append(Recorded(name, pid, start_time(pid) or 0))
        self._write()

    def _write(self) -> None:
        if self._file is None:
            return
        me = os.getpid()
        data = {"dev": {"pid": me, "start": start_time(me) or 0},
                "children": [{"name": c.name, "pid": c.pid, "start": c.start} for c in self.children]}
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps(data) + "\n")
        self._file.flush()

    def release(self) -> None:
        """Every child has stopped: nothing for the next start to find."""
        if self._file is not None:
            self.children = []
            self._write()
            self._file.close()
            self._file = None


def refuse_live_dev_state(state: Path) -> None:
    """A dev of an older version (no ``dev.pids``) that still runs here is refused by its ``dev.json``."""
    found = devstate.read_state(state / devstate.STATE_FILE)
    if found is not None and found.pid != os.getpid() and devstate.pid_alive(found.pid):
        raise InfraError(f"dev pid {found.pid} already runs here ({state}); stop it first (Ctrl-C in its "
                         f"terminal, or kill {found.pid}), or give this one another folder: "
                         "pi-dispatch dev --dir DIR")


def _running(found: Sequence[Recorded]) -> list[Recorded]:
    return [r for r in found if start_time(r.pid) == r.start]


async def stop_orphans(earlier: tuple[Recorded | None, list[Recorded]]) -> None:
    """Stop what a dev that died without stopping its children left running, naming each; when this user
    may not signal them, say exactly what to stop."""
    dev, children = earlier
    found = still_running(children, {c.pid: start_time(c.pid) for c in children})
    if not found:
        return
    named = ", ".join(f"{r.name} pid {r.pid}" for r in found)
    who = f"an earlier dev here (pid {dev.pid})" if dev else "an earlier dev here"
    print(f"pi-dispatch dev: {who} left {named} running; stopping them", flush=True)
    refused = []
    for r in found:
        try:
            os.kill(r.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        except PermissionError:
            refused.append(r)
    signalled = [r for r in found if r not in refused]
    deadline = time.monotonic() + ORPHAN_STOP_S
    while time.monotonic() < deadline:
        if not _running(signalled):
            break
        await asyncio.sleep(0.1)  # another process's exit: nothing to await but /proc
    for r in _running(signalled):  # did not stop on SIGTERM within the deadline
        with contextlib.suppress(ProcessLookupError):
            os.kill(r.pid, signal.SIGKILL)
    if refused:
        raise InfraError(f"{', '.join(f'{r.name} pid {r.pid}' for r in refused)} of an earlier dev here "
                         f"still run and this user may not stop them; stop them: {kill_line(refused)}")


async def spawn(name: str, argv: Sequence[str], env: Mapping[str, str], pids: PidFile,
                group: list[int], *, quiet: bool = False) -> asyncio.subprocess.Process:
    """Start ``argv`` under the death-signal wrapper, in dev's children's process group (the first child
    makes it; outside the terminal's foreground group, so Ctrl-C reaches dev alone, which stops them in
    order), and record it in ``dev.pids``. ``quiet``: its output goes nowhere (redis-server logs itself)."""
    wrapped = [sys.executable, "-m", "pidispatch.dev.deathsig", str(os.getpid()), *argv]
    out = asyncio.subprocess.DEVNULL if quiet else None
    try:
        proc = await asyncio.create_subprocess_exec(
            *wrapped, env=dict(env), process_group=group[0] if group else 0, stdout=out, stderr=out)
    except PermissionError:  # the group's members have all exited: this child makes a new one
        group.clear()
        proc = await asyncio.create_subprocess_exec(
            *wrapped, env=dict(env), process_group=0, stdout=out, stderr=out)
    if not group:
        group.append(proc.pid)
    pids.add(name, proc.pid)
    return proc


async def stop_process(proc: asyncio.subprocess.Process, timeout: float) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


def stop_on_signals() -> tuple[asyncio.Event, asyncio.Event]:
    """(stop, hurry): SIGINT, SIGTERM and SIGHUP (a closed terminal) set ``stop``; a second one sets
    ``hurry``, which cuts the wait for running jobs short. Call inside the running loop."""
    loop = asyncio.get_running_loop()
    stop, hurry = asyncio.Event(), asyncio.Event()

    def signalled() -> None:
        (hurry if stop.is_set() else stop).set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, signalled)
    return stop, hurry
