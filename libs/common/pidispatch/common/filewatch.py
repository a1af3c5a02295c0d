"""An operator's file (triggers, quiet hours, scoped limits): read safely, and reloaded on change.

Reading opens non-blocking and checks the open descriptor, so a FIFO or device put in the file's place
can neither hang the reading thread nor be read for ever, and a size cap bounds what a wrong path costs.
Hot reload polls the stat, debounces, re-validates whole, then swaps or keeps.

Polling the stat (inode, size, mtime, ctime) needs no dependency and sees every way an editor saves: an
in-place write changes size or mtime, an atomic rename changes the inode. A bad edit or a deleted file
keeps the last good value: a service never runs on half a file.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable, Mapping
from typing import TypeVar

from pidispatch.common.errors import ConfigError
from pidispatch.common.log import get_logger
from pidispatch.common.runtime import stopped

T = TypeVar("T")
Signature = tuple[int, int, int, int]


def read_regular(path: str, limit: int) -> bytes | None:
    """The bytes of a regular file of at most ``limit`` bytes, or None for anything else (blocking: use a
    thread). Raises ``OSError`` when the path cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 65536):
            size += len(chunk)
            if size > limit:
                return None  # it grew while being read
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_config_file(path: str, variable: str, limit: int) -> str:
    """The text of the JSON file ``variable`` names; ``ConfigError`` naming it otherwise (blocking)."""
    try:
        data = read_regular(path, limit)
    except OSError as exc:
        raise ConfigError(f"{variable} cannot be read ({exc.strerror}); accepted: a JSON file") from None
    if data is None:
        name = os.path.basename(path) or path
        raise ConfigError(f"{name} is not a regular file, or is larger than {limit} bytes")
    return data.decode("utf-8", "replace")


def signature(path: str) -> Signature | None:
    """What identifies one version of the file, or None when it is absent (blocking: use a thread)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _nothing(_: object) -> Mapping[str, object]:
    return {}


async def watch_file(
    path: str, load: Callable[[str], T], swap: Callable[[T], None], stop: asyncio.Event, *, what: str,
    interval: float = 0.25, debounce: float = 0.15, fields: Callable[[T], Mapping[str, object]] = _nothing,
    first: Mapping[str, object] | None = None, since: tuple[Signature | None] | None = None,
) -> None:
    """Call ``swap(load(path))`` whenever ``path`` changes and loads, until ``stop``. Never raises: a
    failure is logged as ``<what>_reload_invalid`` (the message names the field) and the last good stays.
    ``fields`` adds to the reload line what the new value holds; ``first`` to the start line. ``since``:
    the signature the caller's own first load saw, so an edit before this task runs is not missed."""
    log = get_logger()
    name = os.path.basename(path) or path
    seen = since[0] if since is not None else await asyncio.to_thread(signature, path)
    log.info(f"{what}_watching", file=name, **(first or {}))
    while not await stopped(stop, interval):
        try:
            current = await asyncio.to_thread(signature, path)
            if current == seen:
                continue
            current = await _settled(path, current, stop, debounce)
            if stop.is_set():
                break
            if current is None:
                if seen is not None:
                    log.warning(f"{what}_file_missing", file=name, kept=True)
                seen = None
                continue
            seen = current
            loaded = await asyncio.to_thread(load, path)
            swap(loaded)
            log.info(f"{what}_reloaded", file=name, **fields(loaded))
        except ConfigError as exc:
            log.warning(f"{what}_reload_invalid", file=name, kept=True, error=str(exc))
        except Exception as exc:  # the watcher must outlive anything a filesystem can do
            log.error(f"{what}_reload_failed", file=name, kept=True, error=type(exc).__name__)


async def _settled(
    path: str, current: Signature | None, stop: asyncio.Event, debounce: float
) -> Signature | None:
    """The signature once it has not changed for ``debounce`` seconds (or stop was asked for)."""
    while not await stopped(stop, debounce):
        latest = await asyncio.to_thread(signature, path)
        if latest == current:
            break
        current = latest
    return current
