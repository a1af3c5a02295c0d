"""Hot reload of ``triggers.json``: poll, debounce, re-validate whole, swap or keep.

Polling the file's stat (inode, size, mtime, ctime) needs no dependency and sees every way an editor
saves: an in-place write changes size or mtime, an atomic rename (write a temporary file, then
``os.replace``) changes the inode. A bad edit or a deleted file keeps the last good rules: the router
never runs without rules and never runs half a file.
"""

from __future__ import annotations

import asyncio
import os

from pidispatch.common.errors import ConfigError
from pidispatch.common.log import get_logger
from pidispatch.common.runtime import stopped
from pidispatch.router.rules import RulesRef
from pidispatch.router.triggers import load_triggers, warn_if_empty

Signature = tuple[int, int, int, int]


def signature(path: str) -> Signature | None:
    """What identifies one version of the file, or None when it is absent (blocking: use a thread)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


async def watch_triggers(
    path: str, rules_ref: RulesRef, stop: asyncio.Event, *, interval: float = 0.25, debounce: float = 0.15
) -> None:
    """Reload ``path`` into ``rules_ref.current`` whenever it changes, until ``stop`` is set.

    A change is acted on once the file has held still for ``debounce`` seconds, so an editor's
    truncate-then-write is read once, whole. Never raises: every failure is logged and the last good
    rules stay in place.
    """
    log = get_logger()
    name = os.path.basename(path) or path
    seen = await asyncio.to_thread(signature, path)
    log.info("triggers_watching", file=name, rules=rules_ref.current.count)
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
                    log.warning("triggers_file_missing", file=name, kept=True)
                seen = None
                continue
            seen = current
            rules_ref.current = await asyncio.to_thread(load_triggers, path)
            log.info("triggers_reloaded", file=name, rules=rules_ref.current.count)
            warn_if_empty(rules_ref.current, name)
        except ConfigError as exc:
            # The message names the entry index and field; the file is the operator's, not payload text.
            log.warning("triggers_reload_invalid", file=name, kept=True, error=str(exc))
        except Exception as exc:  # the watcher must outlive anything a filesystem can do
            log.error("triggers_reload_failed", file=name, kept=True, error=type(exc).__name__)


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

