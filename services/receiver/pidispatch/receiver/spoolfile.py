"""The spool file: how a record is framed, read back, and recovered when the disk damaged it.

Records are framed as length (u32) + CRC-32 (u32) + msgpack payload, each checked on its own: a damaged
record costs that record only. Recovery keeps every whole record, in order, and moves any other bytes (a
damaged record, found again by the next frame whose checksum holds; the tail of a write a crash cut short)
to ``spool.quarantine`` beside it. Every function here blocks: ``spool`` runs them in a thread.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

import msgspec

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


def quarantine(directory: Path, fd: int, spans: list[tuple[int, int]]) -> None:
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


def recover(directory: Path, fd: int) -> tuple[int, Recovered]:
    """Open-time recovery: quarantine what is no whole record, then rewrite the spool with the records
    alone (a new file renamed over it). Returns the file to use and what was found. Blocking."""
    found = _scan(fd)
    if not found.damaged:
        return fd, found
    quarantine(directory, fd, found.damaged)
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
    fsync_dir(directory)
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


def write(fd: int, data: bytes, end: int) -> None:
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


def fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def truncate(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.fdatasync(fd)
