"""``--profile DIR``: record a service with py-spy during a measured phase and summarise where its samples
went.

py-spy records collapsed stacks (one line per distinct stack: ``frame;frame;... count``); the summary is a
flat profile: the share of samples each function was on top of the stack (self) and anywhere in it
(inclusive). ``--nonblocking`` samples without pausing the process, so the run's own figures still hold,
less the one core py-spy itself takes a little of.
"""

from __future__ import annotations

import shutil
import sys
from collections import Counter
from pathlib import Path


def record_argv(pid: int, seconds: float | None, out: Path) -> list[str]:
    """``py-spy record`` attached to ``pid`` for ``seconds`` (None: until it exits), collapsed stacks to
    ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    length = ["--duration", str(max(1, round(seconds)))] if seconds is not None else []
    return [spy, "record", "--pid", str(pid), *length, "--format", "raw", "--rate", "250", "--nonblocking",
            "-o", str(out)]


# py-spy names a module by its path under sys.path: the project's own start with one of its packages.
_OURS = ("common/", "forges/", "triggers/", "receiver/", "router/", "worker/", "console/", "dev/")


def _frame(raw: str) -> str:
    """``func (pkg/module.py:line)`` → ``pkg/module.py:func``, line-free so a function is one row; the
    project's own frames are marked ``pd:``."""
    name, _, where = raw.partition(" (")
    path = where.rsplit(":", 1)[0]
    label = f"{path}:{name}" if path else name
    return f"pd:{label}" if path.startswith(_OURS) else label


def summary(path: Path, top: int = 15) -> str:
    """The flat profile of one recording, self and inclusive, each row a share of all samples."""
    own: Counter[str] = Counter()
    within: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            within[frame] += n
    if not total:
        return f"{path.name}: no samples"
    rows = [f"{path.name}: {total} samples", f"  {'self':>6}  function"]
    rows += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    rows.append(f"  {'incl':>6}  function (project code only)")
    ours = [(f, n) for f, n in within.most_common() if f.startswith("pd:")]
    rows += [f"  {100 * n / total:5.1f}%  {f}" for f, n in ours[:top]]
    return "\n".join(rows)
