"""Run one container to its end through the Engine API, and classify how it ended (docs/worker.md).

Job containers are created without AutoRemove, so an exited container keeps its exit code and output
until the worker has written the record of its end: the exit code comes from a
``wait`` on ``not-running`` and the output from ``logs`` after the exit, both safe at any time after the
start, and the same for a run this process started and one a crashed process left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiodocker
import aiohttp
from aiodocker.containers import DockerContainer
from aiodocker.exceptions import DockerError

from pidispatch.common.errors import InfraError
from pidispatch.common.faults import crash_point
from pidispatch.common.instance import LABEL_INSTANCE
from pidispatch.common.log import get_logger
from pidispatch.common.outcome import OutcomeName
from pidispatch.worker.engine import dockerapi
from pidispatch.worker.engine.container import (
    JOB_MOUNT,
    LABEL_HOST,
    LABEL_JOB,
    ContainerSpec,
    to_docker_config,
)
from pidispatch.worker.engine.exitline import TAIL_BYTES, Tail

STOP_TIMEOUT_S = 5
# After a stop, how long the container gets to actually exit before the slot is freed anyway.
STOP_TAKE_S = 30.0
# How long reading an exited container's output may take (it is on the daemon's disk already).
LOGS_S = 30.0
ABORTED_CODE = 137
NEVER_STARTED = frozenset({125, 126, 127})
OPERATOR_CANCEL = "operator-cancel"
JOB_TIMEOUT = "job-timeout"
# Every line is at least one byte, so this many last lines always hold the last TAIL_BYTES of output.
TAIL_LINES = TAIL_BYTES
FRAME_HEADER = 8

OnStarted = Callable[[str], Awaitable[None]]


class DockerUnavailable(InfraError):
    """The daemon did not answer; the job stays pending and is retried once Docker is back."""


class ContainerGone(Exception):
    """The container to follow no longer exists, so its exit code is lost."""


class Abort(asyncio.Event):
    """An abort request that carries why (a reason token) and how long the container gets to stop."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None
        self.stop_timeout_s = STOP_TIMEOUT_S

    def trigger(self, reason: str, *, stop_timeout_s: int = STOP_TIMEOUT_S) -> None:
        if not self.is_set():
            self.reason, self.stop_timeout_s = reason, stop_timeout_s
            self.set()


@dataclass(frozen=True, kw_only=True)
class RunResult:
    exit_code: int
    aborted: bool
    abort_reason: str | None
    tail: bytes
    container_id: str | None


def classify(result: RunResult) -> tuple[OutcomeName, str | None]:
    """Pure: (outcome, reason). The abort flag decides, not the code (an OOM kill is 137 too)."""
    if result.aborted:
        return "policy", OPERATOR_CANCEL if result.abort_reason == OPERATOR_CANCEL else "worker-abort"
    code = result.exit_code
    if code == 0:
        return "completed", None
    if code == 2:
        return "policy", "runner-policy"
    if code in NEVER_STARTED:
        return "failed", "container-never-started"
    return "failed", f"container-exit-{code}"


def is_unreachable(exc: BaseException) -> bool:
    """A daemon that cannot be reached (as opposed to one that answered with a refusal)."""
    if isinstance(exc, DockerError):
        return exc.status == 900
    return isinstance(exc, (aiohttp.ClientError, TimeoutError, ConnectionError))


def _unavailable(exc: BaseException) -> DockerUnavailable:
    return DockerUnavailable(f"Docker daemon not answering ({type(exc).__name__})")


def never_started_code(message: str) -> int:
    """The exit code ``docker run`` reports for a start the runtime refused (125/126/127)."""
    text = message.lower()
    if "executable file not found" in text or "no such file or directory" in text:
        return 127
    if "permission denied" in text:
        return 126
    return 125


def _never_started(exc: DockerError, container_id: str | None) -> RunResult:
    return RunResult(
        exit_code=never_started_code(exc.message), aborted=False, abort_reason=None, tail=b"",
        container_id=container_id,
    )


async def _exit_code(docker: aiodocker.Docker, container_id: str) -> int:
    """The exit code once the container is not running (at once if it already exited)."""
    resp = await dockerapi.wait_exit(docker, container_id)
    try:
        data: Any = await resp.json(content_type=None)
    finally:
        resp.release()
    code = data.get("StatusCode") if isinstance(data, dict) else None
    return code if isinstance(code, int) else ABORTED_CODE


