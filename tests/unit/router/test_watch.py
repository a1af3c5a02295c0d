"""Hot reload of triggers.json in a real temporary directory: edits and atomic renames are picked up, a
bad edit or a deleted file keeps the last good rules and says so once."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from pidispatch.common.errors import ConfigError
from pidispatch.common.filewatch import signature
from pidispatch.common.models import Job, Matched, Target, Trigger
from pidispatch.router.watch import watch_triggers
from pidispatch.triggers.loader import TRIGGERS_MAX_BYTES, load_triggers
from pidispatch.triggers.rules import RulesRef
from pidispatch.worker.forgework.disarm import disarm_file
from tests.support.polling import wait_for

LABEL = {"on": {"type": "label", "any": ["pi:go"]}, "run": {"kind": "github", "flow": "fix"}}
SECRET_REF = "op://vault/never-logged"


def triggers(n: int) -> str:
    return json.dumps({"triggers": [{**LABEL, "run": {**LABEL["run"], "flow": f"fix{i}"}} for i in range(n)]})


@asynccontextmanager
async def watching(path: Path) -> AsyncIterator[tuple[RulesRef, list[dict[str, Any]]]]:
    """Load ``path``, watch it with short intervals, yield the live reference and the captured log."""
    ref = RulesRef(load_triggers(str(path)))
    stop = asyncio.Event()
    with capture_logs() as logs:
        task = asyncio.create_task(watch_triggers(str(path), ref, stop, interval=0.02, debounce=0.03))
        await wait_for(lambda: events(logs, "triggers_watching"), 5, what="the watcher to start")
        try:
            yield ref, logs
        finally:
            stop.set()
            await asyncio.wait_for(task, 5)


def replace(path: Path, text: str) -> None:
    """Write whole, then rename: the watcher can never catch a half-written version."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line for line in logs if line["event"] == name]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    file = tmp_path / "triggers.json"
    file.write_text(triggers(1))
    return file


async def test_an_edit_in_place_is_reloaded(path: Path) -> None:
    async with watching(path) as (ref, logs):
        path.write_text(triggers(2))
        await wait_for(lambda: ref.current.count == 2, 5, what="the edit to be reloaded")
        assert events(logs, "triggers_reloaded")[-1]["rules"] == 2


async def test_an_atomic_rename_is_reloaded(path: Path) -> None:
    async with watching(path) as (ref, _):
        replace(path, triggers(1).replace("fix0", "fix9"))  # same size: the inode tells
        await wait_for(lambda: ref.current.group("github").label[0].run.flow == "fix9", 5, what="the rename")


async def test_the_workers_disarm_mark_is_reloaded_as_an_entry_that_matches_nothing(path: Path) -> None:
    one_shot = {"on": {"type": "issue", "action": ["closed"], "number": 40, "once": True},
                "run": {"kind": "github", "flow": "deploy"}}
    path.write_text(json.dumps({"triggers": [LABEL, one_shot]}, indent=2))
    matched = Matched(index=1, type="issue", action="closed", number=40, once=True)
    job = Job(id="gh-spent", kind="github", repo="octo/repo", target=Target(type="issue", number=40),
              flow="deploy", trigger=Trigger(event="issues", matched=matched))
    async with watching(path) as (ref, _):
        assert ref.current.group("github").issue[0].once is True
        assert disarm_file(str(path), job, "2026-05-01T10:00:00Z") == "disarmed"
        await wait_for(lambda: ref.current.group("github").issue == (), 5, what="the mark to be reloaded")
        assert ref.current.count == 2 and [r.index for r in ref.current.group("github").label] == [0]


async def test_a_bad_edit_keeps_the_last_good_rules_until_it_is_fixed(path: Path) -> None:
    async with watching(path) as (ref, logs):
        good = ref.current
        bad = {"triggers": [LABEL, {**LABEL, "run": {**LABEL["run"], "replicas": 9,
                                                       "secrets": {"KEY": SECRET_REF}}}]}
        replace(path, json.dumps(bad))
        await wait_for(lambda: events(logs, "triggers_reload_invalid"), 5, what="the refusal to be logged")
        line = events(logs, "triggers_reload_invalid")[0]
        assert line["kept"] is True
        assert line["error"] == ("PI_TRIGGERS_FILE triggers.json: triggers[1].run.replicas must be an "
                                 "integer from 2 to 3")
        assert ref.current is good
        replace(path, triggers(3))
        await wait_for(lambda: ref.current.count == 3, 5, what="the fixed file to be reloaded")
        # One bad version is reported once, not on every poll.
        assert len(events(logs, "triggers_reload_invalid")) == 1
        assert SECRET_REF not in json.dumps(logs) and str(path.parent) not in json.dumps(logs)


