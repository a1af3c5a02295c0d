"""common.filewatch: a changed file is loaded and swapped in; a bad edit or a deleted file keeps the last
good value, and says so."""

from __future__ import annotations

import asyncio
from pathlib import Path

from structlog.testing import capture_logs

from pidispatch.common.errors import ConfigError
from pidispatch.common.filewatch import watch_file
from tests.support.polling import wait_for


def load_number(path: str) -> int:
    text = Path(path).read_text()
    if not text.strip().isdigit():
        raise ConfigError("n.txt: accepted: a number")
    return int(text)


async def test_a_good_edit_is_swapped_in_and_a_bad_one_keeps_the_last_good(tmp_path: Path) -> None:
    path = tmp_path / "n.txt"
    path.write_text("1")
    current = [1]
    stop = asyncio.Event()
    with capture_logs() as logs:
        watcher = asyncio.create_task(watch_file(
            str(path), load_number, current.append, stop, what="number", interval=0.02, debounce=0.02,
        ))
        try:
            await wait_for(lambda: any(e["event"] == "number_watching" for e in logs), what="the watch")
            path.write_text("2")
            await wait_for(lambda: current[-1] == 2, what="the good edit")
            path.write_text("two")
            await wait_for(lambda: any(e["event"] == "number_reload_invalid" for e in logs), what="refusal")
            path.unlink()
            await wait_for(lambda: any(e["event"] == "number_file_missing" for e in logs), what="missing")
        finally:
            stop.set()
            await watcher
    assert current == [1, 2]  # neither the bad edit nor the deletion replaced it
