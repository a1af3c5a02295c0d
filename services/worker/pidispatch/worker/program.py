"""An operator's program run once for the worker (a secret resolver, a wait check): no shell, stdin from
/dev/null, its own process group, bounded by a timeout and by the job's abort, and always reaped.

Its output never reaches a log: stderr is only counted; stdout is kept up to a cap when the caller needs
the value (a resolver), else counted too (a check, whose exit code is its whole answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

KILL_GRACE_S = 2.0
READ_CHUNK = 16 * 1024


def executable_file(path: str) -> str | None:
    """The program's real path when it is an executable regular file now (symlinks followed), else None;
    blocking: call through a thread. Checked at each run, since the file may change after boot."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or not os.access(real, os.X_OK):
        return None
    return real


@dataclass(frozen=True)
class ProgramRun:
    """How one run ended. ``failure`` is ``spawn``, ``timeout``, ``abort`` or ``overflow`` (stdout past its
    cap) when it gave no exit code to judge; ``stdout`` holds what was kept (empty when only counted)."""

    code: int | None
    stdout: bytes
    stdout_bytes: int
    stderr_bytes: int
    failure: str | None = None


async def run_program(
    path: str, args: Sequence[str], *, env: Mapping[str, str], timeout_s: float, abort: asyncio.Event | None,
    stdout_cap: int | None,
) -> ProgramRun:
    """Run ``path`` with ``args`` once; never raises. ``stdout_cap`` None: stdout is counted, not kept."""
    if abort is not None and abort.is_set():
        return ProgramRun(None, b"", 0, 0, "abort")
    try:
        proc = await asyncio.create_subprocess_exec(
            path, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(env), start_new_session=True,
        )
    except OSError:
        return ProgramRun(None, b"", 0, 0, "spawn")
    collect = asyncio.create_task(_collect(proc, stdout_cap))
    aborted = asyncio.create_task(abort.wait()) if abort is not None else None
    try:
        waiting = {collect} if aborted is None else {collect, aborted}
        await asyncio.wait(waiting, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if collect.done():
            return collect.result()
        failure = "abort" if aborted is not None and aborted.done() else "timeout"
        return ProgramRun(None, b"", 0, 0, failure)
    finally:
        collect.cancel()
        if aborted is not None:
            aborted.cancel()
        await finish(proc)


async def _collect(proc: asyncio.subprocess.Process, cap: int | None) -> ProgramRun:
    """Read stdout (kept up to ``cap``) and count stderr (never read into memory), then the exit code."""
    if proc.stdout is None or proc.stderr is None:  # both were opened as pipes
        raise RuntimeError("program pipes missing")
    errs = asyncio.create_task(_count(proc.stderr))
    try:
        out, seen = bytearray(), 0
        while chunk := await proc.stdout.read(READ_CHUNK):
            seen += len(chunk)
            if cap is None:
                continue
            out += chunk
            if len(out) > cap:
                _signal(proc, signal.SIGKILL)
                return ProgramRun(None, b"", seen, 0, "overflow")
        stderr_bytes = await errs
        code = await proc.wait()
        return ProgramRun(code, bytes(out), seen, stderr_bytes)
    finally:
        errs.cancel()


def _signal(proc: asyncio.subprocess.Process, sig: int) -> None:
    # The program leads its own process group, so its helpers (a CLI it spawned) get the signal too.
    # Only while it is unreaped: after that its pid, and so the group id, may belong to someone else.
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


async def finish(proc: asyncio.subprocess.Process, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM, SIGKILL after ``grace_s``, then reap: the child never outlives the call."""
    if proc.returncode is None:
        _signal(proc, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            _signal(proc, signal.SIGKILL)
    try:
        await asyncio.wait_for(proc.wait(), grace_s)
    except TimeoutError:
        # Reaped, but something outside its group still holds a pipe: close our ends and move on.
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()


async def _count(stream: asyncio.StreamReader) -> int:
    total = 0
    while chunk := await stream.read(READ_CHUNK):
        total += len(chunk)
    return total
