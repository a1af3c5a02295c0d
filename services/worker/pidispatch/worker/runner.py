"""Run one container to its end through the Engine API, and classify how it ended (spec worker §1.6, §2.5).

The order create -> wait request -> attach -> start is what ``docker run --rm`` does: with AutoRemove
the container may vanish the instant it exits, so the exit code is only safe from a ``wait`` the daemon
registered before the start, and the output only from an attach made before the start (a ``logs``
request after the fact can find the container already gone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiodocker
import aiohttp
from aiodocker.containers import DockerContainer
from aiodocker.exceptions import DockerError
from aiodocker.stream import Stream

from pidispatch.common.errors import InfraError
from pidispatch.common.log import get_logger
from pidispatch.worker.container import JOB_MOUNT, LABEL_HOST, LABEL_JOB, ContainerSpec, to_docker_config
from pidispatch.worker.exitline import Tail

STOP_TIMEOUT_S = 5
# After a stop, how long the container gets to actually exit before the slot is freed anyway.
STOP_TAKE_S = 30.0
# After the exit, how long the output stream gets to deliver its last bytes.
DRAIN_S = 5.0
ABORTED_CODE = 137
NEVER_STARTED = frozenset({125, 126, 127})
OPERATOR_CANCEL = "operator-cancel"
JOB_TIMEOUT = "job-timeout"
# Long-lived requests (wait, attach) must not time out on reads, but must fail fast on a dead daemon.
LONG_REQUEST = aiohttp.ClientTimeout(total=None, sock_read=None, connect=5, sock_connect=5)

OnStarted = Callable[[str], Awaitable[None]]


class DockerUnavailable(InfraError):
    """The daemon did not answer; the job stays pending and is retried once Docker is back."""


class ContainerGone(Exception):
    """The container to re-attach to no longer exists, so its exit code is lost."""


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


def classify(result: RunResult) -> tuple[str, str | None]:
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


async def _open_wait(docker: aiodocker.Docker, container_id: str, condition: str) -> aiohttp.ClientResponse:
    # The daemon sends the headers only after it registered the waiter, so once this returns the exit
    # cannot be missed, however fast the container is removed.
    return await docker._do_query(
        f"containers/{container_id}/wait", "POST", params={"condition": condition}, timeout=LONG_REQUEST
    )


async def _exit_code(resp: aiohttp.ClientResponse) -> int:
    try:
        data = await resp.json(content_type=None)
    finally:
        resp.release()
    code = data.get("StatusCode") if isinstance(data, dict) else None
    return code if isinstance(code, int) else ABORTED_CODE


def _open_capture(path: str) -> int:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


async def _pump(stream: Stream, tail: Tail, capture: str | None) -> None:
    # Output is best effort: a broken stream must not change the outcome. It is never logged (payload text);
    # with PI_CAPTURE_JOB_LOGS=1 it is appended to the job's own file beside its record, on this host only.
    fd: int | None = None
    if capture is not None:
        try:
            fd = await asyncio.to_thread(_open_capture, capture)
        except OSError as exc:
            get_logger().warning("job_log_capture_failed", error=type(exc).__name__)
    try:
        with contextlib.suppress(Exception):
            while (msg := await stream.read_out()) is not None:
                tail.feed(msg.data)
                if fd is not None:
                    await asyncio.to_thread(os.write, fd, msg.data)
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


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


async def _follow(
    container: DockerContainer,
    waiter: aiohttp.ClientResponse,
    stream: Stream | None,
    *,
    timeout_s: float,
    abort: asyncio.Event,
    capture: str | None = None,
) -> RunResult:
    """Collect output and the exit code of a started container."""
    tail = Tail()
    reader = asyncio.create_task(_pump(stream, tail, capture)) if stream is not None else None
    exit_task = asyncio.create_task(_exit_code(waiter))
    try:
        code, aborted, reason = await _supervise(container, exit_task, abort, timeout_s)
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        raise _unavailable(exc) from None
    finally:
        exit_task.cancel()
    if reader is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), DRAIN_S)
        reader.cancel()
    return RunResult(
        exit_code=code, aborted=aborted, abort_reason=reason, tail=tail.bytes(), container_id=container.id
    )


def _attach(container: DockerContainer, *, replay: bool = False) -> Stream:
    """An output stream, opened by ``__aenter__``; assigned first so it is closed even if opening fails."""
    return container.attach(stdout=True, stderr=True, logs=replay, timeout=LONG_REQUEST)


async def _close(stream: Stream | None, waiter: aiohttp.ClientResponse | None) -> None:
    if stream is not None:
        with contextlib.suppress(Exception):
            await stream.close()
    if waiter is not None:
        waiter.close()


async def run_container(
    docker: aiodocker.Docker,
    spec: ContainerSpec,
    *,
    timeout_s: float,
    abort: asyncio.Event,
    on_started: OnStarted | None = None,
    capture: str | None = None,
) -> RunResult:
    """Create, start and follow one container to its end.

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
        return RunResult(
            exit_code=never_started_code(exc.message), aborted=False, abort_reason=None, tail=b"",
            container_id=None,
        )
    waiter: aiohttp.ClientResponse | None = None
    stream: Stream | None = None
    started = False
    try:
        waiter = await _open_wait(docker, container.id, "removed")
        stream = _attach(container)
        await stream.__aenter__()
        await container.start()
        started = True
        if on_started is not None:
            await on_started(container.id)
        return await _follow(container, waiter, stream, timeout_s=timeout_s, abort=abort, capture=capture)
    except DockerError as exc:
        if started or is_unreachable(exc):
            raise _unavailable(exc) from None
        await force_remove(container)
        return RunResult(
            exit_code=never_started_code(exc.message), aborted=False, abort_reason=None, tail=b"",
            container_id=container.id,
        )
    except (aiohttp.ClientError, TimeoutError, ConnectionError) as exc:
        if not started:
            await force_remove(container)
        raise _unavailable(exc) from None
    except asyncio.CancelledError:
        # A shutdown past its grace leaves a started container running for the next start to re-attach
        # (it carries this host's labels); one that never started is removed, as nothing was spent.
        if not started:
            await asyncio.shield(force_remove(container))
        raise
    finally:
        await _close(stream, waiter)


