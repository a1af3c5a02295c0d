"""``pi-dispatch run <folder>``: every refusal happens before Redis is touched, a run lands on the right
stream once, and a local job's container writes into the operator's folder as the folder's owner."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.models import Job, job_from_fields
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.worker.engine.container import build_spec, container_name
from pidispatch.worker.engine.runner import Abort, remove_job_containers, run_container
from pidispatch.worker.engine.workspace import ensure_jobs_dir, prepare_workspace, remove_workspace
from pidispatch.worker.local import FolderFacts, follow_hint, inspect_folder, local_job_id, local_user
from tests.support.polling import wait_for
from tests.support.worker import IS_ROOT, make_repo


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``pi-dispatch run`` as an operator runs it (TZ fixed so the printed HH:MM is predictable)."""
    full = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"), "TZ": "UTC", **env}
    return subprocess.run(
        [sys.executable, "-m", "pidispatch.common.cli", "run", *args], env=full, capture_output=True,
        text=True, timeout=30, check=False,
    )


@pytest.fixture
def closed_redis_env(base_env: dict[str, str]) -> dict[str, str]:
    return {**base_env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}


def _missing(tmp: Path) -> tuple[str, list[str]]:
    return str(tmp / "gone"), []


def _plain(tmp: Path) -> tuple[str, list[str]]:
    (tmp / "plain").mkdir()
    return str(tmp / "plain"), []


def _dirty(tmp: Path) -> tuple[str, list[str]]:
    repo = make_repo(tmp / "app")
    (repo / "README.md").write_text("edited\n")
    return str(repo), []


def _bad_image(tmp: Path) -> tuple[str, list[str]]:
    return str(make_repo(tmp / "app")), ["--image=--privileged"]


@pytest.mark.parametrize(("setup", "says"), [
    (_missing, "does not exist"),
    (_plain, "is not the top folder of a git repository"),
    (_dirty, "has uncommitted changes; commit or stash your changes, or pass --force"),
    (_bad_image, "--image '--privileged' is refused"),
])
def test_run_refuses_a_bad_folder_or_image_before_contacting_redis(
    closed_redis_env: dict[str, str], tmp_path: Path, setup, says: str
) -> None:
    folder, extra = setup(tmp_path)
    done = cli(closed_redis_env, folder, "--task", "fix it", *extra)
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert says in line
    assert "redis" not in line.lower()


def test_run_without_a_task_exits_1_before_contacting_redis(
    closed_redis_env: dict[str, str], tmp_path: Path
) -> None:
    done = cli(closed_redis_env, str(make_repo(tmp_path / "app")))
    assert (done.returncode, done.stderr.strip()) == (1, "pi-dispatch run: --task is required: say what the "
                                                         "agent should do")


def test_redis_down_after_the_checks_exits_1_naming_redis_url(
    closed_redis_env: dict[str, str], tmp_path: Path
) -> None:
    done = cli(closed_redis_env, str(make_repo(tmp_path / "app")), "--task", "fix it")
    assert done.returncode == 1
    assert "REDIS_URL" in done.stderr and done.stdout == ""


async def entries(redis: Redis, stream: str) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in await redis.xrange(stream)]


async def test_forced_dirty_run_lands_on_this_hosts_stream_without_any_target_text(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "app")
    (repo / "notes.txt").write_text("work in progress\n")
    done = cli(base_env, str(tmp_path / "." / "app"), "--task", "make the tests pass", "--flow", "fix",
               "--max-turns", "7", "--force")
    assert done.returncode == 0, done.stderr
    [(entry_id, fields)] = await redis.xrange(keys.host_jobs(base_env["PI_WORKER_NAME"]))
    assert await redis.xlen(keys.jobs) == 0
    assert sorted(fields) == [b"attempt", b"id", b"job", b"kind", b"repo"]
    job, attempt = job_from_fields(fields)
    assert done.stdout == f"queued {job.id} for folder app\n{follow_hint(job.id)}\n"
    # Its state hash says where it waits; no pd:events entry made it.
    assert await redis.hgetall(keys.job(job.id)) == {
        b"state": b"queued", b"stream": keys.host_jobs(base_env["PI_WORKER_NAME"]).encode(),
        b"entry": entry_id, b"eventEntry": b"",
    }
    assert (fields[b"kind"], fields[b"repo"], attempt) == (b"local", b"local:app", 1)
    assert (job.folder, job.task, job.flow, job.max_turns) == (str(repo), "make the tests pass", "fix", 7)
    assert job.target is None
    raw = json.loads(fields[b"job"])
    assert not {"target", "title", "body", "trigger"} & set(raw)