async def test_a_deleted_file_keeps_the_last_good_rules_and_a_recreated_one_is_read(path: Path) -> None:
    async with watching(path) as (ref, logs):
        good = ref.current
        path.unlink()
        await wait_for(lambda: events(logs, "triggers_file_missing"), 5, what="the deletion to be logged")
        assert events(logs, "triggers_file_missing")[0]["kept"] is True
        assert ref.current is good
        path.write_text(triggers(2))
        await wait_for(lambda: ref.current.count == 2, 5, what="the recreated file to be read")
        assert len(events(logs, "triggers_file_missing")) == 1


async def test_a_path_that_cannot_be_read_keeps_the_last_good_rules(path: Path) -> None:
    async with watching(path) as (ref, logs):
        good = ref.current
        path.unlink()
        path.mkdir()  # a directory where the file was: open() fails, the watcher must not
        await wait_for(lambda: events(logs, "triggers_reload_invalid"), 5, what="the read failure")
        assert "not a regular file" in events(logs, "triggers_reload_invalid")[0]["error"]
        assert ref.current is good


async def test_a_fifo_in_place_of_the_file_is_refused_without_blocking_the_watcher(path: Path) -> None:
    async with watching(path) as (ref, logs):
        good = ref.current
        path.unlink()
        os.mkfifo(path)  # opening it for reading would wait for a writer that never comes
        await wait_for(lambda: events(logs, "triggers_reload_invalid"), 5, what="the FIFO refusal")
        assert "not a regular file" in events(logs, "triggers_reload_invalid")[0]["error"]
        assert ref.current is good
        path.unlink()
        path.write_text(triggers(3))
        await wait_for(lambda: ref.current.count == 3, 5, what="the file after the FIFO to be read")


async def test_load_refuses_a_fifo_and_a_device_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "triggers.json"
    os.mkfifo(fifo)
    for where in (str(fifo), "/dev/zero"):
        with pytest.raises(ConfigError, match="is not a regular file"):
            await asyncio.wait_for(asyncio.to_thread(load_triggers, where), 5)


def test_load_refuses_a_file_over_the_size_cap(path: Path) -> None:
    path.write_text(" " * (TRIGGERS_MAX_BYTES + 1))
    with pytest.raises(ConfigError, match="at most 1048576 bytes"):
        load_triggers(str(path))


def test_json_nested_deeper_than_the_parser_handles_is_a_refusal_not_a_crash(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_triggers(str(path))


async def test_stop_ends_the_watcher_without_an_error(path: Path) -> None:
    async with watching(path) as (_, logs):
        pass
    assert not events(logs, "triggers_reload_failed")


def test_the_signature_tells_a_rename_apart_and_is_none_for_a_missing_file(path: Path) -> None:
    before = signature(str(path))
    other = path.with_name("other.json")
    other.write_text(path.read_text())
    os.replace(other, path)
    assert signature(str(path)) != before
    assert signature(str(path.with_name("absent.json"))) is None


async def test_an_edit_adding_a_field_no_worker_acts_on_keeps_the_last_good_rules(path: Path) -> None:
    async with watching(path) as (ref, logs):
        good = ref.current
        replace(path, json.dumps({"triggers": [{**LABEL, "run": {**LABEL["run"], "skillsDir": "/srv/s"}}]}))
        await wait_for(lambda: events(logs, "triggers_reload_invalid"), 5, what="the refusal to be logged")
        assert events(logs, "triggers_reload_invalid")[0]["error"].startswith(
            "PI_TRIGGERS_FILE triggers.json: triggers[0].run.skillsDir is not supported by pi-dispatch yet")
        assert ref.current is good


async def test_an_edit_to_an_empty_list_loads_and_warns_once(path: Path) -> None:
    async with watching(path) as (ref, logs):
        replace(path, json.dumps({"triggers": []}))
        await wait_for(lambda: ref.current.count == 0, 5, what="the empty list to be loaded")
        await wait_for(lambda: events(logs, "triggers_empty"), 5, what="the warning")
        [line] = events(logs, "triggers_empty")
        assert line["log_level"] == "warning" and line["file"] == "triggers.json"
