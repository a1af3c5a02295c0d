"""Secret profiles with real resolver executables."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import structlog

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.common.outcome import InfraFault, JobRefusal
from pidispatch.common.settings import Settings, load_settings
from pidispatch.worker.engine.secrets import resolve_secrets
from tests.support.payloads import load_fixture
from tests.support.polling import wait_for

# One resolver plays every case, chosen by the reference; each run appends a line to $COUNT_FILE.
RESOLVER = r"""#!/bin/sh
echo "$1" >> "$COUNT_FILE"
case "$1" in
  vault://plain) printf 's3cret\n' ;;
  vault://crlf) printf 'a\r\n' ;;
  vault://two-newlines) printf 'x\n\n' ;;
  vault://deny) printf 'no such secret' >&2; exit 2 ;;
  vault://broken) exit 1 ;;
  vault://odd) exit 3 ;;
  vault://empty) exit 0 ;;
  vault://newline-only) printf '\n' ;;
  vault://big) i=0; while [ $i -lt 70 ]; do printf '%01024d' 0; i=$((i+1)); done ;;
  vault://nul) printf 'a\000b' ;;
  vault://env) printf '%s' "$RESOLVER_SEES" ;;
  vault://stdin) cat ;;
  vault://slow) echo $$ > "$PID_FILE"; exec sleep 30 ;;
  vault://stubborn) trap '' TERM; sleep 30 & echo $! > "$PID_FILE"; wait ;;
  *) printf 'value-of-%s\n' "$1" ;;
