"""Hot reload of an operator's file: poll its stat, debounce, re-validate whole, swap or keep.

Polling the stat (inode, size, mtime, ctime) needs no dependency and sees every way an editor saves: an
in-place write changes size or mtime, an atomic rename changes the inode. A bad edit or a deleted file
keeps the last good value: a service never runs on half a file.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from pidispatch.common.errors import ConfigError
from pidispatch.common.log import get_logger
from pidispatch.common.runtime import stopped

T = TypeVar("T")
Signature = tuple[int, int, int, int]


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
