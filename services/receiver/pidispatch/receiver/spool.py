"""The durable spool: verified deliveries Redis could not take, kept on local disk until it can.

Guarantee: a delivery answered 202 ``spooled`` is in ``<PD_SPOOL_DIR>/spool.log``, fsynced, before the
answer is sent; the drain appends spooled deliveries to ``pd:events`` in arrival order through the
same seen+append script as the hot path, so a crash at any point loses no acknowledged delivery and
doubles none (re-appending a delivery already drained finds its seen key and stores nothing).

Each record is checked on its own (``spoolfile``): a damaged record costs that record only. Opening the
spool keeps every whole record, in order, and quarantines the rest, counted and logged with their offsets;
while running, the drain moves a record damaged on disk to the quarantine too (it knows every record's
end) and goes on with the next. Nothing is truncated unsaid. The directory is held with ``flock`` so two
receivers never share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import SPOOL_RETRY_BASE_S, SPOOL_RETRY_CAP_S
from pidispatch.receiver import spoolfile
from pidispatch.receiver.spoolfile import SPOOL_FILE, Record, Recovered, frame, read_records

LOCK_FILE = "lock"


class Spool:
    """One receiver's spool file; ``depth`` is what it holds that is not in Redis yet."""

    def __init__(self, lock_fd: int, fd: int, max_bytes: int, directory: Path, found: Recovered) -> None:
        self._lock_fd, self._fd, self.max_bytes, self._dir = lock_fd, fd, max_bytes, directory
        self.depth = len(found.ends)  # records spooled or being spooled, not yet drained
        # Moved to the quarantine file: at open (found.damaged), then by the drain.
        self.quarantined = len(found.damaged)
        self.quarantined_at_open = [offset for offset, _ in found.damaged]
        self.quarantined_bytes = sum(length for _, length in found.damaged)
        self._bounds = deque(found.ends)  # each undrained record's end offset
        self._end = self._bounds[-1] if self._bounds else 0  # bytes written and fsynced
        self._read = 0  # bytes drained
        self.writable = True  # False while the disk refuses writes (/readyz says so)
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._pending_bytes = 0
        self._writer: asyncio.Task[None] | None = None
        self._file = asyncio.Lock()  # one write or truncate at a time
        self._committed = asyncio.Event()
        self.spooled = self.drained = 0

    @classmethod
    def open(cls, directory: Path, max_bytes: int) -> Spool:
        """Lock ``directory`` and recover its spool; ConfigError (exit 2) when another receiver holds it
        or it cannot be used. Blocking: call before serving or in a thread."""
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            lock_fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ConfigError(
                f"PD_SPOOL_DIR cannot be used ({exc.strerror}); accepted: a directory this user can write"
            ) from None
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise ConfigError(
                "PD_SPOOL_DIR is held by another running receiver; accepted: one directory per receiver"
            ) from None
        fd = -1
        try:
            fd = os.open(directory / SPOOL_FILE, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            fd, found = spoolfile.recover(directory, fd)
            # The file's directory entry is durable before a record is acknowledged.
            spoolfile.fsync_dir(directory)
        except OSError as exc:
            for open_fd in (fd, lock_fd):
                if open_fd >= 0:
                    os.close(open_fd)
            raise ConfigError(
                f"PD_SPOOL_DIR cannot be used ({exc.strerror}); accepted: a directory this user can write"
            ) from None
        return cls(lock_fd, fd, max_bytes, directory, found)

    @property
    def size(self) -> int:
        return self._end + self._pending_bytes

    def close(self) -> None:
        os.close(self._fd)
        os.close(self._lock_fd)

    async def append(self, record: Record) -> bool:
        """True once ``record`` is on disk (fsynced); False when it would pass ``max_bytes``.

        Concurrent appends share one write and one fsync. Raises OSError when the disk refuses.
        """
        data = frame(record)
        if self.size + len(data) > self.max_bytes:
            return False
        future = asyncio.get_running_loop().create_future()
        self._pending.append((data, future))
        self._pending_bytes += len(data)
        self.depth += 1
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._write_pending())
        await asyncio.shield(future)  # a client that goes away does not cancel the write
        return True

    async def _write_pending(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                data = b"".join(d for d, _ in batch)
                try:
                    async with self._file:
                        await asyncio.to_thread(spoolfile.write, self._fd, data, self._end)
                        for frame_bytes, _ in batch:
                            self._end += len(frame_bytes)
                            self._bounds.append(self._end)
                except OSError as exc:
                    self.depth -= len(batch)
                    self.writable = False
                    _settle(batch, exc)
                else:
                    self.writable = True
                    self.spooled += len(batch)
                    _settle(batch, None)
                    self._committed.set()
                finally:
                    self._pending_bytes -= len(data)
        finally:
            self._writer = None

    async def drain(
        self,
        store: Callable[[Record], Awaitable[bool]],
        on_drained: Callable[[Record, bool], None],
        on_failed: Callable[[BaseException], None],
        on_quarantined: Callable[[int, int], None] = lambda offset, length: None,
        confirm: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        """Forever: append spooled records in order with ``store`` (True appended, False duplicate);
        when it raises, wait and retry the same record. A record damaged on disk since it was written is
        moved to the quarantine file (``on_quarantined(offset, length)``) and the next one follows.

        With ``confirm`` (replicas must hold what Redis took), a record appended stays in the spool until
        a ``confirm()`` after it says True; it is asked once the spool is read through, and again with
        backoff while it says False, new records being appended meanwhile.
        """
        delay = SPOOL_RETRY_BASE_S
        unheld: list[tuple[Record, bool]] = []  # in Redis, not yet held by its replicas
        while True:
            if self._read >= self._end:  # read through: confirm what waits for it, else wait for more
                if not unheld:
                    await self._truncate_if_drained()
                    await self._next_write(None)
                elif confirm is not None and await _confirmed(confirm, on_failed):
                    self._release(unheld, on_drained)
                    delay = SPOOL_RETRY_BASE_S
                else:
                    await self._next_write(delay)
                    delay = min(delay * 2, SPOOL_RETRY_CAP_S)
                continue
            records = await asyncio.to_thread(read_records, self._fd, self._read, self._end)
            if not records:  # written whole and fsynced: the disk damaged it since
                await self._quarantine_next(on_quarantined, on_failed)
                continue
            for end, record in records:
                try:
                    appended = await store(record)
                except Exception as exc:  # Redis still down (or slow): the record stays first in line
                    on_failed(exc)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, SPOOL_RETRY_CAP_S)
                    break
                delay = SPOOL_RETRY_BASE_S
                self._read = end
                self._bounds.popleft()
                unheld.append((record, appended))
            if confirm is None:
                self._release(unheld, on_drained)

    def _release(
        self, records: list[tuple[Record, bool]], on_drained: Callable[[Record, bool], None]
    ) -> None:
        """These records are kept where they must be: the spool lets them go (and is cut back once empty)."""
        for record, appended in records:
            self.depth -= 1
            self.drained += 1
            on_drained(record, appended)
        records.clear()

    async def _next_write(self, timeout: float | None) -> None:
        """Until a record is written (at once when one came meanwhile), or ``timeout``."""
        self._committed.clear()
        if self._read >= self._end:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._committed.wait(), timeout)

    async def _quarantine_next(
        self, on_quarantined: Callable[[int, int], None], on_failed: Callable[[BaseException], None]
    ) -> None:
        offset, end = self._read, self._bounds[0]
        try:
            await asyncio.to_thread(spoolfile.quarantine, self._dir, self._fd, [(offset, end - offset)])
        except OSError as exc:  # kept where it is, and tried again: never dropped without its copy
            on_failed(exc)
            await asyncio.sleep(SPOOL_RETRY_CAP_S)
            return
        self._read = end
        self._bounds.popleft()
        self.depth -= 1
        self.quarantined += 1
        self.quarantined_bytes += end - offset
        on_quarantined(offset, end - offset)

    async def _truncate_if_drained(self) -> None:
        if self._end == 0 or self.depth:
            return
        async with self._file:
            if self.depth or self._read != self._end:
                return  # an append came in meanwhile: it is drained first
            await asyncio.to_thread(spoolfile.truncate, self._fd)
            self._end = self._read = 0


async def _confirmed(
    confirm: Callable[[], Awaitable[bool]], on_failed: Callable[[BaseException], None]
) -> bool:
    try:
        return await confirm()
    except Exception as exc:  # Redis down again: asked again later
        on_failed(exc)
        return False


def _settle(batch: list[tuple[bytes, asyncio.Future[None]]], error: BaseException | None) -> None:
    for _, future in batch:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
            future.exception()  # retrieved: a waiter that went away leaves no "never retrieved" warning
