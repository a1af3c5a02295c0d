"""The healing settings (``PD_HEAL_*``): whether the router heals deliveries GitHub failed to bring, how
often, and how far back it reads GitHub's delivery log (``router.heal``).

Read with the rest of the configuration (``load_settings``) and refused the same way: a bad value exits 2
naming the variable and what is accepted. Which hooks' logs are read is GitHub's own variable
(``GITHUB_HEAL_HOOKS``, in the forge's configuration).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from pidispatch.common.configsyntax import read_int, read_optional_int
from pidispatch.common.keys import HEAL_WINDOW_DEFAULT_H, HEAL_WINDOW_MAX_H

# A pass reads up to a window of log pages and paces its requests: more often than this is no faster.
INTERVAL_MIN_S = 60


class HealSettings(msgspec.Struct, frozen=True, kw_only=True):
    # Seconds between the router's passes; None: the router does not heal (``pi-dispatch heal`` still can).
    interval_s: int | None = None
    # How far back the log is read, in hours: GitHub keeps it a few days, so at most HEAL_WINDOW_MAX_H.
    window_h: int = HEAL_WINDOW_DEFAULT_H

    @property
    def window_ms(self) -> int:
        return self.window_h * 3_600_000


def load_heal_settings(env: Mapping[str, str]) -> HealSettings:
    """``PD_HEAL_INTERVAL_S`` (unset: off; 60 to a day) and ``PD_HEAL_WINDOW_H`` (1 to 72, default 24)."""
    return HealSettings(
        interval_s=read_optional_int(env, "PD_HEAL_INTERVAL_S", INTERVAL_MIN_S, 86_400),
        window_h=read_int(env, "PD_HEAL_WINDOW_H", HEAL_WINDOW_DEFAULT_H, 1, HEAL_WINDOW_MAX_H),
    )
