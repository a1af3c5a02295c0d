"""Scoped limits: what a limits file may say (strictly), which rows hold a job and in which order (pure),
and the scoped windows' counter names."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pidispatch import forges
from pidispatch.common.errors import ConfigError
from pidispatch.common.keys import Keys
from pidispatch.common.models import Job
from pidispatch.worker.limits.scoped import load_limits, parse_limits, rows_for
from pidispatch.worker.limits.scopedbudget import scoped_windows

FORGE, OTHER = forges.names()[0], forges.names()[1]
REPO = Job(id="f-1", kind=FORGE, repo="Owner/App")
ELSEWHERE = Job(id="f-2", kind=OTHER, repo="owner/app")
LOCAL = Job(id="local-1", kind="local", repo="local:app", folder="/srv/work/app")


def limits(*rows: object, version: int = 2) -> str:
    return json.dumps({"version": version, "limits": list(rows)})


def refusal(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_limits(text, "limits.json")
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_version_1_file_with_every_limit_loads() -> None:
    (row,) = parse_limits(limits({"scope": "owner/app", "day": 1, "week": 2, "month": 3, "concurrent": 1},
                                 version=1), "f")
    assert (row.day, row.week, row.month, row.concurrent) == (1, 2, 3, 1)
    assert row.caps() == {"day": 1, "week": 2, "month": 3}


def test_null_means_the_limit_is_not_set() -> None:
    (row,) = parse_limits(limits({"scope": "owner/app", "day": None, "concurrent": 2}), "f")
    assert row.caps() == {} and row.concurrent == 2


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("not json", "limits.json is not JSON"),
        (json.dumps([]), "accepted"),
        (json.dumps({"version": 2, "limits": [], "extra": 1}), "extra is refused"),
        (limits(version=3), "version is refused; accepted: 1 or 2"),
        (json.dumps({"version": True, "limits": []}), "version is refused"),
        (json.dumps({"version": 1}), "limits must be a list"),
        (limits("owner/app"), "limits[0] must be an object"),
        (limits({"scope": "owner/app", "day": 1, "Day": 2}), "limits[0].Day is refused"),
        (limits({"scope": "owner/app", "dayUsd": 1}), "limits[0].dayUsd is not implemented"),
        (limits({"scope": "owner/app", "cpus": 1}), "limits[0].cpus is not implemented"),
        (limits({"scope": "owner/app"}), "limits[0] sets no limit"),
        (limits({"scope": "owner/app", "day": -1}), "limits[0].day is refused; accepted: a whole number"),
        (limits({"scope": "owner/app", "day": 1.5}), "limits[0].day is refused"),
        (limits({"scope": "owner/app", "week": "3"}), "limits[0].week is refused"),
        (limits({"scope": "owner/app", "month": True}), "limits[0].month is refused"),
        (limits({"scope": "o/a", "concurrent": 0}), "concurrent is refused; accepted: a whole number from 1"),
        (limits({"scope": "", "day": 1}), "limits[0].scope is refused"),
        (limits({"scope": "app", "day": 1}), "limits[0].scope is refused"),
        (limits({"scope": "owner/app ", "day": 1}), "limits[0].scope is refused"),
        (limits({"scope": "/srv/app/", "day": 1}), "scope is refused; accepted: an absolute folder"),
        (limits({"scope": "/srv/../app", "day": 1}), "limits[0].scope is refused"),
        (limits({"scope": "project:7", "day": 1}), "limits[0].scope is refused"),
        (limits({"scope": "nowhere:owner/app", "day": 1}), "limits[0].scope is refused"),
        (limits({"scope": f"{FORGE}:owner/app", "day": 1}, version=1), "limits[0].scope is refused"),
        (limits({"scope": "owner/app", "day": 1}, {"scope": "Owner/App", "week": 1}), "[1].scope repeats"),
        (limits({"scope": "owner/app", "day": 1}, {"scope": f"{FORGE}:owner/app", "day": 1}),
         "limits[1].scope repeats"),
        (limits({"scope": f"{FORGE}:owner/app", "day": 1}, {"scope": "owner/app", "day": 1}),
         "limits[1].scope repeats"),
        (limits({"scope": "/srv/app", "day": 1}, {"scope": "/srv/app", "day": 2}), "limits[1].scope repeats"),
    ],
)
def test_a_bad_file_is_refused_naming_the_field(text: str, named: str) -> None:
    assert named in refusal(text)


def test_a_refused_scope_lists_the_forge_names_it_accepts() -> None:
    message = refusal(limits({"scope": "nowhere:owner/app", "day": 1}))
    assert all(name in message for name in forges.names())


def test_one_repository_on_two_forges_may_have_a_row_each() -> None:
    rows = parse_limits(limits({"scope": f"{FORGE}:owner/app", "day": 1},
                               {"scope": f"{OTHER}:owner/app", "day": 2}), "f")
    assert [r.day for r in rows_for(rows, REPO)] == [1] and [r.day for r in rows_for(rows, ELSEWHERE)] == [2]


def test_a_bare_repository_row_holds_that_repository_on_any_forge_and_no_local_job() -> None:
    rows = parse_limits(limits({"scope": "owner/app", "day": 1}), "f")
    assert rows_for(rows, REPO) == rows_for(rows, ELSEWHERE) == rows
    assert rows_for(rows, LOCAL) == () and rows_for(rows, Job(id="x", kind=FORGE, repo="owner/app2")) == ()


def test_folder_rows_hold_the_folder_and_below_deepest_first_and_never_a_forge_job() -> None:
    rows = parse_limits(limits(
        {"scope": "/srv", "day": 30}, {"scope": "/srv/work/app", "day": 1}, {"scope": "/srv/work", "day": 5},
        {"scope": "/srv/work/ap", "day": 9}, {"scope": "/", "day": 100},
    ), "f")
    assert [r.scope for r in rows_for(rows, LOCAL)] == ["/srv/work/app", "/srv/work", "/srv", "/"]
    assert rows_for(rows, REPO) == ()
    odd = Job(id="l", kind="local", repo="local:x", folder="/srv/work/app/../app/")
    assert [r.day for r in rows_for(rows, odd)] == [1, 5, 30, 100]


def test_rows_are_named_the_same_on_every_host_and_apart_from_each_other() -> None:
    one = parse_limits(limits({"scope": "Owner/App", "day": 1}), "f")[0]
    again = parse_limits(limits({"scope": "owner/app", "week": 4}), "g")[0]
    qualified = parse_limits(limits({"scope": f"{FORGE}:owner/app", "day": 1}), "f")[0]
    assert one.digest == again.digest != qualified.digest and len(one.digest) == 16


def test_scoped_windows_follow_the_rows_narrowest_first_day_first_in_utc() -> None:
    rows = rows_for(parse_limits(limits({"scope": "/srv", "month": 9}, {"scope": "/srv/work", "day": 1,
                                                                           "week": 3}), "f"), LOCAL)
    at = int(datetime(2026, 12, 3, 23, 30, tzinfo=UTC).timestamp() * 1000)  # a Thursday
    found = scoped_windows(rows, at, Keys("pd"))
    narrow, wide = rows[0].digest, rows[1].digest
    assert [(w.name, w.key, w.cap) for w in found] == [
        ("day", f"pd:budget:s:{narrow}:2026-12-03", 1),
        ("week", f"pd:budget:s:{narrow}:w:2026-11-30", 3),
        ("month", f"pd:budget:s:{wide}:m:2026-12", 9),
    ]


def test_the_file_is_read_whole_or_refused(tmp_path: Path) -> None:
    path = tmp_path / "limits.json"
    with pytest.raises(ConfigError, match="PI_SCOPED_LIMITS_FILE cannot be read"):
        load_limits(str(path))
    path.write_text(limits({"scope": "owner/app", "day": 2}))
    assert load_limits(str(path))[0].day == 2
    path.write_text(" " * 300_000)
    with pytest.raises(ConfigError, match="larger than"):
        load_limits(str(path))
