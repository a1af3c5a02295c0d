"""compose's demo profile shows a job end to end with no forge and no model account: ``docker-compose
--env-file deploy/demo.env --profile demo up`` alone brings up the stand-ins, posts the delivery, and the
job is recorded completed; the CLI answers inside a service container; nothing of the deployment is left
after the README's teardown.

With the real job image current for this tree the job is the real pi agent against the stand-in model
(two turns); without it, the test agent. Skipped without ``docker-compose`` unless ``PD_REQUIRE_DEPLOY=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from pidispatch.common.embedded import free_port
from pidispatch.dev.modelstandin import gateway_of
from pidispatch.dev.serviceimage import DEFAULT_TAG as SERVICE_IMAGE
from tests.support.images import require_built

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("PD_REQUIRE_DEPLOY") == "1"
JOB_IMAGE = "pi-job:latest"
T = TypeVar("T")

if shutil.which("docker-compose") is None or shutil.which("docker") is None:
    if REQUIRE:
        raise RuntimeError("PD_REQUIRE_DEPLOY=1 but docker-compose is not here")
    pytest.skip("no docker-compose here (apt-get install docker-compose)", allow_module_level=True)


def sh(*argv: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-3000:]}"
    return done.stdout


def wait_for(what: str, check: Callable[[], T | None], deadline_s: float) -> T:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {deadline_s:.0f} s waiting for {what}")


def _job_image() -> str | None:
    """The real agent when its image is current for this tree, else None (the test agent runs)."""
    argv = [sys.executable, "-m", "pidispatch.common.cli", "job-image", "build", "--check", "--tag",
            JOB_IMAGE]
    done = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    return JOB_IMAGE if done.returncode == 0 else None


def test_the_demo_profile_runs_one_job_end_to_end_and_the_readme_teardown_leaves_nothing(
    tmp_path: Path, test_image: str
) -> None:
    image = require_built(os.environ.get("PD_SERVICE_IMAGE", SERVICE_IMAGE), "service-image",
                          required=REQUIRE, flag="PD_REQUIRE_DEPLOY")
    real = _job_image()
    bridge = gateway_of(json.loads(sh("docker", "network", "inspect", "bridge"))[0])
    assert bridge is not None
    model = f"{bridge}:{free_port()}"
    project = f"pddemo{os.getpid()}"
    # The file's values, but for ports and folders this run must not share with another on the machine.
    env = {**os.environ, "PD_SERVICE_IMAGE": image, "PI_DATA_DIR": str(tmp_path / "data"),
           "RECEIVER_PUBLISH": f"127.0.0.1:{free_port()}", "PD_DEMO_MODEL_PUBLISH": model,
           "PI_MODEL_BASE_URL": f"http://{model}/v1", "PI_JOB_IMAGE": real or test_image,
           "WORKER_NAME_PREFIX": f"{project}-worker"}
    compose = ["docker-compose", "-p", project, "-f", str(ROOT / "compose.yaml"),
               "--env-file", str(ROOT / "deploy" / "demo.env")]
    instance = ""
    try:
        sh(*compose, "--profile", "demo", "up", "-d", env=env, timeout=600)
        logs = tmp_path / "data" / "logs"
        found = wait_for("a run record", lambda: sorted(logs.glob("gh-*.json")) if logs.is_dir() else None,
                         deadline_s=240)
        # Written by the first service to start; read once a job ran, it is surely there.
        instance = sh(*compose, "exec", "-T", "redis", "redis-cli", "GET", "pd:instance", env=env).strip()
        assert instance
        record = json.loads(found[0].read_text())
        assert (record["outcome"], record["target"].split("#")[0]) == ("completed", "demo/hello"), record
        if real:
            assert record["turns"] == 2 and record["tokens"]["total"] == 300, record
        delivered = sh(*compose, "logs", "--no-color", "demo-delivery", env=env)
        assert "labeled pi:demo): 202" in delivered
        runs = sh(*compose, "exec", "-T", "worker", "pi-dispatch", "runs", env=env)
        assert record["jobId"] in runs and "completed" in runs
    finally:
        sh(*compose, "--profile", "demo", "down", "-v", "-t", "5", env=env, timeout=300)
        if instance:
            label = f"label=pd.instance={instance}"
            left = sh("docker", "ps", "-aq", "--filter", label).split()
            if left:
                sh("docker", "rm", "-f", *left)
            nets = sh("docker", "network", "ls", "-q", "--filter", label).split()
            if nets:
                sh("docker", "network", "rm", *nets)
    assert not sh("docker", "ps", "-aq", "--filter", f"label=pd.instance={instance}").split()
