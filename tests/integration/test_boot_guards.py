"""Every safety gate holds at boot, against real processes: a router that could not tell its own comments
from anyone's, a schedule that never fires or fires every second, a credential forwarded into jobs: each
is refused with exit 2 and one line, never a traceback; a misspelled variable is named at start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GITHUB_COMMENT_RULE = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "fix"}}


def cron_rule(pattern: str, folder: Path) -> dict[str, object]:
    return {"on": {"type": "cron", "id": "nightly", "pattern": pattern},
            "run": {"kind": "local", "folder": str(folder), "flow": "tidy", "task": "tidy up"}}


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of a configuration refusal (exit 2), with nothing else on stderr."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("pi-dispatch: configuration error: ")
    return line.removeprefix("pi-dispatch: configuration error: ")


def write(env: dict[str, str], *rules: dict[str, object]) -> None:
    Path(env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": list(rules)}))


def test_a_router_that_cannot_know_its_own_account_refuses_to_start(base_env: dict[str, str]) -> None:
    write(base_env, GITHUB_COMMENT_RULE)
    env = {k: v for k, v in base_env.items() if k != "GITHUB_SELF_ID"}
    assert refused(run(["pidispatch.router"], env)).startswith(
        "triggers.json has github rules but the harness's own GitHub account cannot be known")


@pytest.mark.parametrize(("pattern", "problem"), [
    ("0 0 31 2 *", "has no occurrence in the next 4 years, so it would never fire"),
    ("* * * * * *", "fires 1 s after a previous occurrence; accepted: at least PI_CRON_MIN_INTERVAL_S=60 s "
                    "apart (lower it to allow this)"),
])
@pytest.mark.parametrize("argv", [["pidispatch.router"], ["pidispatch.worker"],
                                  ["pidispatch.common.cli", "schedules"]])
def test_a_schedule_that_never_fires_or_fires_too_often_is_refused_everywhere(
    base_env: dict[str, str], tmp_path: Path, argv: list[str], pattern: str, problem: str,
) -> None:
    write(base_env, cron_rule(pattern, tmp_path))
    env = {k: v for k, v in base_env.items() if k != "PI_CRON_MIN_INTERVAL_S"}
    assert refused(run(argv, env)) == f"PI_TRIGGERS_FILE triggers.json: triggers[0].on.pattern {problem}"


def test_the_floor_is_lowered_explicitly(base_env: dict[str, str], tmp_path: Path) -> None:
    write(base_env, cron_rule("*/2 * * * * *", tmp_path))
    env = {**base_env, "PI_CRON_MIN_INTERVAL_S": "1"}
    result = run(["pidispatch.common.cli", "schedules", "--json"], env)
    assert result.returncode == 0, result.stderr
    assert [row["id"] for row in json.loads(result.stdout)] == ["nightly"]


@pytest.mark.parametrize("name", ["GITLAB_TOKEN", "FORGEJO_WEBHOOK_SECRET_PREVIOUS", "PD_WEB_PASSWORD",
                                  "REDIS_PASSWORD", "MY_TOKEN"])
def test_a_credential_the_worker_reads_cannot_be_forwarded_into_jobs(
    base_env: dict[str, str], name: str
) -> None:
    env = {**base_env, "PI_FORWARD_ENV": f"SENTRY_DSN,{name}", "GITHUB_PAT_VAR": "MY_TOKEN"}
    assert refused(run(["pidispatch.worker"], env)).startswith(f"PI_FORWARD_ENV may not forward {name}:")


def test_a_misspelled_variable_is_named_with_the_one_meant_before_anything_else(
    base_env: dict[str, str],
) -> None:
    env = {**base_env, "PI_CONCURENCY": "3", "PD_KEY_PREFIX": "bad prefix"}
    result = run(["pidispatch.router"], env)
    assert result.returncode == 2
    warning, error = result.stderr.splitlines()
    line = json.loads(warning)
    assert (line["event"], line["level"], line["meant"]) == (
        "unknown_variable", "warning", {"PI_CONCURENCY": "PI_CONCURRENCY"})
    assert line["message"] == (
        "unknown variable PI_CONCURENCY (did you mean PI_CONCURRENCY?): no process of pi-dispatch reads it")
    assert error.startswith("pi-dispatch: configuration error: PD_KEY_PREFIX")
