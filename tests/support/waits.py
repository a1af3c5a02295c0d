"""A wait-for check program for tests: a real executable the worker runs as ``<check> <target>``."""

from __future__ import annotations

from pathlib import Path


def check_program(folder: Path, *codes: int) -> str:
    """A check answering ``codes`` in turn (the last one from then on); each argv[1] is appended to
    ``folder/args``, and it prints a line that must only ever be counted."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "answers").write_text("".join(f"{c}\n" for c in codes))
    path = folder / "check"
    path.write_text(
        "#!/bin/sh\n"
        'd="$(dirname "$0")"; echo "$1" >> "$d/args"\n'
        'code=$(head -n1 "$d/answers")\n'
        'if [ "$(wc -l < "$d/answers")" -gt 1 ]; then\n'
        '  tail -n +2 "$d/answers" > "$d/a.tmp"; mv "$d/a.tmp" "$d/answers"\n'
        "fi\n"
        'echo "noise that is only counted"; exit "$code"\n'
    )
    path.chmod(0o755)
    return str(path)
