"""Hot reload of ``triggers.json`` (``common.filewatch``): a bad edit or a deleted file keeps the last good
rules, so the router never runs without rules and never runs half a file."""

from __future__ import annotations

import asyncio
import os

from pidispatch.common.filewatch import watch_file
from pidispatch.triggers.loader import load_triggers, warn_if_empty
from pidispatch.triggers.rules import Rules, RulesRef


async def watch_triggers(
    path: str, rules_ref: RulesRef, stop: asyncio.Event, *, interval: float = 0.25, debounce: float = 0.15
) -> None:
    """Reload ``path`` into ``rules_ref.current`` whenever it changes, until ``stop`` is set; never raises."""
    name = os.path.basename(path) or path

    def swap(rules: Rules) -> None:
        rules_ref.current = rules
        warn_if_empty(rules, name)

    await watch_file(
        path, load_triggers, swap, stop, what="triggers", interval=interval, debounce=debounce,
        fields=lambda rules: {"rules": rules.count}, first={"rules": rules_ref.current.count},
    )
