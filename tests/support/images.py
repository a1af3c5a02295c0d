"""Images the suite runs but does not build: ``.ci/run`` builds them once, before the tests, each
skipped by its content hash when nothing changed (``pi-dispatch job-image build``, ``service-image
build``). A test that needs one skips with the command that builds it, or fails where CI requires it."""

from __future__ import annotations

import subprocess
import sys

import pytest


def require_built(ref: str, what: str, *, required: bool, flag: str) -> str:
    """``ref`` when ``pi-dispatch <what> build --check`` finds it current for this tree; otherwise skip
    (or fail under ``flag``=1) with what the check said: a stale image would test old code."""
    argv = [sys.executable, "-m", "pidispatch.common.cli", what, "build", "--check", "--tag", ref]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode == 0:
        return ref
    why = (done.stdout or done.stderr).strip().splitlines()[-1:] or [f"{what} build --check failed"]
    message = f"{why[0]} (.ci/run builds it before the tests)"
    if required:
        pytest.fail(f"{flag}=1: {message}")
    pytest.skip(message)
