"""The durable spool: verified deliveries Redis could not take, kept on local disk until it can.

Guarantee: a delivery answered 202 ``spooled`` is in ``<PD_SPOOL_DIR>/spool.log``, fsynced, before the
answer is sent; the drain appends spooled deliveries to ``pd:events`` in arrival order through the
same seen+append script as the hot path, so a crash at any point loses no acknowledged delivery and
doubles none (re-appending a delivery already drained finds its seen key and stores nothing).

Records are framed as length (u32) + CRC-32 (u32) + msgpack payload, each checked on its own: a damaged
record costs that record only. Opening the spool keeps every whole record, in order, and moves any other
bytes (a damaged record, found again by the next frame whose checksum holds; the tail of a write a crash
cut short) to ``spool.quarantine`` beside it, counted and logged with their offsets; while running, the
drain moves a record damaged on disk there too (it knows every record's end) and goes on with the next.
Nothing is truncated unsaid. The directory is held with ``flock`` so two receivers never share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import struct
import zlib
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import NamedTuple

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import SPOOL_RETRY_BASE_S, SPOOL_RETRY_CAP_S
from pidispatch.forges.verify import MAX_BODY_BYTES

SPOOL_FILE = "spool.log"
QUARANTINE_FILE = "spool.quarantine"
LOCK_FILE = "lock"
_FRAME = struct.Struct(">II")  # payload length, CRC-32 of the payload
# A record is one body within the 2 MiB limit plus a few short fields; a longer frame is damage.
MAX_RECORD_BYTES = MAX_BODY_BYTES + 64 * 1024
_READ_BYTES = 1024 * 1024  # what the drain reads per step


class Record(msgspec.Struct, array_like=True, frozen=True):
    """What ingest stores for a delivery: the fields of ``pd:events`` entries, the body verbatim."""

    forge: str
    event: str
    delivery: str
    received_at: int
    body: bytes


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Record).decode


def frame(record: Record) -> bytes:
    payload = _encode(record)
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def parse(data: bytes, base: int = 0) -> tuple[list[tuple[int, Record]], int]:
    """The whole records at the start of ``data`` as (file offset after it, record), and the offset
    where they end; stops at the first frame that is cut short or damaged."""
    records: list[tuple[int, Record]] = []
    pos, size = 0, len(data)
    while pos + _FRAME.size <= size:
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        if length > MAX_RECORD_BYTES or end > size:
            break
        payload = data[pos + _FRAME.size : end]
        if zlib.crc32(payload) != crc:
            break
        try:
            record = _decode(payload)
        except msgspec.DecodeError:
            break
        pos = end
        records.append((base + pos, record))
    return records, base + pos


def read_records(fd: int, offset: int, end: int, limit: int = _READ_BYTES) -> list[tuple[int, Record]]:
    """Records from ``offset`` (a record boundary) up to ``end``, about ``limit`` bytes of them (at least
    one whole record when there is one). Blocking: run it in a thread."""
    want = min(end - offset, limit)
    data = os.pread(fd, want, offset)
    if len(data) >= _FRAME.size:
        length = _FRAME.unpack_from(data)[0]
        if _FRAME.size + length > len(data) and length <= MAX_RECORD_BYTES:
            data = os.pread(fd, min(end - offset, _FRAME.size + length), offset)
    return parse(data, offset)[0]


def _next_frame(fd: int, start: int, size: int) -> int:
    """The first offset after ``start`` where a whole, checksummed record begins; ``size`` when none. Only
    damage brings a caller here: a random length rarely passes the bound, so few candidates are read."""
    pos = start + 1
    while pos + _FRAME.size <= size:
        window = os.pread(fd, min(_READ_BYTES, size - pos), pos)
        for at in range(len(window) - _FRAME.size + 1):
            length = _FRAME.unpack_from(window, at)[0]
            if length <= MAX_RECORD_BYTES and pos + at + _FRAME.size + length <= size and \
                    parse(os.pread(fd, _FRAME.size + length, pos + at))[0]:
                return pos + at
        pos += max(1, len(window) - _FRAME.size + 1)
    return size


class Recovered(NamedTuple):
    """What opening found: every whole record's end offset, in order, and the spans that are none."""

    ends: list[int]
    damaged: list[tuple[int, int]]  # (offset, length) of bytes that are no whole record


