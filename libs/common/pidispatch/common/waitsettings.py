"""The wait-for settings (``PI_WAIT_*``): which check programs this host has, and every bound of a hold.

Read with the rest of the configuration (``load_settings``) and refused the same way: a bad value exits 2
naming the variable and what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from pidispatch.common.configsyntax import parse_profiles, read_int

# A check runs at most this often: its program may call a forge's API on every wake.
INTERVAL_FLOOR_MS = 30_000


class WaitSettings(msgspec.Struct, frozen=True, kw_only=True):
    # (name, absolute check program path) in declaration order.
    profiles: tuple[tuple[str, str], ...] = ()
    check_timeout_ms: int = 10_000
    # The base of the check backoff, never below ``INTERVAL_FLOOR_MS`` (see ``interval_floor_ms``).
    interval_ms: int = 60_000
    check_slots: int = 1
    max_ms: int = 86_400_000
    after_max_ms: int = 2_592_000_000
    max_checks: int = 96
    max_faults: int = 5


def load_wait_settings(env: Mapping[str, str]) -> WaitSettings:
    """``PI_WAIT_INTERVAL_MS`` below the floor is raised to it (a deployment cannot poll a forge faster);
    ``PD_WAIT_INTERVAL_FLOOR_MS`` lowers the floor for tests only."""
    floor = read_int(env, "PD_WAIT_INTERVAL_FLOOR_MS", INTERVAL_FLOOR_MS, 100, INTERVAL_FLOOR_MS)
    interval = read_int(env, "PI_WAIT_INTERVAL_MS", 60_000, 1, 86_400_000)
    return WaitSettings(
        profiles=parse_profiles("PI_WAIT_PROFILES", env.get("PI_WAIT_PROFILES") or None, what="check"),
        check_timeout_ms=read_int(env, "PI_WAIT_CHECK_TIMEOUT_MS", 10_000, 100, 600_000),
        interval_ms=max(interval, floor),
        check_slots=read_int(env, "PI_WAIT_CHECK_SLOTS", 1, 1, 64),
        max_ms=read_int(env, "PI_WAIT_MAX_MS", 86_400_000, 1_000, 90 * 86_400_000),
        after_max_ms=read_int(env, "PI_WAIT_AFTER_MAX_MS", 2_592_000_000, 1_000, 366 * 86_400_000),
        max_checks=read_int(env, "PI_WAIT_MAX_CHECKS", 96, 1, 100_000),
        max_faults=read_int(env, "PI_WAIT_MAX_FAULTS", 5, 1, 1_000),
    )
