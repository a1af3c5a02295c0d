"""``pi-dispatch dev`` as a newcomer runs it: from a clean environment, in a folder of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

CLI = str(Path(sys.executable).with_name("pi-dispatch"))
BANNER_END = " status\n"
CLEAN = {"HOME": os.environ.get("HOME", "/root"), "PATH": "/usr/bin:/bin"}


class Dev:
    """``pi-dispatch dev`` started from a clean environment in ``folder``; output kept in files."""

    def __init__(self, folder: Path, env: dict[str, str], name: str = "dev") -> None:
        self.folder, self.out, self.err = folder, folder / f"{name}.out", folder / f"{name}.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen([CLI, "dev"], cwd=folder, env={**CLEAN, **env}, stdout=out,
                                         stderr=err, start_new_session=True)

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def children(self) -> set[int]:
        """Every process descended from dev, now."""
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        found, frontier = set(), {self.proc.pid}
        while frontier:
            frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
            found |= frontier
        return found

    def stop(self) -> None:
        """Ctrl-C, as an operator stops it; its services run in sessions of their own, so a dev that
        does not stop in time has every descendant killed by pid, never left behind."""
        if self.proc.poll() is not None:
            return
        descendants = self.children()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            for pid in (self.proc.pid, *descendants):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait()


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
