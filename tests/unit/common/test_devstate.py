from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path

from pidispatch.common.devstate import (
    STATE_DIR,
    STATE_FILE,
    DevState,
    apply,
    merge,
    not_here,
    remove_state,
    write_state,
)

DEV = DevState(pid=1, env={"REDIS_URL": "redis://127.0.0.1:4000/0", "PI_LOGS_DIR": "/d/logs",
                           "PI_TRIGGERS_FILE": "/d/triggers.json"})


def test_a_live_dev_fills_what_is_unset() -> None:
    added, notes = merge({"PI_LOGS_DIR": "/mine"}, DEV, True, "f")
    assert added == {"REDIS_URL": "redis://127.0.0.1:4000/0", "PI_TRIGGERS_FILE": "/d/triggers.json"}
    assert notes == []


def test_a_stale_export_wins_but_is_named_with_both_urls() -> None:
    added, notes = merge({"REDIS_URL": "redis://:pw@127.0.0.1:5000/0"}, DEV, True, "f")
    assert "REDIS_URL" not in added
    [note] = notes
    assert "redis://127.0.0.1:5000/0" in note and "redis://127.0.0.1:4000/0" in note
    assert "using the set one" in note and "pw" not in note  # the password never reaches stderr


def test_the_same_export_says_nothing_and_a_dead_dev_is_ignored() -> None:
    assert merge({"REDIS_URL": "redis://127.0.0.1:4000/0"}, DEV, True, "f")[1] == []
    added, notes = merge({}, DEV, False, "f")
    assert added == {} and len(notes) == 1 and "not running" in notes[0]
    assert merge({}, None, True, "f") == ({}, [])


def test_the_file_is_private_and_found_in_the_folder(tmp_path: Path) -> None:
    state = tmp_path / STATE_DIR
    state.mkdir()
    path = write_state(state, {"REDIS_URL": "redis://127.0.0.1:4000/0", "WEBHOOK_SECRET": "s" * 20},
                       os.getpid())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "WEBHOOK_SECRET" not in path.read_text()
    environ: dict[str, str] = {}
    apply(environ, tmp_path, io.StringIO())
    assert environ == {"REDIS_URL": "redis://127.0.0.1:4000/0"}
    remove_state(state, os.getpid() + 1)  # not this dev's file: kept
    assert path.exists()
    remove_state(state, os.getpid())
    assert not path.exists()


def test_a_dead_devs_file_is_said_once(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    state = tmp_path / STATE_DIR
    state.mkdir()
    write_state(state, {"REDIS_URL": "redis://127.0.0.1:4000/0"}, int(dead.stdout))
    environ: dict[str, str] = {}
    first, second = io.StringIO(), io.StringIO()
    apply(environ, tmp_path, first)
    apply(environ, tmp_path, second)
    assert environ == {}
    assert "not running" in first.getvalue() and second.getvalue() == ""
    assert not (state / STATE_FILE).exists()


def test_credentials_dev_made_are_kept_for_its_verbs_an_operators_never(tmp_path: Path) -> None:
    state = tmp_path / STATE_DIR
    state.mkdir()
    env = {"REDIS_URL": "redis://127.0.0.1:4000/0", "WEBHOOK_SECRET": "s" * 20, "GITHUB_PAT": "mine" * 5,
           "GITHUB_AUTH_SOURCE": "pat"}
    path = write_state(state, env, os.getpid(), own={"WEBHOOK_SECRET", "GITHUB_AUTH_SOURCE"})
    assert "mine" not in path.read_text()  # the operator's token stays out of the file
    environ: dict[str, str] = {"GITHUB_AUTH_SOURCE": "app"}
    apply(environ, tmp_path, io.StringIO())
    assert environ == {"REDIS_URL": "redis://127.0.0.1:4000/0", "WEBHOOK_SECRET": "s" * 20,
                       "GITHUB_AUTH_SOURCE": "app"}  # a set variable still wins


def test_a_verb_that_found_nothing_says_no_dev_runs_here_only_when_it_looked_at_the_defaults(
    tmp_path: Path,
) -> None:
    assert "cd to the folder where ./scripts/dev runs" in (not_here({}, tmp_path) or "")
    assert not_here({"REDIS_URL": "redis://r:6379/0"}, tmp_path) is None
    assert not_here({"REDIS_SENTINELS": "s:26379"}, tmp_path) is None
    (tmp_path / STATE_DIR).mkdir()
    (tmp_path / STATE_DIR / STATE_FILE).write_text("{}")
    assert not_here({}, tmp_path) is None