def _scan(fd: int) -> Recovered:
    """Every whole record's end, and what lies between or after them; records are not kept (a full
    spool is a gigabyte). Blocking."""
    size = os.fstat(fd).st_size
    ends: list[int] = []
    damaged: list[tuple[int, int]] = []
    offset = 0
    while offset < size:
        found = read_records(fd, offset, size)
        if found:
            ends += [end for end, _ in found]
            offset = found[-1][0]
            continue
        resume = _next_frame(fd, offset, size)
        damaged.append((offset, resume - offset))
        offset = resume
    return Recovered(ends, damaged)


def _quarantine(directory: Path, fd: int, spans: list[tuple[int, int]]) -> None:
    """Append the bytes of ``spans`` of the spool to the quarantine file, durably. Blocking."""
    q = os.open(directory / QUARANTINE_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        for offset, length in spans:
            _copy(fd, q, offset, length)
        os.fdatasync(q)
    finally:
        os.close(q)


def _copy(src: int, dst: int, offset: int, length: int) -> None:
    """``length`` bytes of ``src`` from ``offset`` appended to ``dst``, a chunk at a time. Blocking."""
    while length > 0:
        chunk = os.pread(src, min(length, _READ_BYTES), offset)
        if not chunk:
            raise OSError("spool file shorter than scanned")
        _write_all(dst, chunk)
        offset += len(chunk)
        length -= len(chunk)


def _recover(directory: Path, fd: int) -> tuple[int, Recovered]:
    """Open-time recovery: quarantine what is no whole record, then rewrite the spool with the records
    alone (a new file renamed over it). Returns the file to use and what was found. Blocking."""
    found = _scan(fd)
    if not found.damaged:
        return fd, found
    _quarantine(directory, fd, found.damaged)
    tmp = directory / (SPOOL_FILE + ".tmp")
    new = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        kept, at = 0, 0
        for offset, length in [*found.damaged, (os.fstat(fd).st_size, 0)]:
            _copy(fd, new, at, offset - at)  # the whole records between two damaged spans
            kept += offset - at
            at = offset + length
        os.fdatasync(new)
        os.replace(tmp, directory / SPOOL_FILE)
    except OSError:
        os.close(new)
        raise
    _fsync_dir(directory)
    os.close(fd)
    # Each record moves back by the damaged bytes before it.
    shifted, gone, spans = [], 0, iter(found.damaged)
    span = next(spans, None)
    for end in found.ends:
        while span is not None and span[0] < end:
            gone += span[1]
            span = next(spans, None)
        shifted.append(end - gone)
    return new, Recovered(shifted, found.damaged)


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
            fd, found = _recover(directory, fd)
            _fsync_dir(directory)  # the file's directory entry is durable before a record is acknowledged
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
                        await asyncio.to_thread(_write, self._fd, data, self._end)
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
    ) -> None:
        """Forever: append spooled records in order with ``store`` (True appended, False duplicate);
        when it raises, wait and retry the same record. A record damaged on disk since it was written is
        moved to the quarantine file (``on_quarantined(offset, length)``) and the next one follows."""
        delay = SPOOL_RETRY_BASE_S
        while True:
            if self._read >= self._end:
                await self._truncate_if_drained()
                self._committed.clear()
                if self._read >= self._end:
                    await self._committed.wait()
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
                self.depth -= 1
                self.drained += 1
                on_drained(record, appended)

    async def _quarantine_next(
        self, on_quarantined: Callable[[int, int], None], on_failed: Callable[[BaseException], None]
    ) -> None:
        offset, end = self._read, self._bounds[0]
        try:
            await asyncio.to_thread(_quarantine, self._dir, self._fd, [(offset, end - offset)])
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
            await asyncio.to_thread(_truncate, self._fd)
            self._end = self._read = 0


def _write(fd: int, data: bytes, end: int) -> None:
    """Append and fsync, or leave the file as it was. Blocking."""
    try:
        _write_all(fd, data)
        os.fdatasync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, end)
        raise


def _write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data``: a write may take only part of it. Blocking."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _truncate(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.fdatasync(fd)


def _settle(batch: list[tuple[bytes, asyncio.Future[None]]], error: BaseException | None) -> None:
    for _, future in batch:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
            future.exception()  # retrieved: a waiter that went away leaves no "never retrieved" warning
