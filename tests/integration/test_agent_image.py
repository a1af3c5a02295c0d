"""The real pi agent in ``pi-job:latest``, run by a real worker against the stand-in model and a stand-in
GitHub: it edits the clone and the record carries its turns and tokens; a turn limit and a refused key end
as policy, not retried; the provider key and the forge token are only where they belong, and in none of the
output, the record or the job folder.

The image is built before the tests (``pi-dispatch job-image build``; ``.ci/run`` runs it, skipped by its
build hash when nothing changed). Without it the tests are skipped naming that command, unless
``PD_REQUIRE_AGENT_IMAGE=1`` (CI), which makes that a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiodocker
import msgspec
import pytest
from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.dev.modelstandin import (
    COMPLETION_TOKENS,
    PROMPT_TOKENS,
    STANDIN_KEY_VAR,
    STANDIN_MODEL,
    STANDIN_PROVIDER,
    WRITTEN_FILE,
    WRITTEN_TEXT,
    ModelStandIn,
    bridge_gateway,
)
from tests.support.forges import PAT
from tests.support.images import require_built
from tests.support.polling import wait_for
from tests.support.worker import enqueue, issue_job, record, running_worker

AGENT_IMAGE = "pi-job:latest"
REQUIRE = os.environ.get("PD_REQUIRE_AGENT_IMAGE") == "1"
KEY = "gsk-standin-0123456789abcdef"


@pytest.fixture(scope="session")
def agent_image(docker_available: bool) -> str:
    if not docker_available:
        pytest.fail("no Docker daemon") if REQUIRE else pytest.skip("no Docker daemon reachable")
    return require_built(AGENT_IMAGE, "job-image", required=REQUIRE,
                         flag="PD_REQUIRE_AGENT_IMAGE")


@pytest.fixture
async def model(docker: aiodocker.Docker) -> AsyncIterator[ModelStandIn]:
    gateway = await bridge_gateway(docker)
    assert gateway is not None, "Docker's bridge network names no gateway"
    server = ModelStandIn(KEY, host=gateway)
    await server.start()
    yield server
    await server.close()


def agent_env(env: dict[str, str], image: str, model: ModelStandIn, **extra: str) -> dict[str, str]:
    return {**env, "PI_JOB_IMAGE": image, "PI_JOB_MEMORY": "1g", "PI_PROVIDER": STANDIN_PROVIDER,
            "PI_MODEL": STANDIN_MODEL, STANDIN_KEY_VAR: KEY, "PI_MODEL_BASE_URL": model.base_url,
            "PI_CAPTURE_JOB_LOGS": "1", **extra}


def files_holding(root: Path, needle: bytes) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(str(path.relative_to(root)))
            except OSError:
                continue
    return found


async def test_a_label_job_runs_the_real_agent_which_edits_the_clone_and_keys_stay_where_they_belong(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, agent_image: str,
    model: ModelStandIn,
) -> None:
    require_built("pi-egress:latest", "egress-image", required=REQUIRE, flag="PD_REQUIRE_AGENT_IMAGE")
    model.hold_final = asyncio.Event()
    job = issue_job("exit=0", number=31)
    with capture_logs() as logs:
        worker_env = agent_env(env, agent_image, model)
        del worker_env["PI_EGRESS"]  # the default: on, so the model is reached through the proxy
        async with running_worker(worker_env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            await wait_for(lambda: len(model.seen) >= 2, 180, what="the agent's second model request")
            # Mid-run, before the final answer: the file the agent wrote, the container's environment.
            (written,) = Path(settings.jobs_dir).glob(f"*/workspace/{WRITTEN_FILE}")
            job_dir, text = written.parents[1], written.read_text()
            (container,) = await docker.containers.list(filters=json.dumps({"label": [f"pd.job={job.id}"]}))
            shown = await container.show()
            container_env = dict(v.split("=", 1) for v in shown["Config"]["Env"])
            in_folder = files_holding(job_dir, KEY.encode()) + files_holding(job_dir, PAT.encode())
            model.hold_final.set()
            rec = await record(settings, job)
    assert text == WRITTEN_TEXT
    assert (rec["outcome"], rec["exitCode"], rec["attempt"], rec["turns"]) == ("completed", 0, 1, 2)
    assert rec["tokens"]["total"] == 2 * (PROMPT_TOKENS + COMPLETION_TOKENS)
    assert [s.authorized for s in model.seen] == [True, True]
    # On its own network, with no route to the host: the model was reached through the egress proxy.
    assert shown["HostConfig"]["NetworkMode"].startswith("pd-net-")
    assert container_env["HTTPS_PROXY"].startswith("http://pd-egress-")
    # The key only in the provider's variable, the token only in the forge's (spec: the closed allowlist).
    assert {k for k, v in container_env.items() if KEY in v} == {STANDIN_KEY_VAR}
    assert {k for k, v in container_env.items() if PAT in v} <= {"GITHUB_TOKEN", "GH_TOKEN"}
    assert in_folder == []
    output = Path(settings.logs_dir, f"{job.id}.log").read_bytes()
    record_text = json.dumps(rec)
    for secret in (KEY, PAT):
        assert secret.encode() not in output and secret not in record_text
        assert not [e for e in logs if secret in json.dumps(e, default=str)]


async def test_a_conversation_longer_than_the_turn_limit_ends_as_policy_and_is_not_retried(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, agent_image: str,
    model: ModelStandIn,
) -> None:
    job = issue_job("exit=0", number=32)
    with capture_logs() as logs:
        async with running_worker(agent_env(env, agent_image, model, PI_MAX_TURNS="1"), redis, keys,
                                  docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            rec = await record(settings, job, timeout=180)
            await wait_for(lambda: [e for e in logs if e["event"] == "job_finished"], 30, what="the end")
    assert (rec["outcome"], rec["reason"], rec["exitCode"], rec["attempt"]) == (
        "policy", "runner-policy", 2, 1)
    assert not [e for e in logs if e["event"] == "job_retry_scheduled"]


async def test_a_provider_refusing_the_key_ends_as_provider_auth_refused(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, agent_image: str,
    model: ModelStandIn,
) -> None:
    job = issue_job("exit=0", number=33)
    wrong = agent_env(env, agent_image, model, **{STANDIN_KEY_VAR: "gsk-not-the-one"})
    async with running_worker(wrong, redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, job)
        rec = await record(settings, job, timeout=180)
    assert (rec["outcome"], rec["reason"], rec["exitCode"]) == ("policy", "provider-auth-refused", 2)
    assert model.seen and not any(s.authorized for s in model.seen)


async def test_a_rule_excluding_a_tool_runs_and_the_agent_never_offers_that_tool(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, agent_image: str,
    model: ModelStandIn,
) -> None:
    job = msgspec.structs.replace(issue_job("exit=0", number=34), exclude_tools=["bash"])
    async with running_worker(agent_env(env, agent_image, model), redis, keys, docker) as (settings, _, _):
        await enqueue(redis, keys, job)
        rec = await record(settings, job, timeout=180)
    assert (rec["outcome"], rec["turns"]) == ("completed", 2)  # the image declares excludeTools
    assert model.seen and all("write" in s.tools and "bash" not in s.tools for s in model.seen)
