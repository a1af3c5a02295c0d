"""The forge clone: one commit at depth 1 from a real git smart-HTTP server, the token only ever in git's
environment through a throw-away askpass helper, ``sha-gone`` refused, anything else a retried fault, and
nothing from the worker's own git setup or the repository ever run."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pidispatch.common.models import Job, Target
from pidispatch.common.outcome import InfraFault, JobConfigRefused, JobRefusal
from pidispatch.common.settings import Settings, load_settings
from pidispatch.worker.engine.workspace import ensure_jobs_dir, prepare_workspace
from pidispatch.worker.forgework.clone import ASKPASS_NAME, CLONE_FAILED, SHA_GONE, clone_tip, hand_over
from tests.support.gitserver import GitServer, git_server
from tests.support.polling import wait_for

USERNAME = "x-access-token"
IS_ROOT = os.geteuid() == 0


def job() -> Job:
    return Job(id="gh-clone", kind="github", repo="octo/widgets", flow="fix",
               target=Target(type="issue", number=7, title="t", body="b"))


def git_out(workspace: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", f"safe.directory={workspace}", "-C", str(workspace), *args],
        check=True, capture_output=True, text=True, env={"PATH": os.environ["PATH"], "LC_ALL": "C"},
    ).stdout.strip()


def all_cmdlines() -> list[bytes]:
    """Every process's argv on this machine, as /proc shows it to anyone (``ps``)."""
    lines = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                lines.append(Path(f"/proc/{entry}/cmdline").read_bytes())
            except OSError:
                continue  # gone between listing and reading
    return lines


@pytest.fixture
def token() -> str:
    return "ghs_" + secrets.token_hex(20)


@pytest.fixture
def scratch_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Python's temp folder for this test only, so the askpass folder's fate can be seen."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    # The server is on loopback: an operator's proxy must not stand between git and it.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return path


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    s = load_settings({"PI_JOBS_DIR": str(tmp_path / "jobs")})
    ensure_jobs_dir(s.jobs_dir)
    return s


@pytest.fixture
async def job_dir(settings: Settings) -> Path:
    """A real job folder as the worker makes it: its ``workspace/`` empty and handed to the job user."""
    return Path(await prepare_workspace(job(), settings))


@pytest.fixture
async def server(tmp_path: Path, token: str) -> AsyncIterator[GitServer]:
    async with git_server(tmp_path / "forge", username=USERNAME, token=token) as s:
        yield s


