"""Hot reload of ``triggers.json`` (``common.filewatch``): a bad edit or a deleted file keeps the last good
rules, so the router never runs without rules and never runs half a file."""

from __future__ import annotations

import asyncio
import os

from pidispatch.common.cronpattern import MIN_INTERVAL_DEFAULT_S
from pidispatch.common.errors import ConfigError
from pidispatch.common.filewatch import watch_file
from pidispatch.forges.identity import unguarded
from pidispatch.triggers.loader import load_triggers, warn_if_empty
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.rules import Rules, RulesRef


async def watch_triggers(
    path: str, rules_ref: RulesRef, stop: asyncio.Event, *, self_ids: SelfIds | None = None,
    cron_floor_s: int = MIN_INTERVAL_DEFAULT_S,
    interval: float = 0.25, debounce: float = 0.15,
) -> None:
    """Reload ``path`` into ``rules_ref.current`` whenever it changes, until ``stop`` is set; never raises.
    With ``self_ids`` (the identities resolved at start), an edit adding rules for a forge whose identity
    is unknown is refused like any other bad edit: the bot-loop guard would be off for them."""
    name = os.path.basename(path) or path

    def load(file: str) -> Rules:
        rules = load_triggers(file, cron_floor_s=cron_floor_s)
        missing = unguarded(rules, self_ids) if self_ids is not None else []
        if missing:
            raise ConfigError(
                f"PI_TRIGGERS_FILE {name}: rules for {', '.join(missing)} need the harness's own identity "
                "there, which this router did not resolve at start; set it and restart the router"
            )
        return rules

    def swap(rules: Rules) -> None:
        rules_ref.current = rules
        warn_if_empty(rules, name)

    await watch_file(
        path, load, swap, stop, what="triggers", interval=interval, debounce=debounce,
        fields=lambda rules: {"rules": rules.count}, first={"rules": rules_ref.current.count},
    )
