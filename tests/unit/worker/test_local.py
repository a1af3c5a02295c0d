"""Local jobs: the id that makes a repeated run queue once, the worker's folder gate on real git
repositories, and git hardened so a folder's own config can never run anything."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from pidispatch.common.outcome import JobRefusal
from pidispatch.worker.forgework.git import git_env
from pidispatch.worker.local import (
    NO_COMMIT,
    NOT_A_REPO,
    UNREADABLE_REPO,
    USER_UNMAPPABLE,
    FolderFacts,
    argument_problem,
    build_local_job,
    check_folder,
    follow_hint,
    inspect_folder,
    local_job_id,
    local_user,
    queued_minute,
)

IS_ROOT = os.geteuid() == 0
# 2026-11-30 12:34:00 UTC
MINUTE_MS = 1_796_042_040_000
ID_INPUTS = {"flow": "fix", "task": "make the tests pass", "model": "claude-sonnet-4", "image": "pi-job:2"}


def sh_git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "safe.directory=*", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    )
    return out.stdout.strip()


def make_repo(path: Path, *, commit: bool = True) -> Path:
    path.mkdir(parents=True)
    sh_git(path, "init", "-q")
    if commit:
        (path / "README.md").write_text("hello\n")
        sh_git(path, "add", "README.md")
        sh_git(path, "commit", "-qm", "first")
    return path


def hand_to(path: Path, uid: int, gid: int) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, gid)
    os.chown(path, uid, gid)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository owned by an ordinary account (as root: 4242, which also makes git's ownership check
    see a folder the worker does not own)."""
    path = make_repo(tmp_path / "app")
    if IS_ROOT:
        hand_to(path, 4242, 4242)
    return path


def test_job_id_is_stable_within_one_utc_minute_and_names_it() -> None:
    first = local_job_id("/src/app", now_ms=MINUTE_MS, **ID_INPUTS)
    assert local_job_id("/src/app", now_ms=MINUTE_MS + 59_999, **ID_INPUTS) == first
    assert re.fullmatch(r"local-[0-9a-f]{16}-202611301234", first)


def test_job_id_differs_in_the_next_minute() -> None:
    a = local_job_id("/src/app", now_ms=MINUTE_MS + 59_999, **ID_INPUTS)
    b = local_job_id("/src/app", now_ms=MINUTE_MS + 60_000, **ID_INPUTS)
    assert a != b and a.split("-")[1] == b.split("-")[1]


@pytest.mark.parametrize("field", ["folder", "flow", "task", "model", "image", "provider", "max_turns"])
def test_job_id_differs_when_any_one_input_differs(field: str) -> None:
    base = {"folder": "/src/app", **ID_INPUTS, "provider": "anthropic", "max_turns": 30}
    changed = {**base, field: 31 if field == "max_turns" else f"{base[field]}x"}
    assert local_job_id(now_ms=MINUTE_MS, **base) != local_job_id(now_ms=MINUTE_MS, **changed)  # type: ignore[arg-type]


def test_job_id_tells_an_absent_input_from_an_empty_one() -> None:
    assert local_job_id("/a", flow=None, task="t", model=None, image=None, now_ms=MINUTE_MS) != local_job_id(
        "/a", flow="", task="t", model=None, image=None, now_ms=MINUTE_MS
    )