@dataclass(frozen=True)
class Leftover:
    """A container an earlier worker process started for a job, and the job folder it mounted."""

    container_id: str
    job_dir: str | None


async def find_started(docker: aiodocker.Docker, job_id: str, host: str) -> Leftover | None:
    """This host's container for ``job_id`` that did start (running or exited), if any.

    One that was created but never started is removed: nothing was spent, so the job simply runs again.
    """
    labels = [f"{LABEL_JOB}={job_id}", f"{LABEL_HOST}={host}"]
    try:
        found = await docker.containers.list(all=True, filters=json.dumps({"label": labels}))
    except DockerError as exc:
        if is_unreachable(exc):
            raise _unavailable(exc) from None
        raise
    for container in found:
        info = container._container
        if info.get("State") == "created":
            await force_remove(container)
            continue
        mounts = info.get("Mounts") or []
        job_dir = next((m.get("Source") for m in mounts if m.get("Destination") == JOB_MOUNT), None)
        return Leftover(container_id=container.id, job_dir=job_dir)
    return None


async def reattach_container(
    docker: aiodocker.Docker, container_id: str, *, timeout_s: float, abort: asyncio.Event,
    capture: str | None = None,
) -> RunResult:
    """Follow a container a previous worker process started (running or exited) instead of a new run.

    Raises ``ContainerGone`` when it vanished before its exit could be read.
    """
    container = docker.containers.container(container_id)
    waiter: aiohttp.ClientResponse | None = None
    stream: Stream | None = None
    try:
        waiter = await _open_wait(docker, container_id, "not-running")
        # Replay the output so far: the exit line may already be printed. An exited container cannot be
        # attached at all; its record then has no telemetry.
        stream = _attach(container, replay=True)
        try:
            await stream.__aenter__()
        except DockerError:
            await _close(stream, None)
            stream = None
        result = await _follow(container, waiter, stream, timeout_s=timeout_s, abort=abort, capture=capture)
    except DockerError as exc:
        if exc.status == 404:
            raise ContainerGone(container_id[:12]) from None
        raise _unavailable(exc) from None
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise _unavailable(exc) from None
    finally:
        await _close(stream, waiter)
    # It has exited; AutoRemove may not have run if it exited while no worker was watching.
    await force_remove(container)
    return result