async def _frames(content: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The payloads of Docker's multiplexed stdout/stderr stream (8-byte header: kind, 0, 0, 0, size)."""
    while True:
        try:
            header = await content.readexactly(FRAME_HEADER)
            payload = await content.readexactly(int.from_bytes(header[4:], "big"))
        except asyncio.IncompleteReadError:
            return
        yield payload


def _open_capture(path: str) -> int:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


async def _output(docker: aiodocker.Docker, container_id: str, capture: str | None) -> bytes:
    """The exited container's output: its last 8 KiB for the exit line, all of it into ``capture``.

    Best effort: a broken stream must not change the outcome. It is never logged (payload text); with
    PI_CAPTURE_JOB_LOGS=1 it is appended to the job's own file beside its record, on this host only.
    """
    tail = Tail()
    fd: int | None = None
    if capture is not None:
        try:
            fd = await asyncio.to_thread(_open_capture, capture)
        except OSError as exc:
            get_logger().warning("job_log_capture_failed", error=type(exc).__name__)
    params: dict[str, Any] = {"stdout": True, "stderr": True}
    if fd is None:
        params["tail"] = TAIL_LINES
    try:
        async with asyncio.timeout(LOGS_S):
            resp = await dockerapi.logs(docker, container_id, params)
            try:
                async for chunk in _frames(resp.content):
                    tail.feed(chunk)
                    if fd is not None:
                        await asyncio.to_thread(os.write, fd, chunk)
            finally:
                resp.release()
    except (DockerError, aiohttp.ClientError, TimeoutError, ConnectionError, OSError) as exc:
        get_logger().warning("job_output_unreadable", error=type(exc).__name__)
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    return tail.bytes()


async def force_remove(container: DockerContainer) -> None:
    """Remove a container whatever its state; never raises (it may already be gone)."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(container.delete(force=True), 10)


async def _stop(container: DockerContainer, t: int) -> None:
    with contextlib.suppress(Exception):
        await container.stop(t=t)


async def _supervise(
    container: DockerContainer, exit_task: asyncio.Task[int], abort: asyncio.Event, timeout_s: float
) -> tuple[int, bool, str | None]:
    """Wait for the exit, or stop the container on timeout/abort. Returns (code, aborted, reason)."""
    abort_wait = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({exit_task, abort_wait}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        abort_wait.cancel()
    if exit_task.done() and not abort.is_set():
        return exit_task.result(), False, None
    reason = (getattr(abort, "reason", None) or "worker-abort") if abort.is_set() else JOB_TIMEOUT
    stop_t = getattr(abort, "stop_timeout_s", STOP_TIMEOUT_S) if abort.is_set() else STOP_TIMEOUT_S
    if exit_task.done():
        return exit_task.result(), True, reason
    stopper = asyncio.create_task(_stop(container, stop_t))
    try:
        await asyncio.wait({exit_task}, timeout=stop_t + STOP_TAKE_S)
    finally:
        stopper.cancel()
    if not exit_task.done():
        get_logger().warning("stop_did_not_take", container=container.id[:12])
        exit_task.cancel()
        return ABORTED_CODE, True, reason
    try:
        return exit_task.result(), True, reason
    except Exception:
        return ABORTED_CODE, True, reason


async def follow(
    docker: aiodocker.Docker, container_id: str, *, timeout_s: float, abort: asyncio.Event,
    capture: str | None = None,
) -> RunResult:
    """Follow a started container (this process's, or one a crashed one left) to its end.

    The container stays until the caller has recorded its end and removes it. Raises ``ContainerGone``
    when it no longer exists and ``DockerUnavailable`` when the daemon stops answering.
    """
    container = docker.containers.container(container_id)
    exit_task = asyncio.create_task(_exit_code(docker, container_id))
    try:
        code, aborted, reason = await _supervise(container, exit_task, abort, timeout_s)
    except DockerError as exc:
        if exc.status == 404:
            raise ContainerGone(container_id[:12]) from None
        raise _unavailable(exc) from None
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        raise _unavailable(exc) from None
    finally:
        exit_task.cancel()
    tail = await _output(docker, container_id, capture)
    return RunResult(
        exit_code=code, aborted=aborted, abort_reason=reason, tail=tail, container_id=container_id
    )


async def run_container(
    docker: aiodocker.Docker,
    spec: ContainerSpec,
    *,
    timeout_s: float,
    abort: asyncio.Event,
    on_started: OnStarted | None = None,
    capture: str | None = None,
) -> RunResult:
    """Create, start and follow one container to its end; it is left for the caller to remove.

    Raises ``SpecRefused`` for a spec the translator refuses and ``DockerUnavailable`` when the daemon
    stops answering (a container already started is then left for re-attach, never started twice).
    """
    if abort.is_set():
        return RunResult(
            exit_code=ABORTED_CODE, aborted=True, abort_reason=getattr(abort, "reason", None),
            tail=b"", container_id=None,
        )
    config = to_docker_config(spec)
    try:
        container = await docker.containers.create(config, name=spec.name)
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        raise _unavailable(exc) from None
    except DockerError as exc:
        if is_unreachable(exc):
            raise _unavailable(exc) from None
        return _never_started(exc, None)
    crash_point("worker_after_create")
    try:
        await container.start()
    except DockerError as exc:
        await force_remove(container)
        if is_unreachable(exc):
            raise _unavailable(exc) from None
        return _never_started(exc, container.id)
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        await force_remove(container)
        raise _unavailable(exc) from None
    except asyncio.CancelledError:
        # One that never started is removed, as nothing was spent.
        await asyncio.shield(force_remove(container))
        raise
    if on_started is not None:
        await on_started(container.id)
    # A shutdown past its grace cancels this and leaves the container running for the next start to
    # re-attach (it carries this host's labels).
    return await follow(docker, container.id, timeout_s=timeout_s, abort=abort, capture=capture)


# ---- what an earlier process left --------------------------------------------------------------------


@dataclass(frozen=True)
class Leftover:
    """A container an earlier worker process made for a job, and the job folder it mounted.

    ``started`` is false when it was only created (and is removed by now): nothing was spent.
    """

    container_id: str
    job_dir: str | None
    started: bool = True


def _job_filter(job_id: str, host: str) -> str:
    return json.dumps({"label": [f"{LABEL_JOB}={job_id}", f"{LABEL_HOST}={host}"]})


def is_ours(labels: dict[str, str], instance: str) -> bool:
    """Pure: a container of this deployment. One without the label was made before containers carried it
    (an upgrade under a running job); its job id and host already matched, and it is taken as ours."""
    found = labels.get(LABEL_INSTANCE)
    return found is None or found == instance


async def _list_job(docker: aiodocker.Docker, job_id: str, host: str, instance: str) -> list[DockerContainer]:
    found = await _list(docker, _job_filter(job_id, host))
    return [c for c in found if is_ours(dockerapi.listed(c).get("Labels") or {}, instance)]


async def _list(docker: aiodocker.Docker, filters: str) -> list[DockerContainer]:
    try:
        return await docker.containers.list(all=True, filters=filters)
    except DockerError as exc:
        if is_unreachable(exc):
            raise _unavailable(exc) from None
        raise
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        raise _unavailable(exc) from None


def _job_dir(info: dict[str, Any]) -> str | None:
    mounts: list[dict[str, Any]] = info.get("Mounts") or []
    source = next((m.get("Source") for m in mounts if m.get("Destination") == JOB_MOUNT), None)
    return source if isinstance(source, str) else None


async def find_started(docker: aiodocker.Docker, job_id: str, host: str, instance: str) -> Leftover | None:
    """This host's container for ``job_id`` that did start (running or exited), if any.

    One that was created but never started is removed and reported with ``started=False``: nothing was
    spent, so the job simply runs again, even on a peer that could not otherwise know.
    """
    unstarted: Leftover | None = None
    for container in await _list_job(docker, job_id, host, instance):
        info = dockerapi.listed(container)
        if info.get("State") == "created":
            await force_remove(container)
            unstarted = Leftover(container_id=container.id, job_dir=_job_dir(info), started=False)
            continue
        return Leftover(container_id=container.id, job_dir=_job_dir(info))
    return unstarted


async def remove_job_containers(docker: aiodocker.Docker, job_id: str, host: str, instance: str) -> None:
    """Remove this host's containers of ``job_id``: called once the record of its end is written.

    Raises ``DockerUnavailable`` when the daemon does not answer, so the caller can try again later.
    """
    for container in await _list_job(docker, job_id, host, instance):
        try:
            await asyncio.wait_for(container.delete(force=True), 10)
        except DockerError as exc:
            if is_unreachable(exc):
                raise _unavailable(exc) from None
            if exc.status != 404:  # already gone is done; anything else the next boot's reaper retries
                get_logger().warning("container_remove_failed", job=job_id, status=exc.status)
        except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
            raise _unavailable(exc) from None