esac
"""


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a reaper that is not us)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.fixture
def resolver(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "resolve-secret"
    path.parent.mkdir()
    path.write_text(RESOLVER)
    path.chmod(0o755)
    return path


@pytest.fixture
def run_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "COUNT_FILE": str(tmp_path / "spawns"),
        "PID_FILE": str(tmp_path / "pid"),
        "RESOLVER_SEES": "from-the-worker-env",
    }


def spawns(env: dict[str, str]) -> list[str]:
    path = Path(env["COUNT_FILE"])
    return path.read_text().splitlines() if path.exists() else []


def settings(resolver: Path, **env: str) -> Settings:
    return load_settings({"PI_SECRET_PROFILES": f"default:{resolver}", **env})


def job(secrets: dict[str, str] | None, *, profile: str | None = None, provider: str | None = None) -> Job:
    p = load_fixture("github/issues.labeled.json")
    return Job(
        id="gh-1", kind="github", repo=p["repository"]["full_name"], flow="triage",
        target=Target(type="issue", number=p["issue"]["number"]),
        trigger=Trigger(event="issues", action="labeled", sender=Sender(id=p["sender"]["id"]),
                        matched=Matched(index=0, type="label", label="bug")),
        secrets=secrets, secrets_profile=profile, provider=provider,
    )


async def test_values_lose_exactly_one_trailing_line_ending(resolver: Path, run_env: dict[str, str]) -> None:
    secrets = {"DB_PASSWORD": "vault://plain", "CRLF": "vault://crlf", "KEEP": "vault://two-newlines"}
    got = await resolve_secrets(job(secrets), settings(resolver), env=run_env)
    assert got == {"DB_PASSWORD": "s3cret", "CRLF": "a", "KEEP": "x\n"}


async def test_the_resolver_runs_with_the_given_env_and_no_stdin(
    resolver: Path, run_env: dict[str, str]
) -> None:
    got = await resolve_secrets(job({"SEEN": "vault://env"}), settings(resolver), env=run_env)
    assert got == {"SEEN": "from-the-worker-env"}
    # stdin is /dev/null: `cat` ends at once with nothing, which is an empty (refused) value, not a hang.
    refused = await resolve_secrets(job({"X": "vault://stdin"}), settings(resolver), env=run_env)
    assert refused == JobRefusal("secret-unresolved")


@pytest.mark.parametrize(
    ("reference", "failure"),
    [
        ("vault://deny", "exit-2"),
        ("vault://empty", "empty"),
        ("vault://newline-only", "empty"),
        ("vault://big", "overflow"),
        ("vault://nul", "nul"),
    ],
)
async def test_determinate_no_is_refused_not_retried(
    resolver: Path, run_env: dict[str, str], reference: str, failure: str, tmp_path: Path
) -> None:
    with structlog.testing.capture_logs() as logs:
        got = await resolve_secrets(job({"DB_PASSWORD": reference}), settings(resolver), env=run_env)
    assert got == JobRefusal("secret-unresolved")
    [line] = [entry for entry in logs if entry["event"] == "secret_refused"]
    assert (line["name"], line["failure"], line["kind"]) == ("DB_PASSWORD", failure, "github")
    # Never the reference, the resolver path or its output.
    text = repr(logs)
    assert reference not in text and str(tmp_path) not in text and "no such secret" not in text


async def test_stderr_is_counted_never_kept(resolver: Path, run_env: dict[str, str]) -> None:
    with structlog.testing.capture_logs() as logs:
        await resolve_secrets(job({"A": "vault://deny"}), settings(resolver), env=run_env)
    [line] = [entry for entry in logs if entry["event"] == "secret_refused"]
    assert (line["code"], line["stderrBytes"]) == (2, len("no such secret"))


@pytest.mark.parametrize("reference", ["vault://broken", "vault://odd"])
async def test_a_resolver_without_a_verdict_is_an_infra_fault(
    resolver: Path, run_env: dict[str, str], reference: str
) -> None:
    with structlog.testing.capture_logs() as logs, pytest.raises(InfraFault) as caught:
        await resolve_secrets(job({"A": reference}), settings(resolver), env=run_env)
    assert caught.value.reason == "secret-resolver-unreachable"
    assert caught.value.refund
    assert [entry["event"] for entry in logs] == ["secret_resolver_fault"]


async def test_a_resolver_that_cannot_spawn_is_an_infra_fault(
    tmp_path: Path, run_env: dict[str, str]
) -> None:
    # Executable by its mode, but its interpreter does not exist: exec fails with ENOENT.
    broken = tmp_path / "broken"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    with pytest.raises(InfraFault):
        await resolve_secrets(job({"A": "vault://plain"}), settings(broken), env=run_env)


async def test_the_first_failure_stops_the_loop(resolver: Path, run_env: dict[str, str]) -> None:
    secrets = {"A": "vault://plain", "B": "vault://deny", "C": "vault://crlf"}
    got = await resolve_secrets(job(secrets), settings(resolver), env=run_env)
    assert got == JobRefusal("secret-unresolved")
    assert spawns(run_env) == ["vault://plain", "vault://deny"]


async def test_identical_references_are_resolved_once(resolver: Path, run_env: dict[str, str]) -> None:
    secrets = {"FIRST": "vault://shared", "SECOND": "vault://shared", "OTHER": "vault://plain"}
    got = await resolve_secrets(job(secrets), settings(resolver), env=run_env)
    assert got == {"FIRST": "value-of-vault://shared", "SECOND": "value-of-vault://shared", "OTHER": "s3cret"}
    assert spawns(run_env) == ["vault://shared", "vault://plain"]


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "PI_MODEL", "HOME", "LD_PRELOAD", "OPENAI_BASE_URL", "A=B"])
async def test_statically_reserved_names_are_refused_before_any_lookup(
    tmp_path: Path, run_env: dict[str, str], name: str
) -> None:
    # No profile is declared at all: the name check comes first.
    with structlog.testing.capture_logs() as logs:
        got = await resolve_secrets(job({name: "vault://plain"}), load_settings({}), env=run_env)
    assert got == JobRefusal("secret-name-reserved")
    assert logs[0]["name"] == name
    assert spawns(run_env) == []


async def test_the_job_providers_key_is_reserved_another_providers_is_not(
    resolver: Path, run_env: dict[str, str]
) -> None:
    with structlog.testing.capture_logs() as logs:
        got = await resolve_secrets(
            job({"ANTHROPIC_API_KEY": "vault://plain"}), settings(resolver), env=run_env
        )
    assert got == JobRefusal("secret-name-reserved")
    assert logs[0]["name"] == "ANTHROPIC_API_KEY" and "vault://plain" not in repr(logs)
    allowed = await resolve_secrets(job({"OPENAI_API_KEY": "vault://plain"}), settings(resolver), env=run_env)
    assert allowed == {"OPENAI_API_KEY": "s3cret"}
    # The job's own provider decides, not the deployment's.
    openai_job = job({"OPENAI_API_KEY": "vault://plain"}, provider="openai")
    got = await resolve_secrets(openai_job, settings(resolver), env=run_env)
    assert got == JobRefusal("secret-name-reserved")


async def test_a_forwarded_name_cannot_be_bound(resolver: Path, run_env: dict[str, str]) -> None:
    s = settings(resolver, PI_FORWARD_ENV="SENTRY_DSN")
    assert await resolve_secrets(job({"SENTRY_DSN": "vault://plain"}), s, env=run_env) == JobRefusal(
        "secret-name-reserved"
    )
    assert spawns(run_env) == []


async def test_profile_lookup(resolver: Path, run_env: dict[str, str], tmp_path: Path) -> None:
    plain = {"A": "vault://plain"}
    not_exec = tmp_path / "not-exec"
    not_exec.write_text(RESOLVER)
    not_exec.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(resolver)
    s = load_settings({"PI_SECRET_PROFILES": f"prod:{resolver},plain:{not_exec},dir:{tmp_path},via:{link}"})
    unknown = JobRefusal("secret-profile-unknown")
    assert await resolve_secrets(job(plain), s, env=run_env) == unknown  # no "default": no fallback
    assert await resolve_secrets(job(plain, profile="staging"), s, env=run_env) == unknown
    assert await resolve_secrets(job(plain, profile="plain"), s, env=run_env) == unknown
    assert await resolve_secrets(job(plain, profile="dir"), s, env=run_env) == unknown
    assert await resolve_secrets(job(plain, profile="prod"), s, env=run_env) == {"A": "s3cret"}
    assert await resolve_secrets(job(plain, profile="via"), s, env=run_env) == {"A": "s3cret"}


async def test_not_armed_spawns_nothing_and_a_bare_profile_is_still_checked(
    resolver: Path, run_env: dict[str, str]
) -> None:
    assert await resolve_secrets(job(None), load_settings({}), env=run_env) == {}
    assert await resolve_secrets(job({}), load_settings({}), env=run_env) == {}
    assert await resolve_secrets(job(None, profile="default"), settings(resolver), env=run_env) == {}
    assert await resolve_secrets(job(None, profile="nope"), settings(resolver), env=run_env) == JobRefusal(
        "secret-profile-unknown"
    )
    assert spawns(run_env) == []


async def test_a_slow_resolver_times_out_and_is_gone(resolver: Path, run_env: dict[str, str]) -> None:
    s = settings(resolver, PI_SECRET_RESOLVE_TIMEOUT_MS="500")
    with pytest.raises(InfraFault):
        await resolve_secrets(job({"A": "vault://slow"}), s, env=run_env)
    pid = int(Path(run_env["PID_FILE"]).read_text())
    assert not running(pid)


async def test_a_resolver_ignoring_sigterm_is_killed_with_its_helpers(
    resolver: Path, run_env: dict[str, str]
) -> None:
    s = settings(resolver, PI_SECRET_RESOLVE_TIMEOUT_MS="500")
    with pytest.raises(InfraFault):
        await resolve_secrets(job({"A": "vault://stubborn"}), s, env=run_env)
    helper = int(Path(run_env["PID_FILE"]).read_text())
    await wait_for(lambda: not running(helper), 5, what="the resolver's helper process to die")


async def test_abort_kills_the_resolver(resolver: Path, run_env: dict[str, str]) -> None:
    abort = asyncio.Event()
    task = asyncio.create_task(
        resolve_secrets(job({"A": "vault://slow"}), settings(resolver), env=run_env, abort=abort)
    )
    pid_file = Path(run_env["PID_FILE"])
    await wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 5, what="resolver start")
    abort.set()
    with pytest.raises(InfraFault):
        await asyncio.wait_for(task, 5)
    assert not running(int(pid_file.read_text()))


async def test_an_abort_already_set_spawns_nothing(resolver: Path, run_env: dict[str, str]) -> None:
    abort = asyncio.Event()
    abort.set()
    with pytest.raises(InfraFault):
        await resolve_secrets(job({"A": "vault://plain"}), settings(resolver), env=run_env, abort=abort)
    assert spawns(run_env) == []
