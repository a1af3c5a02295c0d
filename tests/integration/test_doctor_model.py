"""``pi-dispatch doctor``'s model check, end to end: a container of the real job image (pi-job:latest) on
Docker's bridge reaches the configured model (the stand-in here) or the check fails naming the fix; in a
running dev's folder the doctor says it runs beside dev and judges the job image and model dev uses."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiodocker
import pytest

from pidispatch.common import devstate
from pidispatch.common.embedded import free_port
from pidispatch.dev.modelpath import bridge_interface, interface_address
from pidispatch.dev.modelstandin import STANDIN_KEY_VAR, STANDIN_PROVIDER, ModelStandIn, gateway_of
from tests.support.images import require_built

AGENT_IMAGE = "pi-job:latest"
REQUIRE = os.environ.get("PD_REQUIRE_AGENT_IMAGE") == "1"
BOUND_S = 40.0


@pytest.fixture(scope="module")
def agent_image(docker_available: bool) -> str:
    if not docker_available:
        pytest.fail("no Docker daemon") if REQUIRE else pytest.skip("no Docker daemon reachable")
    return require_built(AGENT_IMAGE, "job-image", required=REQUIRE, flag="PD_REQUIRE_AGENT_IMAGE")


@pytest.fixture
async def host_address() -> str:
    """This host's address on Docker's bridge, as dev finds it (the daemon may not report a gateway)."""
    docker = aiodocker.Docker()
    try:
        info = await (await docker.networks.get("bridge")).show()
    finally:
        await docker.close()
    found = interface_address(bridge_interface(info)) or gateway_of(info)
    assert found is not None
    return found


@pytest.fixture
async def standin(host_address: str) -> AsyncIterator[ModelStandIn]:
    model = ModelStandIn("k-" + os.urandom(8).hex(), host=host_address)
    await model.start()
    yield model
    await model.close()


async def doctor(env: dict[str, str], cwd: Path) -> dict[str, dict[str, Any]]:
    full = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root"),
            "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", **env}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pidispatch.common.cli", "doctor", "--json", "--timeout", "2", env=full,
        cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), BOUND_S)
    return {c["name"]: c for c in json.loads(out)["checks"]}


def model_env(image: str, url: str) -> dict[str, str]:
    return {"PI_JOB_IMAGE": image, "PI_PROVIDER": STANDIN_PROVIDER, STANDIN_KEY_VAR: "k",
            "PI_MODEL_BASE_URL": url}


async def test_a_job_image_container_that_reaches_the_model_is_ok(
    agent_image: str, standin: ModelStandIn, tmp_path: Path
) -> None:
    checks = await doctor(model_env(agent_image, standin.base_url), tmp_path)
    assert checks["model"]["status"] == "ok", checks["model"]
    assert f"a {agent_image} container reaches {standin.base_url} (HTTP" in checks["model"]["finding"]
    assert "dev" not in checks


async def test_an_unreachable_model_fails_naming_the_fix(
    agent_image: str, host_address: str, tmp_path: Path
) -> None:
    url = f"http://{host_address}:{free_port()}/v1"  # nothing listens there
    checks = await doctor(model_env(agent_image, url), tmp_path)
    model = checks["model"]
    assert model["status"] == "fail" and url in model["finding"] and "ECONNREFUSED" in model["finding"]
    assert "PI_MODEL_BASE_URL" in model["fix"]
    loopback = await doctor(model_env(agent_image, f"http://127.0.0.1:{free_port()}/v1"), tmp_path)
    assert loopback["model"]["status"] == "fail" and "loopback" in loopback["model"]["fix"]


def _beside_dev(folder: Path, env: dict[str, str]) -> None:
    """A dev.json as a running dev writes it (its pid: this test's, alive)."""
    state = folder / devstate.STATE_DIR
    state.mkdir()
    devstate.write_state(state, env, os.getpid(), own=set(env))


async def test_beside_dev_it_judges_the_image_dev_runs(demo_image: str, tmp_path: Path) -> None:
    _beside_dev(tmp_path, {"PI_JOB_IMAGE": demo_image})
    checks = await doctor({}, tmp_path)
    assert checks["dev"]["status"] == "ok" and f"pid {os.getpid()}" in checks["dev"]["finding"]
    assert checks["job-image"]["status"] == "ok" and demo_image in checks["job-image"]["finding"]
    assert checks["model"]["status"] == "ok" and "no pi agent" in checks["model"]["finding"]


async def test_beside_dev_a_stand_in_that_does_not_answer_fails_naming_dev(
    agent_image: str, host_address: str, tmp_path: Path
) -> None:
    _beside_dev(tmp_path, model_env(agent_image, f"http://{host_address}:{free_port()}/v1"))
    checks = await doctor({}, tmp_path)
    assert checks["model"]["status"] == "fail" and "dev's stand-in model" in checks["model"]["fix"]
