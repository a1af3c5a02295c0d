"""Quiet hours: which windows hold a job and until when (pure), and what a windows file may say."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.models import Job
from pidispatch.worker.limits.pausewindows import load_windows, parse_windows, pause_until

REPO = Job(id="gh-1", kind="github", repo="Owner/App")
LOCAL = Job(id="local-1", kind="local", repo="local:app", folder="/srv/app")


def windows(*rows: dict[str, object]) -> str:
    return json.dumps({"version": 1, "windows": list(rows)})


def night(**extra: object) -> dict[str, object]:
    return {"scope": "owner/app", "days": ["mon"], "from": "22:00", "to": "07:00", "tz": "Europe/Amsterdam",
            **extra}


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.parametrize(
    ("at", "until"),
    [
        ("2026-11-30T21:59:00+01:00", None),  # Monday, before it opens
        ("2026-11-30T22:00:00+01:00", "2026-12-01T07:00:00+01:00"),
        ("2026-12-01T06:59:59+01:00", "2026-12-01T07:00:00+01:00"),  # past midnight: Monday's window
        ("2026-12-01T07:00:00+01:00", None),
        ("2026-12-01T23:00:00+01:00", None),  # Tuesday opens no window
        ("2026-11-30T21:30:00+00:00", "2026-12-01T07:00:00+01:00"),  # the window's zone, not UTC
    ],
)
def test_a_window_across_midnight_in_its_own_zone(at: str, until: str | None) -> None:
    found = pause_until(parse_windows(windows(night()), "w.json"), REPO, ms(at))
    assert found == (None if until is None else ms(until))


def test_scopes_a_repository_a_folder_and_everything() -> None:
    week = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    day = {"days": week, "from": "00:00", "to": "23:59", "tz": "UTC"}
    at = ms("2026-12-01T12:00:00+00:00")
    for scope, holds in (("owner/app", (True, False)), ("/srv/app", (False, True)), ("*", (True, True))):
        parsed = parse_windows(windows({"scope": scope, **day}), "w.json")
        held = (pause_until(parsed, REPO, at) is not None, pause_until(parsed, LOCAL, at) is not None)
        assert held == holds


def test_windows_that_follow_each_other_hold_until_the_last_closes() -> None:
    first = night(to="23:00", days=["mon"])
    second = night(**{"from": "23:00", "to": "01:00"})
    parsed = parse_windows(windows(first, second), "w.json")
    found = pause_until(parsed, REPO, ms("2026-11-30T22:30:00+01:00"))
    assert found == ms("2026-12-01T01:00:00+01:00")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (json.dumps({"version": 2, "windows": []}), "version"),
        (json.dumps({"version": 1, "windows": [], "colour": 1}), "version"),
        (windows(night(repo="x")), "windows[0].repo"),
        (windows(night(tz="Mars/Olympus")), "windows[0].tz"),
        (windows(night(tz=None)), "windows[0].tz"),
        (windows(night(days=["monday"])), "windows[0].days"),
        (windows(night(days=[])), "windows[0].days"),
        (windows(night(days=["mon", "mon"])), "windows[0].days"),
        (windows(night(to="7:00")), "windows[0].to"),
        (windows(night(to="22:00")), "from and to are equal"),
        (windows(night(scope="")), "windows[0].scope"),
        (windows(night(scope="/srv/../etc")), "windows[0].scope"),
        ("{", "not JSON"),
    ],
)
def test_every_bad_field_is_refused_with_its_path(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_windows(text, "w.json")
    assert named in str(refused.value) and str(refused.value).startswith("w.json")


def test_a_missing_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PI_PAUSE_WINDOWS_FILE cannot be read"):
        load_windows(str(tmp_path / "absent.json"))
