"""A cron pattern that parses may still be refused: one that never fires, or one that fires too often."""

from __future__ import annotations

import pytest

from pidispatch.common.cronpattern import HORIZON_YEARS, pattern_problem

NOW = 1_764_633_600_000  # 2025-12-02T00:00:00Z


@pytest.mark.parametrize("pattern", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"])
def test_a_pattern_with_no_occurrence_within_the_horizon_is_refused(pattern: str) -> None:
    assert pattern_problem(pattern, 60, NOW) == (
        f"has no occurrence in the next {HORIZON_YEARS} years, so it would never fire"
    )


@pytest.mark.parametrize("pattern", ["0 0 29 2 *", "0 3 * * *", "*/5 * * * *", "0 0 1 1 MON"])
def test_patterns_that_fire_within_the_horizon_and_the_floor_pass(pattern: str) -> None:
    assert pattern_problem(pattern, 60, NOW) is None


@pytest.mark.parametrize(("pattern", "gap"),
                         [("* * * * * *", 1), ("*/3 * * * * *", 3), ("0,30 * * * * *", 30)])
def test_a_seconds_pattern_closer_than_the_floor_is_refused_naming_the_gap(pattern: str, gap: int) -> None:
    problem = pattern_problem(pattern, 60, NOW)
    assert problem == (f"fires {gap} s after a previous occurrence; accepted: at least "
                       "PI_CRON_MIN_INTERVAL_S=60 s apart (lower it to allow this)")
    assert pattern_problem(pattern, gap, NOW) is None


def test_a_floor_above_a_minute_walks_five_field_patterns_across_their_boundaries() -> None:
    # Twice at the end of an hour and once at the start of the next: 2 minutes at the hour boundary.
    assert pattern_problem("58 * * * *", 3600, NOW) is None
    assert pattern_problem("58,0 * * * *", 300, NOW) == (
        "fires 120 s after a previous occurrence; accepted: at least PI_CRON_MIN_INTERVAL_S=300 s apart "
        "(lower it to allow this)"
    )
    assert pattern_problem("0 23,0 * * *", 3600, NOW) is None
