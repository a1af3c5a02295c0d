"""``pi-dispatch service install`` writes units systemd itself accepts: ``systemd-analyze verify`` (the
unit parser, the specifiers, ExecStart's absolute and executable path) passes on the system units and the
user units, with no warning. Skips without ``systemd-analyze`` unless ``PD_REQUIRE_SYSTEMD=1``
(``apt-get install -y systemd``)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ANALYZE = shutil.which("systemd-analyze")
ME = pwd.getpwuid(os.getuid()).pw_name
CLI = str(Path(sys.executable).parent / "pi-dispatch")


@pytest.fixture(autouse=True)
def _needs_systemd_analyze() -> None:
    if ANALYZE is None:
        if os.environ.get("PD_REQUIRE_SYSTEMD") == "1":
            pytest.fail("PD_REQUIRE_SYSTEMD=1 but no systemd-analyze (apt-get install -y systemd)")
        pytest.skip("no systemd-analyze (apt-get install -y systemd; PD_REQUIRE_SYSTEMD=1 makes this fail)")


def _deployment(tmp_path: Path) -> Path:
    folder = tmp_path / "deploy here"  # a space: the units must quote what they name
    out = subprocess.run([CLI, "init", str(folder)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return folder


def _verify(units: list[Path], *extra: str, env: dict[str, str] | None = None) -> None:
    assert ANALYZE is not None
    out = subprocess.run([ANALYZE, *extra, "verify", *map(str, units)], capture_output=True, text=True,
                         env=env, check=False, timeout=60)
    assert (out.returncode, out.stderr, out.stdout) == (0, "", "")


def test_system_units_pass_systemd_verify(tmp_path: Path) -> None:
    folder, unit_dir = _deployment(tmp_path), tmp_path / "system"
    # The current account by name: a real one (verify warns on `nobody`), root allowed when asked for.
    argv = [CLI, "service", "install", str(folder), "--run-as", ME, "--unit-dir", str(unit_dir)]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    units = sorted(unit_dir.iterdir())
    assert len(units) == 4
    _verify(units)


def test_user_units_pass_systemd_verify(tmp_path: Path) -> None:
    folder, home = _deployment(tmp_path), tmp_path / "home"
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_CONFIG_HOME", None)
    out = subprocess.run([CLI, "service", "install", str(folder), "--user"], capture_output=True, text=True,
                         env=env, check=False)
    assert out.returncode == 0, out.stderr
    assert "systemctl --user enable --now pi-dispatch.target" in out.stdout
    units = sorted((home / ".config" / "systemd" / "user").iterdir())
    assert len(units) == 4
    # A user manager needs a runtime folder; outside a login session there is none, so one is made here.
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    _verify(units, "--user", env={**env, "XDG_RUNTIME_DIR": str(runtime)})
