"""Images the suite runs but does not build: ``.ci/run`` builds them once, before the tests, each
skipped by its content hash when nothing changed (``pi-dispatch job-image build``, ``service-image
build``). A test that needs one skips with the command that builds it, or fails where CI requires it."""

from __future__ import annotations

import subprocess

import pytest


def image_present(ref: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True,
                          text=True, timeout=60, check=False)
    return done.returncode == 0


def require_built(ref: str, build: str, *, required: bool, flag: str) -> str:
    """``ref`` when it exists; otherwise skip (or fail under ``flag``=1) naming ``build``."""
    if image_present(ref):
        return ref
    why = f"{ref} is not built here; run `{build}` first (.ci/run does)"
    if required:
        pytest.fail(f"{flag}=1 but {why}")
    pytest.skip(why)
