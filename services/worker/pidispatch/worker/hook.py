"""The failure hook: an operator's program told that a job ended in failure (``PI_ON_FAILURE``).

It runs once a job's terminal record is written and its entry acked, with argv ``<job id> <outcome>
<reason> <host>``, no shell, no stdin or output, the worker's environment, for at most
``PI_ON_FAILURE_TIMEOUT_MS`` (then SIGTERM, and SIGKILL 2 s later). Fire and forget: the worker never
waits for it and it never raises. It fires for a terminal ``failed`` and for the stops a running agent
or the worker made after spend (``worker-abort``, ``runner-policy`` and the runner's own reasons); never
for ``completed``, a refusal before spend, or an operator's cancel.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping

from pidispatch.common.log import get_logger
from pidispatch.worker.engine.exitline import RUNNER_POLICY_REASONS
from pidispatch.worker.program import executable_file, finish

# Policy stops that come after spend: the agent ran and was stopped, by itself or by this worker.
AFTER_SPEND_POLICY = frozenset({"worker-abort", "runner-policy", *RUNNER_POLICY_REASONS})
_REASON_RE = re.compile(r"^[a-z0-9-]{1,40}$")


def hook_args(job_id: str, outcome: str, reason: str | None, host: str) -> list[str] | None:
    """The hook's arguments for a job that ended so, or None when it does not fire. Pure."""
    if outcome == "policy" and reason not in AFTER_SPEND_POLICY:
        return None
    if outcome not in ("failed", "policy"):
        return None
    token = reason if reason is not None and _REASON_RE.fullmatch(reason) else "infra"
    args = [job_id, outcome, token, host]
    # An argument that reads as an option could steer the operator's program.
    return None if any(a.startswith("-") or not a for a in args) else args


async def run_hook(path: str, args: list[str], timeout_ms: int, env: Mapping[str, str]) -> int | None:
    """Run the hook once; its exit code, or None when it could not start or had to be killed."""
    log = get_logger()
    program = await asyncio.to_thread(executable_file, path)  # it may change between calls
    if program is None:
        log.warning("on_failure", job=args[0], code=None, detail="not-executable")
        return None
    try:
        proc = await asyncio.create_subprocess_exec(
            program, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, env=dict(env), start_new_session=True,
        )
    except OSError as exc:
        log.warning("on_failure", job=args[0], code=None, detail=type(exc).__name__)
        return None
    try:
        code = await asyncio.wait_for(proc.wait(), timeout_ms / 1000)
    except TimeoutError:
        await finish(proc)  # the hook leads its own session: its whole group is stopped
        log.warning("on_failure", job=args[0], code=None, detail="timeout")
        return None
    log.info("on_failure", job=args[0], code=code, detail="ran")
    return code


class FailureHook:
    """Starts the hook without waiting for it; keeps each run until it ends, so none is collected early."""

    def __init__(self, path: str | None, timeout_ms: int, env: Mapping[str, str]) -> None:
        self.path, self.timeout_ms, self.env = path, timeout_ms, env
        self._running: set[asyncio.Task[None]] = set()

    def fire(self, job_id: str, outcome: str, reason: str | None, host: str) -> None:
        if self.path is None or (args := hook_args(job_id, outcome, reason, host)) is None:
            return
        task = asyncio.create_task(self._run(self.path, args))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, path: str, args: list[str]) -> None:
        try:
            await run_hook(path, args, self.timeout_ms, self.env)
        except Exception as exc:  # the hook never takes the worker down
            get_logger().error("on_failure_error", job=args[0], error=type(exc).__name__)

    async def drain(self, timeout_s: float) -> None:
        """At shutdown: let running hooks finish (each is bounded by its own timeout)."""
        if self._running:
            await asyncio.wait(set(self._running), timeout=timeout_s)
