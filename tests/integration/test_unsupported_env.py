"""Variables pi-dispatch does not implement, against real processes: each stops the router with exit 2
and one line on stderr; allowed by PD_ALLOW_UNSUPPORTED, a service and a command start with one warning."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pidispatch.common.unsupported import ALLOW_VARIABLE, UNSUPPORTED
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess


def _router(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pidispatch.router"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_each_unimplemented_variable_stops_the_router_with_exit_2_and_one_line(
    base_env: dict[str, str]
) -> None:
    # Two at a time: one process per variable, each refused before Redis or the triggers file is read.
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(UNSUPPORTED, pool.map(lambda n: _router({**base_env, n: "1"}), UNSUPPORTED),
                           strict=True))
    for name, result in results.items():
        assert (name, result.returncode, result.stdout) == (name, 2, "")
        assert result.stderr == (
            f"pi-dispatch: configuration error: {name} is set but pi-dispatch does not implement it; "
            f"{UNSUPPORTED[name]} (or list it in {ALLOW_VARIABLE} to start anyway)\n"
        )


def test_an_allowed_variable_lets_a_command_run_with_one_warning_on_stderr(base_env: dict[str, str]) -> None:
    env = {**base_env, "PI_MODEL_ENDPOINTS_FILE": "/etc/endpoints.json",
           ALLOW_VARIABLE: "PI_MODEL_ENDPOINTS_FILE"}
    result = subprocess.run([sys.executable, "-m", "pidispatch.common.cli", "runs", "--local", "--json"],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["runs"] == []  # stdout stays a script's input
    [line] = result.stderr.splitlines()
    warning = json.loads(line)
    assert (warning["event"], warning["level"], warning["names"]) == (
        "unsupported_variable_allowed", "warning", ["PI_MODEL_ENDPOINTS_FILE"])


async def test_an_allowed_variable_lets_the_router_start_with_one_warning(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": []}))
    env = {**base_env, "PI_MODEL_ENDPOINTS_FILE": "notify", ALLOW_VARIABLE: "PI_MODEL_ENDPOINTS_FILE"}
    router = ServiceProcess("router", env, tmp_path / "router.log")
    router.start()
    try:
        await wait_for(lambda: router.logged("triggers_watching"), timeout=15, what="the router to start")
        [line] = router.logged("unsupported_variable_allowed")
        assert line["names"] == ["PI_MODEL_ENDPOINTS_FILE"]
    finally:
        assert router.stop() == 0


def test_a_typo_in_the_allow_list_stops_the_router(base_env: dict[str, str]) -> None:
    result = _router({**base_env, ALLOW_VARIABLE: "PI_SETTINGS_FIL"})
    assert result.returncode == 2
    assert result.stderr.startswith("pi-dispatch: configuration error: PD_ALLOW_UNSUPPORTED names "
                                    "'PI_SETTINGS_FIL', which is not a variable pi-dispatch refuses; did you "
                                    "mean PI_SETTINGS_FILE?")
    assert result.stderr.count("\n") == 1
