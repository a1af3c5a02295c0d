"""Where a trim may cut: never past unfinished work, never keeping more than the cap allows."""

from __future__ import annotations

import pytest

from pidispatch.router.trim import NO_CAP, choose_minid


@pytest.mark.parametrize(
    ("groups", "cap", "expected"),
    [
        ([("5-0", "9-0")], None, None),  # no cap yet: nothing to trim
        ([], "7-0", None),  # no group: every entry is unread work
        ([(None, "0-0")], "7-0", None),  # nothing delivered yet
        ([("5-0", "9-0")], "7-0", "5-0"),  # the oldest pending entry bounds the trim
        ([(None, "9-0")], "7-0", "7-0"),  # all finished: keep what the cap keeps
        ([(None, "3-1")], "7-0", "3-1"),  # never past the last delivered entry
        ([(None, "9-0"), ("4-2", "9-0")], "7-0", "4-2"),  # the slowest group wins
        ([(None, "10-0")], "9-5", "9-5"),  # ids compare numerically, not as text
        ([(None, "10-0")], NO_CAP, "10-0"),  # a job stream keeps nothing finished
        ([("8-3", "10-0")], NO_CAP, "8-3"),  # ... and everything pending
    ],
)
def test_choose_minid(groups: list[tuple[str | None, str]], cap: str | None, expected: str | None) -> None:
    assert choose_minid(groups, cap) == expected