def test_queued_minute_reads_the_minute_back_in_local_time(monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = local_job_id("/src/app", now_ms=MINUTE_MS, **ID_INPUTS)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert queued_minute(job_id) == "12:34"
        monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30
        time.tzset()
        assert queued_minute(job_id) == "18:04"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_git_env_drops_every_inherited_git_variable_and_never_prompts() -> None:
    env = git_env(
        {"PATH": "/usr/bin", "GIT_DIR": "/elsewhere/.git", "GIT_WORK_TREE": "/", "GIT_INDEX_FILE": "/i",
         "GIT_CONFIG_PARAMETERS": "'core.fsmonitor'='/evil'", "HOME": "/root"},
        "/src/app",
    )
    assert env == {
        "PATH": "/usr/bin", "HOME": "/root", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0",
        "GIT_CEILING_DIRECTORIES": "/src",
    }


async def test_missing_folder_is_not_a_repo(tmp_path: Path) -> None:
    assert await inspect_folder(str(tmp_path / "gone")) == JobRefusal(NOT_A_REPO)


async def test_folder_without_dot_git_is_not_a_repo_even_inside_another_repo(repo: Path) -> None:
    inner = repo / "src"
    inner.mkdir()
    assert await inspect_folder(str(inner)) == JobRefusal(NOT_A_REPO)


async def test_a_file_or_a_relative_path_is_not_a_repo(repo: Path) -> None:
    assert await inspect_folder(str(repo / "README.md")) == JobRefusal(NOT_A_REPO)
    assert await inspect_folder("app") == JobRefusal(NOT_A_REPO)


async def test_repo_without_a_commit_is_refused(tmp_path: Path) -> None:
    path = make_repo(tmp_path / "fresh", commit=False)
    if IS_ROOT:
        hand_to(path, 4242, 4242)
    assert await inspect_folder(str(path)) == JobRefusal(NO_COMMIT)


async def test_dot_git_git_cannot_read_is_an_unreadable_repo(tmp_path: Path) -> None:
    path = tmp_path / "broken"
    (path / ".git").mkdir(parents=True)
    assert await inspect_folder(str(path)) == JobRefusal(UNREADABLE_REPO)


@pytest.mark.skipif(not IS_ROOT, reason="handing a folder to root needs root")
@pytest.mark.parametrize(("uid", "gid"), [(0, 0), (0, 4242), (4242, 0)])
async def test_folder_owned_by_root_is_refused_since_a_job_never_runs_as_root(
    repo: Path, uid: int, gid: int
) -> None:
    os.chown(repo, uid, gid)
    assert await inspect_folder(str(repo)) == JobRefusal(USER_UNMAPPABLE)


async def test_ok_folder_gives_its_head_sha_and_owner(repo: Path) -> None:
    facts = await inspect_folder(str(repo))
    assert isinstance(facts, FolderFacts)
    assert facts.sha == sh_git(repo, "rev-parse", "HEAD")
    expected = (4242, 4242) if IS_ROOT else (os.geteuid(), os.getegid())
    assert (facts.uid, facts.gid) == expected
    assert facts.basename == "app"
    assert local_user(facts) == f"{expected[0]}:{expected[1]}"


async def test_inherited_git_dir_cannot_point_the_gate_at_another_repository(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = make_repo(tmp_path / "other")
    (other / "more").write_text("x")
    sh_git(other, "add", "more")
    sh_git(other, "commit", "-qm", "second")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    facts = await inspect_folder(str(repo))
    assert isinstance(facts, FolderFacts)
    assert facts.sha == sh_git(repo, "--git-dir", str(repo / ".git"), "rev-parse", "HEAD")


async def test_dirty_check_never_runs_a_filter_driver_the_folders_git_config_declares(
    repo: Path, tmp_path: Path
) -> None:
    # What a previous job could plant: it had /workspace (this folder, .git included) writable.
    canary = tmp_path / "pwned"
    sh_git(repo, "config", "filter.evil.clean", f"touch {canary}; cat")
    sh_git(repo, "config", "filter.evil.required", "true")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* filter=evil\n")
    os.utime(repo / "README.md", (1_000_000_000, 1_000_000_000))  # stat-dirty: git must read the file
    sh_git(repo, "status", "--porcelain")
    assert canary.exists(), "precondition: plain git status runs the driver"
    canary.unlink()
    os.utime(repo / "README.md", (1_100_000_000, 1_100_000_000))

    facts = await check_folder(str(repo), "app", force=False)
    assert not canary.exists()
    assert isinstance(facts, FolderFacts)


async def test_dirty_folder_is_refused_unless_forced_and_ignored_files_do_not_count(repo: Path) -> None:
    (repo / ".gitignore").write_text("build/\n")
    sh_git(repo, "add", ".gitignore")
    sh_git(repo, "commit", "-qm", "ignore")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("x")
    if IS_ROOT:
        hand_to(repo, 4242, 4242)
    assert isinstance(await check_folder(str(repo), "app", force=False), FolderFacts)
    (repo / "new.txt").write_text("untracked\n")
    problem = await check_folder(str(repo), "app", force=False)
    assert problem == "folder app has uncommitted changes; commit or stash your changes, or pass --force"
    assert isinstance(await check_folder(str(repo), "app", force=True), FolderFacts)


async def test_folder_whose_work_tree_is_elsewhere_is_not_a_top_folder(repo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sh_git(repo, "config", "core.worktree", str(elsewhere))
    problem = await check_folder(str(repo), "app", force=False)
    assert isinstance(problem, str) and "not the top folder of its git work tree" in problem


def args(**overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "folder": "app", "task": "fix it", "flow": None, "provider": None, "model": None, "max_turns": None,
        "image": None, "force": False, "json": False,
    }
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.parametrize(("overrides", "names"), [
    ({"task": None}, "--task"),
    ({"task": "  \n"}, "--task"),
    ({"task": "bad \udcff bytes"}, "--task"),
    ({"flow": "Fix"}, "--flow"),
    ({"flow": "fix-"}, "--flow"),
    ({"flow": "a" * 65}, "--flow"),
    ({"provider": "Anthropic Inc"}, "--provider"),
    ({"model": "-rf"}, "--model"),
    ({"model": "claude sonnet"}, "--model"),
    ({"max_turns": "0"}, "--max-turns"),
    ({"max_turns": "10001"}, "--max-turns"),
    ({"max_turns": "٣"}, "--max-turns"),
    ({"image": "--privileged"}, "--image"),
    ({"image": "img name"}, "--image"),
])
def test_bad_arguments_are_refused_naming_the_option(overrides: dict[str, object], names: str) -> None:
    problem = argument_problem(args(**overrides))
    assert problem is not None and problem.startswith(names)


def test_good_arguments_pass() -> None:
    assert argument_problem(args(flow="fix_tests-2", provider="openai", model="gpt-5.1:latest",
                                 max_turns="12", image="ghcr.io/acme/agent:2")) is None


def test_local_job_carries_the_folder_and_task_but_no_target() -> None:
    job = build_local_job(args(flow="fix", max_turns="7", model="m1"), "/src/app", "app", MINUTE_MS)
    assert (job.kind, job.repo, job.folder) == ("local", "local:app", "/src/app")
    assert (job.task, job.flow) == ("fix it", "fix")
    assert (job.max_turns, job.model, job.enqueued_at) == (7, "m1", MINUTE_MS)
    assert job.target is None and job.trigger is None
    assert job.id == local_job_id("/src/app", flow="fix", task="fix it", model="m1", image=None,
                                  now_ms=MINUTE_MS, max_turns=7)


async def test_filter_driver_whose_name_cannot_be_overridden_refuses_the_dirty_check(repo: Path) -> None:
    # `-c filter.a=b.clean=` would split at the first "=", so such a driver cannot be switched off.
    with (repo / ".git" / "config").open("a") as f:
        f.write('[filter "a=b"]\n\tclean = false\n')
    problem = await check_folder(str(repo), "app", force=True)
    assert isinstance(problem, str) and problem.startswith("the git config in folder app declares a filter")


def test_the_follow_hint_names_commands_that_parse_with_this_job() -> None:
    """``run`` returns at once: the line after it must name verbs that exist, spelt as they parse."""
    from pidispatch.common.cli import build_parser

    job_id = "local-0123456789abcdef-202611301234"
    commands = re.findall(r"pi-dispatch ([a-z]+(?: [\w-]+)?)", follow_hint(job_id))
    assert commands == ["status", "runs", f"cancel {job_id}"]
    parser = build_parser()
    for command in commands:
        assert parser.parse_args(command.split()).func is not None
