"""pidispatch.receiver.spool: framing, recovery of a torn tail, the size bound, the directory lock, and
a drain that keeps arrival order and never loses a record to a failing store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.receiver.spool import Spool
from pidispatch.receiver.spoolfile import QUARANTINE_FILE, SPOOL_FILE, Record, frame, parse
from tests.support.polling import wait_for


def _record(n: int, body: bytes = b'{"n":1}') -> Record:
    return Record("github", "issues", f"d-{n}", 1_700_000_000_000 + n, body)


def _open(directory: Path, max_bytes: int = 1 << 30) -> Spool:
    return Spool.open(directory, max_bytes)


async def test_appended_records_are_on_disk_in_order_before_append_returns(tmp_path: Path) -> None:
    spool = _open(tmp_path)
    try:
        assert all(await asyncio.gather(*(spool.append(_record(n)) for n in range(50))))
        assert spool.depth == 50
        on_disk = (tmp_path / SPOOL_FILE).read_bytes()  # no flush pending: append returned after fsync
        records, end = parse(on_disk)
        assert end == len(on_disk)
        assert [r.delivery for _, r in records] == [f"d-{n}" for n in range(50)]
    finally:
        spool.close()


@pytest.mark.parametrize(
    ("damage", "kept"),
    [
        (lambda data: data[:-3], 2),  # the payload of the last record cut short
        (lambda data: data[: len(data) - len(frame(_record(2))) + 5], 2),  # its frame header cut short
        (lambda data: data[:-1] + bytes([data[-1] ^ 0xFF]), 2),  # a payload byte the checksum rejects
        (lambda data: data + b"\x00\x00", 3),  # a header begun but never finished
    ],
    ids=["payload-cut", "header-cut", "checksum", "stray-bytes"],
)
def test_a_torn_last_record_is_moved_to_the_quarantine_and_the_rest_kept(
    tmp_path: Path, damage: Callable[[bytes], bytes], kept: int
) -> None:
    whole = b"".join(frame(_record(n)) for n in range(3))
    path = tmp_path / SPOOL_FILE
    path.write_bytes(damage(whole))
    spool = _open(tmp_path)
    try:
        assert spool.depth == kept
        good = b"".join(frame(_record(n)) for n in range(kept))
        assert path.read_bytes() == good
        # Never cut unsaid: the bytes that are no whole record are kept beside the spool.
        assert (tmp_path / QUARANTINE_FILE).read_bytes() == damage(whole)[len(good):]
        assert spool.quarantined == 1 and spool.quarantined_at_open == [len(good)]
    finally:
        spool.close()


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]


@pytest.mark.parametrize("where", ["payload", "length"])
def test_a_damaged_record_inside_the_spool_costs_that_record_only_at_open(tmp_path: Path, where: str) -> None:
    frames = [frame(_record(n, body=b'{"n":%d,"pad":"%s"}' % (n, b"x" * 200))) for n in range(20)]
    start = sum(len(f) for f in frames[:6])  # record 7
    at = start + (len(frames[6]) // 2 if where == "payload" else 2)  # its payload, or its length field
    (tmp_path / SPOOL_FILE).write_bytes(_flip(b"".join(frames), at))
    spool = _open(tmp_path)
    try:
        assert spool.depth == 19 and spool.quarantined == 1 and spool.quarantined_at_open == [start]
        records, _ = parse((tmp_path / SPOOL_FILE).read_bytes())
        assert [r.delivery for _, r in records] == [f"d-{n}" for n in range(20) if n != 6]
        assert (tmp_path / QUARANTINE_FILE).read_bytes() == _flip(frames[6], at - start)
    finally:
        spool.close()


async def test_a_record_damaged_on_disk_while_running_is_quarantined_and_the_drain_goes_on(
    tmp_path: Path,
) -> None:
    spool = _open(tmp_path)
    stored: list[str] = []
    quarantined: list[tuple[int, int]] = []
    redis_up = asyncio.Event()

    async def store(record: Record) -> bool:
        if not redis_up.is_set():
            raise ConnectionError("redis down")
        stored.append(record.delivery)
        return True

    task = asyncio.create_task(
        spool.drain(store, lambda r, a: None, lambda e: None, lambda o, n: quarantined.append((o, n)))
    )
    try:
        for n in range(20):
            assert await spool.append(_record(n))
        one = len(frame(_record(0)))
        path = tmp_path / SPOOL_FILE
        path.write_bytes(_flip(path.read_bytes(), one // 2))  # record 1, while the drain waits for Redis
        redis_up.set()
        await wait_for(lambda: len(stored) == 19, what="the other 19 delivered")
        assert await spool.append(_record(20))  # new deliveries flow behind it
        await wait_for(lambda: not spool.depth, what="an empty spool")
    finally:
        task.cancel()
        spool.close()
    assert stored == [f"d-{n}" for n in range(1, 21)]
    assert quarantined == [(0, one)] and spool.quarantined == 1
    assert len((tmp_path / QUARANTINE_FILE).read_bytes()) == one


async def test_append_past_the_size_bound_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    one = len(frame(_record(0)))
    spool = _open(tmp_path, max_bytes=2 * one)
    try:
        assert await spool.append(_record(0))
        assert await spool.append(_record(1))
        assert not await spool.append(_record(2))
        assert spool.depth == 2
        assert (tmp_path / SPOOL_FILE).stat().st_size == 2 * one
    finally:
        spool.close()


def test_a_second_spool_on_the_same_directory_is_refused_naming_the_variable(tmp_path: Path) -> None:
    first = _open(tmp_path)
    try:
        with pytest.raises(ConfigError, match="PD_SPOOL_DIR"):
            _open(tmp_path)
    finally:
        first.close()
    _open(tmp_path).close()  # released with the first


async def test_drain_keeps_order_retries_a_failing_store_and_empties_the_file(tmp_path: Path) -> None:
    spool = _open(tmp_path)
    stored: list[str] = []
    failures: list[str] = []
    fail_next = 3

    async def store(record: Record) -> bool:
        nonlocal fail_next
        if record.delivery == "d-5" and fail_next:
            fail_next -= 1
            raise ConnectionError("redis down")
        stored.append(record.delivery)
        return True

    drained: list[tuple[str, bool]] = []
    task = asyncio.create_task(
        spool.drain(store, lambda r, a: drained.append((r.delivery, a)), lambda e: failures.append(str(e)))
    )
    try:
        for n in range(10):
            assert await spool.append(_record(n))
        await wait_for(
            lambda: not spool.depth and not (tmp_path / SPOOL_FILE).stat().st_size, what="an empty spool"
        )
    finally:
        task.cancel()
        spool.close()
    assert stored == [f"d-{n}" for n in range(10)]
    assert failures == ["redis down"] * 3
    assert [d for d, _ in drained] == stored


async def test_drain_keeps_appended_records_until_a_confirmation_after_them_says_held(tmp_path: Path) -> None:
    spool = Spool.open(tmp_path, 1 << 20)
    stored: list[str] = []
    held = asyncio.Event()
    asked: list[int] = []

    async def store(record: Record) -> bool:
        stored.append(record.delivery)
        return True

    async def confirm() -> bool:
        asked.append(len(stored))
        return held.is_set()

    task = asyncio.create_task(spool.drain(store, lambda r, a: None, lambda e: None, confirm=confirm))
    try:
        for n in range(3):
            assert await spool.append(_record(n))
        await wait_for(lambda: len(stored) == 3 and len(asked) >= 2, what="appended, asked twice")
        assert await spool.append(_record(3))  # appended while no replica holds the others
        await wait_for(lambda: len(stored) == 4, what="the fourth appended")
        assert spool.depth == 4 and (tmp_path / SPOOL_FILE).stat().st_size > 0
        held.set()
        await wait_for(lambda: not spool.depth, what="released once held")
        await wait_for(lambda: not (tmp_path / SPOOL_FILE).stat().st_size, what="the file cut back")
    finally:
        task.cancel()
        spool.close()
    assert stored == [f"d-{n}" for n in range(4)]
    assert asked[-1] == 4  # the confirmation that released them came after the last append
