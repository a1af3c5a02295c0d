from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest

from pidispatch.dev.scaffold import ENV_FILE, EXAMPLES_FILE, TRIGGERS_FILE, init_command
from pidispatch.triggers.loader import ON_TYPES, load_triggers


def _contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_init_writes_once_then_keeps_every_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "deploy"
    assert init_command(argparse.Namespace(dir=str(folder))) == 0
    first = capsys.readouterr().out
    assert first.count("wrote ") == 3 and "kept" not in first
    written = _contents(folder)
    assert set(written) == {ENV_FILE, TRIGGERS_FILE, EXAMPLES_FILE}
    assert stat.S_IMODE((folder / ENV_FILE).stat().st_mode) == 0o600
    secret = next(li for li in written[ENV_FILE].decode().splitlines() if li.startswith("WEBHOOK_SECRET="))
    assert len(secret.split("=", 1)[1]) == 64

    assert init_command(argparse.Namespace(dir=str(folder))) == 0
    second = capsys.readouterr().out
    assert second.count("kept ") == 3 and "wrote" not in second
    assert _contents(folder) == written  # same secret, same rules: nothing rewritten
    next_lines = second.split("):", 1)[1].strip().splitlines()
    assert len(next_lines) == 3 and next_lines[1].endswith(" dev")


def test_the_written_triggers_load_and_show_every_trigger_type(tmp_path: Path) -> None:
    init_command(argparse.Namespace(dir=str(tmp_path)))
    rules = load_triggers(str(tmp_path / TRIGGERS_FILE))
    text = (tmp_path / TRIGGERS_FILE).read_text()
    assert rules.count >= len(ON_TYPES) and len(rules.cron) == 1
    for on_type in ON_TYPES:
        assert f'"type": "{on_type}"' in text
        assert f"**{on_type}" in (tmp_path / EXAMPLES_FILE).read_text()


def test_an_existing_env_is_never_rewritten(tmp_path: Path) -> None:
    (tmp_path / ENV_FILE).write_text("WEBHOOK_SECRET=mine-and-long-enough\n")
    init_command(argparse.Namespace(dir=str(tmp_path)))
    assert (tmp_path / ENV_FILE).read_text() == "WEBHOOK_SECRET=mine-and-long-enough\n"