async def test_undeclared_host_queues_on_the_shared_stream(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    env = {k: v for k, v in base_env.items() if k != "PI_WORKER_NAME"}
    done = cli(env, str(make_repo(tmp_path / "app")), "--task", "fix it", "--json")
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert (reply["status"], reply["folder"], reply["stream"]) == ("queued", "app", keys.jobs)
    [fields] = await entries(redis, keys.jobs)
    assert fields[b"id"].decode() == reply["jobId"]


async def test_the_same_run_twice_in_one_minute_is_queued_once(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    folder = str(make_repo(tmp_path / "app"))
    # The runs below take a few seconds and must share one minute: never start in a minute's last 8 s.
    await wait_for(lambda: time.time() % 60 < 52, timeout=15, what="a minute with time left")
    first = cli(base_env, folder, "--task", "fix it")
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.split()[1]
    at = time.strftime("%H:%M", time.gmtime(int(job_id[-4:-2]) * 3600 + int(job_id[-2:]) * 60))

    again = cli(base_env, folder, "--task", "fix it")
    assert again.returncode == 0, again.stderr
    assert again.stdout == (
        f"an identical run was queued at {at} as {job_id} (queued); nothing new was queued.\n"
        f"{follow_hint(job_id)}\n"
    )
    await redis.hset(keys.job(job_id), mapping={"state": "running"})
    third = cli(base_env, folder, "--task", "fix it", "--json")
    assert json.loads(third.stdout) == {
        "status": "duplicate", "jobId": job_id, "state": "running", "queuedAt": at,
    }
    assert await redis.xlen(keys.host_jobs(base_env["PI_WORKER_NAME"])) == 1

    other = cli(base_env, folder, "--task", "fix it", "--model", "another-model")
    assert other.stdout.startswith("queued ") and other.stdout.split()[1] != job_id
    assert await redis.xlen(keys.host_jobs(base_env["PI_WORKER_NAME"])) == 2


@pytest.mark.docker
@pytest.mark.skipif(not IS_ROOT, reason="handing the folder to uid 4242 needs root")
async def test_local_job_writes_into_the_folder_as_the_folders_owner_never_root(
    env: dict[str, str], docker, test_image: str, tmp_path: Path
) -> None:
    folder = make_repo(tmp_path / "app")
    settings = load_settings(env)
    ensure_jobs_dir(settings.jobs_dir)
    facts = await inspect_folder(str(folder))
    assert isinstance(facts, FolderFacts)
    task = "pd-test exit=0"
    job = Job(
        id=local_job_id(str(folder), flow=None, task=task, model=None, image=None, now_ms=now_ms()),
        kind="local", repo="local:app", folder=str(folder), task=task,
    )
    job_dir = await prepare_workspace(job, settings, sha=facts.sha)
    try:
        spec = build_spec(
            job, job_dir, settings, env={"PI_JOB_ID": container_name(job.id), "PI_OFFLINE": "1"},
            user=local_user(facts), workspace=str(folder), instance="t",
        )
        result = await run_container(docker, spec, timeout_s=60, abort=Abort())
        assert result.container_id is not None
        kept = await docker.containers.container(result.container_id).show()
        assert (kept["State"]["Status"], kept["State"]["ExitCode"]) == ("exited", 0)
    finally:
        await remove_workspace(job_dir, settings.jobs_dir)
        # Kept after its exit (the worker removes it once recorded): this test is the worker here.
        await remove_job_containers(docker, job.id, settings.worker_name, "t")
    assert result.exit_code == 0
    written = folder / "agent-was-here"
    assert written.read_text().strip() == "4242"
    assert (written.stat().st_uid, written.stat().st_gid) == (4242, 4242)


@pytest.mark.skipif(not IS_ROOT, reason="a root-owned folder of the test's own needs root")
@pytest.mark.parametrize(("job_user", "uid"), [(None, "1000:1000"), ("4242:4243", "4242:4243")])
def test_a_root_owned_folder_says_the_exact_chown_with_the_job_user(
    closed_redis_env: dict[str, str], tmp_path: Path, job_user: str | None, uid: str
) -> None:
    folder = make_repo(tmp_path / "my app")
    os.chown(folder, 0, 0)
    env = {**closed_redis_env, **({"PI_JOB_USER": job_user} if job_user else {})}
    done = cli(env, str(folder), "--task", "fix it")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert f"folder {folder} is owned by root" in line
    assert f"chown -R {uid} '{folder}'" in line and "PI_JOB_USER" in line


@pytest.mark.docker
@pytest.mark.skipif(not IS_ROOT, reason="handing the folder to uid 4242 needs root")
async def test_the_demo_agent_leaves_a_local_folder_clean_for_the_next_run(
    env: dict[str, str], docker, tmp_path: Path
) -> None:
    from pidispatch.dev.demoimage import DEMO_AGENT_SCRIPT, build_image

    image = "pd-test-demo-agent:latest"
    await build_image(image, DEMO_AGENT_SCRIPT)
    folder = make_repo(tmp_path / "app")
    settings = load_settings({**env, "PI_JOB_IMAGE": image})
    ensure_jobs_dir(settings.jobs_dir)
    facts = await inspect_folder(str(folder))
    assert isinstance(facts, FolderFacts)
    job = Job(id=local_job_id(str(folder), flow=None, task="demo", model=None, image=None, now_ms=now_ms()),
              kind="local", repo="local:app", folder=str(folder), task="demo")
    job_dir = await prepare_workspace(job, settings, sha=facts.sha)
    try:
        spec = build_spec(job, job_dir, settings, env={"PI_JOB_ID": container_name(job.id)},
                          user=local_user(facts), workspace=str(folder), instance="t")
        result = await run_container(docker, spec, timeout_s=60, abort=Abort())
        assert result.container_id is not None
        said = "".join(await docker.containers.container(result.container_id).log(stdout=True))
    finally:
        await remove_workspace(job_dir, settings.jobs_dir)
        await remove_job_containers(docker, job.id, settings.worker_name, "t")
    assert result.exit_code == 0
    assert "writable by this job's uid 4242" in said
    status = await asyncio.to_thread(
        subprocess.run, ["git", "-c", "safe.directory=*", "-C", str(folder), "status", "--porcelain"],
        capture_output=True, text=True, check=True,
    )
    assert status.stdout == ""  # the next `pi-dispatch run` on the folder is not refused as dirty
    again = cli({**env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}, str(folder), "--task", "again")
    assert "uncommitted" not in again.stderr