@pytest.fixture
def shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``git`` on PATH records each call's argv and GIT_ASKPASS (one file per call), then runs real git."""
    real = shutil.which("git")
    assert real is not None
    bin_dir, calls = tmp_path / "shim-bin", tmp_path / "shim-calls"
    bin_dir.mkdir()
    calls.mkdir()
    script = bin_dir / "git"
    script.write_text(
        "#!/bin/sh\n"
        # Nanoseconds first, so the file names sort in call order.
        f'f="{calls}/$(date +%s%N).$$"\n'
        'printf \'%s\\0\' "${GIT_ASKPASS:-}" "$@" > "$f"\n'
        f'exec "{real}" "$@"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    yield calls


def recorded_calls(calls: Path, workspace: Path) -> list[list[bytes]]:
    """(GIT_ASKPASS, *argv) of the calls made on ``workspace`` (the server's own git calls excluded)."""
    out = []
    for f in sorted(calls.iterdir()):
        fields = f.read_bytes().split(b"\0")[:-1]
        if str(workspace).encode() in fields:
            out.append(fields)
    return out


async def test_clone_holds_exactly_the_tip_commit_at_depth_one(
    server: GitServer, job_dir: Path, token: str, scratch_tmp: Path
) -> None:
    await server.add_commit({"README.md": "first\n"})
    tip = await server.add_commit({"README.md": "second\n", "src/app.py": "print('hi')\n"})
    ws = job_dir / "workspace"
    assert await clone_tip(str(ws), clone_url=server.url, sha=tip, token=token, username=USERNAME) is None
    assert git_out(ws, "rev-parse", "HEAD") == tip
    assert git_out(ws, "rev-list", "--count", "HEAD") == "1"
    assert (ws / ".git" / "shallow").read_text().strip() == tip
    assert git_out(ws, "status", "--porcelain") == ""
    assert (ws / "README.md").read_text() == "second\n"
    assert git_out(ws, "remote", "get-url", "origin") == server.url
    # Detached, and no tag or other branch came along.
    assert git_out(ws, "for-each-ref") == ""


async def test_an_older_commit_is_fetched_by_its_sha(
    server: GitServer, job_dir: Path, token: str, scratch_tmp: Path
) -> None:
    first = await server.add_commit({"README.md": "first\n"})
    await server.add_commit({"README.md": "second\n"})
    ws = job_dir / "workspace"
    assert await clone_tip(str(ws), clone_url=server.url, sha=first, token=token, username=USERNAME) is None
    assert git_out(ws, "rev-parse", "HEAD") == first
    assert (ws / "README.md").read_text() == "first\n"


async def test_the_token_is_in_no_file_of_the_workspace_and_reached_the_forge_as_basic_auth(
    server: GitServer, job_dir: Path, token: str, scratch_tmp: Path
) -> None:
    sha = await server.add_commit({"README.md": "hello\n"})
    ws = job_dir / "workspace"
    assert await clone_tip(str(ws), clone_url=server.url, sha=sha, token=token, username=USERNAME) is None
    needles = (token.encode(), base64.b64encode(f"{USERNAME}:{token}".encode()))
    files = [Path(top, name) for top, _, names in os.walk(job_dir) for name in names]
    assert any(p.name == "config" and p.parent.name == ".git" for p in files)
    for path in files:
        if not path.is_symlink():
            data = path.read_bytes()
            assert not any(n in data for n in needles), path.relative_to(job_dir)
    config = (ws / ".git" / "config").read_text()
    assert server.url in config and "@" not in config
    expected = "Basic " + base64.b64encode(f"{USERNAME}:{token}".encode()).decode()
    # git asked first without credentials (the 401 triggers the askpass helper), then sent exactly these.
    assert server.authorizations[0] is None
    assert set(server.authorizations[1:]) == {expected}


async def test_the_token_never_appears_in_any_process_argv_and_the_askpass_folder_is_private_then_gone(
    server: GitServer, job_dir: Path, token: str, scratch_tmp: Path, shim: Path
) -> None:
    sha = await server.add_commit({"README.md": "hello\n"})
    ws = job_dir / "workspace"
    server.hold = asyncio.Event()
    task = asyncio.create_task(
        clone_tip(str(ws), clone_url=server.url, sha=sha, token=token, username=USERNAME)
    )
    try:
        # The fetch is now in flight and waiting on the forge: its git processes are all alive.
        await wait_for(server.held.is_set, 20, what="the authenticated fetch request")
        cmdlines = all_cmdlines()
        assert any(server.url.encode() in c and b"remote-http" in c for c in cmdlines), "no fetch seen"
        assert not any(token.encode() in c for c in cmdlines)
        (askpass_home,) = scratch_tmp.iterdir()
        script = askpass_home / ASKPASS_NAME
        assert stat.S_IMODE(askpass_home.stat().st_mode) == 0o700
        assert stat.S_IMODE(script.stat().st_mode) == 0o700
        assert token not in script.read_text()
    finally:
        server.hold.set()
    assert await task is None
    assert list(scratch_tmp.iterdir()) == []
    calls = recorded_calls(shim, ws)
    assert [c[c.index(b"-C") + 2] for c in calls] == [b"init", b"remote", b"fetch", b"checkout"]
    assert not any(token.encode() in field for c in calls for field in c)
    for askpass, *argv in calls:
        for flag in (b"core.hooksPath=/dev/null", b"core.fsmonitor=false", b"protocol.ext.allow=never",
                     b"credential.helper=", b"--no-pager"):
            assert flag in argv
        # Only the fetch is told where the helper is, and the helper lives outside the job folder.
        if b"fetch" in argv:
            assert askpass == str(script).encode()
            assert not str(script).startswith(str(job_dir))
        else:
            assert askpass == b""


async def test_a_wrong_token_is_a_retried_fault_not_sha_gone_and_its_output_is_not_logged(
    server: GitServer, job_dir: Path, scratch_tmp: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    sha = await server.add_commit({"README.md": "hello\n"})
    with pytest.raises(InfraFault) as exc:
        await clone_tip(str(job_dir / "workspace"), clone_url=server.url, sha=sha, token="ghs_wrong",
                        username=USERNAME)
    assert exc.value.reason == CLONE_FAILED and exc.value.refund
    assert list(scratch_tmp.iterdir()) == []
    lines = [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    failed = [line for line in lines if line.get("event") == "clone_failed"]
    assert len(failed) == 1 and failed[0]["code"] == 128
    assert all(server.url not in json.dumps(line) and "wrong" not in json.dumps(line) for line in lines)


async def test_an_unknown_sha_is_refused_as_sha_gone(
    server: GitServer, job_dir: Path, token: str, scratch_tmp: Path
) -> None:
    await server.add_commit({"README.md": "hello\n"})
    gone = "0123456789abcdef0123456789abcdef01234567"
    result = await clone_tip(str(job_dir / "workspace"), clone_url=server.url, sha=gone, token=token,
                             username=USERNAME)
    assert result == JobRefusal(SHA_GONE)
    assert list(scratch_tmp.iterdir()) == []


async def test_an_unreachable_forge_is_a_retried_fault(job_dir: Path, token: str, scratch_tmp: Path) -> None:
    with pytest.raises(InfraFault, match=CLONE_FAILED):
        await clone_tip(str(job_dir / "workspace"), clone_url="http://127.0.0.1:9/repo.git", sha="a" * 40,
                        token=token, username=USERNAME)
    assert list(scratch_tmp.iterdir()) == []


async def test_a_clone_that_overruns_its_deadline_is_killed_and_retried(
    server: GitServer, job_dir: Path, token: str, scratch_tmp: Path
) -> None:
    sha = await server.add_commit({"README.md": "hello\n"})
    server.hold = asyncio.Event()  # never set: the forge stops answering mid-fetch
    with pytest.raises(InfraFault, match=CLONE_FAILED):
        await clone_tip(str(job_dir / "workspace"), clone_url=server.url, sha=sha, token=token,
                        username=USERNAME, timeout_s=2)
    assert list(scratch_tmp.iterdir()) == []
    await wait_for(lambda: not any(server.url.encode() in c for c in all_cmdlines()), 10,
                   what="the fetch's git processes to be gone")


async def test_the_workers_own_git_config_and_environment_are_ignored(
    server: GitServer, job_dir: Path, token: str, scratch_tmp: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hook the worker's account configured (user config, template folder, GIT_CONFIG_PARAMETERS) never
    runs on a job's clone, and a stray GIT_DIR cannot point git at another repository."""
    sha = await server.add_commit({"README.md": "hello\n"})
    marker = tmp_path / "hook-ran"
    hooks = tmp_path / "evil-hooks"
    hooks.mkdir()
    for name in ("post-checkout", "reference-transaction", "post-index-change"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / name).chmod(0o755)
    templates = tmp_path / "evil-templates"
    shutil.copytree(hooks, templates / "hooks")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        f"[core]\n\thooksPath = {hooks}\n[init]\n\ttemplateDir = {templates}\n"
        f'[url "http://127.0.0.1:9/"]\n\tinsteadOf = {server.url.rsplit("/", 1)[0]}/\n'
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.hookspath'='{hooks}'")
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(templates))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    ws = job_dir / "workspace"
    assert await clone_tip(str(ws), clone_url=server.url, sha=sha, token=token, username=USERNAME) is None
    assert git_out(ws, "rev-parse", "HEAD") == sha
    assert not marker.exists()
    assert not (ws / ".git" / "hooks").exists()
    assert not (tmp_path / "elsewhere").exists()


async def test_the_clone_belongs_to_the_job_user_and_repository_symlinks_are_not_followed(
    server: GitServer, job_dir: Path, token: str, scratch_tmp: Path, tmp_path: Path
) -> None:
    host_file = tmp_path / "host-secret"
    host_file.write_text("host\n")
    host_file.chmod(0o600)
    sha = await server.add_commit({"README.md": "hello\n", "bin/run.sh": "#!/bin/sh\n"},
                                  symlinks={"escape": str(host_file), "escape-dir": str(tmp_path)})
    ws = job_dir / "workspace"
    assert await clone_tip(str(ws), clone_url=server.url, sha=sha, token=token, username=USERNAME) is None
    owner = (ws.stat().st_uid, ws.stat().st_gid)
    entries = [Path(top, n) for top, dirs, names in os.walk(ws) for n in (*dirs, *names)]
    assert (ws / "escape").is_symlink() and ws / ".git" / "config" in entries
    for path in entries:
        st = path.lstat()
        if IS_ROOT:
            assert (st.st_uid, st.st_gid) == owner == (1000, 1000), path
        elif not stat.S_ISLNK(st.st_mode):
            assert stat.S_IMODE(st.st_mode) & 0o666 == 0o666, path
    host = host_file.stat()
    assert (host.st_uid, host.st_gid, stat.S_IMODE(host.st_mode)) == (os.geteuid(), os.getegid(), 0o600)
    assert tmp_path.stat().st_uid == os.geteuid()


def test_without_root_the_clone_is_opened_by_modes_and_symlinks_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker without root cannot chown: every folder becomes 0777, every file rw for all (executables
    stay executable), so the job's uid can work; the host file behind a symlink keeps its mode."""
    host_file = tmp_path / "host-secret"
    host_file.write_text("host\n")
    host_file.chmod(0o600)
    ws = tmp_path / "workspace"
    (ws / ".git" / "objects").mkdir(parents=True)
    (ws / "README.md").write_text("x")
    (ws / "README.md").chmod(0o644)
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "run.sh").chmod(0o755)
    (ws / ".git" / "objects" / "pack").write_bytes(b"p")
    (ws / ".git" / "objects" / "pack").chmod(0o444)
    (ws / "escape").symlink_to(host_file)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    hand_over(str(ws))
    modes = {str(p.relative_to(ws)): stat.S_IMODE(p.lstat().st_mode)
             for p in ws.rglob("*") if not p.is_symlink()}
    assert modes == {".git": 0o777, ".git/objects": 0o777, ".git/objects/pack": 0o666, "README.md": 0o666,
                     "run.sh": 0o777}
    assert stat.S_IMODE(host_file.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("field", "value", "hint"),
    [
        ("sha", "abc123", "sha"),
        ("sha", "A" * 40, "sha"),
        ("clone_url", "ssh://git@example.invalid/o/r.git", "http"),
        ("clone_url", "file:///srv/repo.git", "http"),
        ("clone_url", "https://x-access-token:ghs_leak@example.invalid/o/r.git", "user information"),
        ("clone_url", "https://org@example.invalid/o/r.git", "user information"),
        ("clone_url", "-https://example.invalid/o/r.git", "http"),
        ("clone_url", "https://example.invalid/o r.git", "printable"),
        ("token", "  ", "token"),
        ("token", "ghs_a\nb", "token"),
        ("username", "x:y", "username"),
        ("username", "", "username"),
    ],
)
async def test_malformed_inputs_are_configuration_errors_before_any_git_call(
    job_dir: Path, scratch_tmp: Path, field: str, value: str, hint: str
) -> None:
    args = {"clone_url": "https://example.invalid/o/r.git", "sha": "a" * 40, "token": "ghs_x",
            "username": USERNAME, field: value}
    with pytest.raises(JobConfigRefused, match=hint) as exc:
        await clone_tip(str(job_dir / "workspace"), **args)
    assert "ghs_" not in str(exc.value) and "example.invalid" not in str(exc.value)
    assert list((job_dir / "workspace").iterdir()) == []
    assert list(scratch_tmp.iterdir()) == []
