"""The container boundary: every fixed isolation setting survives translation, and weak specs are refused."""

from __future__ import annotations

import dataclasses
import os

import pytest

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.common.settings import load_settings
from pidispatch.worker.container import (
    ContainerSpec,
    SpecRefused,
    build_spec,
    resolve_image,
    to_docker_config,
)
from tests.helpers import load_fixture


def issue_job(**overrides: object) -> Job:
    payload = load_fixture("github/issues.labeled.json")
    fields: dict[str, object] = {
        "id": "gh-72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "kind": "github",
        "repo": payload["repository"]["full_name"],
        "target": Target(type="issue", number=payload["issue"]["number"], title=payload["issue"]["title"],
                         body=payload["issue"]["body"]),
        "flow": "triage",
        "trigger": Trigger(event="issues", action="labeled", delivery_id="72d3162e",
                           sender=Sender(id=payload["sender"]["id"]), matched=Matched(index=0, type="label")),
    }
    fields.update(overrides)
    return Job(**fields)  # type: ignore[arg-type]


@pytest.fixture
def settings():
    return load_settings({"PI_WORKER_NAME": "hostA", "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "1.5"})


def test_build_spec_names_labels_mounts_and_limits(settings) -> None:
    spec = build_spec(issue_job(id="gh-a:b/c"), "/jobs/job-x", settings)
    assert spec.name == "pi-job-gh-a_b_c"
    assert spec.labels == {"pd.job": "gh-a:b/c", "pd.host": "hostA"}
    assert [tuple(m) for m in spec.mounts] == [
        ("/jobs/job-x", "/job", True),
        ("/jobs/job-x/workspace", "/workspace", False),
    ]
    assert spec.memory_bytes == 256 * 1024**2
    assert spec.nano_cpus == 1_500_000_000
    assert spec.pids_limit == 512
    assert spec.user == "1000:1000"
    assert spec.isolated is True


def test_shm_is_half_the_memory_capped_at_one_gib() -> None:
    small = build_spec(issue_job(), "/j", load_settings({"PI_JOB_MEMORY": "256m"}))
    big = build_spec(issue_job(), "/j", load_settings({"PI_JOB_MEMORY": "8g"}))
    assert small.shm_size == 128 * 1024**2
    assert big.shm_size == 1024**3


def test_translation_carries_every_fixed_isolation_setting(settings) -> None:
    config = to_docker_config(build_spec(issue_job(), "/jobs/job-x", settings))
    assert "Cmd" not in config and "Entrypoint" not in config
    assert config["User"] == "1000:1000"
    assert config["Image"] == "pi-job:latest"
    assert config["Labels"] == {"pd.job": issue_job().id, "pd.host": "hostA"}
    host = config["HostConfig"]
    assert host["AutoRemove"] is True
    assert host["Init"] is True
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidsLimit"] == 512
    assert host["Memory"] == host["MemorySwap"] == 256 * 1024**2
    assert host["NanoCpus"] == 1_500_000_000
    assert host["ShmSize"] == 128 * 1024**2
    assert host["Privileged"] is False
    assert host["NetworkMode"] == "bridge"
    assert host["Mounts"] == [
        {"Type": "bind", "Source": "/jobs/job-x", "Target": "/job", "ReadOnly": True},
        {"Type": "bind", "Source": "/jobs/job-x/workspace", "Target": "/workspace", "ReadOnly": False},
    ]


def test_env_is_the_allowlist_only_never_the_worker_environment(settings, monkeypatch) -> None:
    monkeypatch.setenv("PD_CANARY_SECRET", "must-not-leak")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_must_not_leak")
    env = to_docker_config(build_spec(issue_job(), "/j", settings))["Env"]
    assert sorted(env) == sorted([
        f"PI_JOB_ID=pi-job-{issue_job().id}",
        "PI_FLOW=triage",
        "PI_OFFLINE=1",
        "HOME=/home/pi",
    ])
    assert not any("must-not-leak" in e or "CANARY" in e for e in env)
    assert os.environ["PD_CANARY_SECRET"] == "must-not-leak"


def test_env_omits_none_values_and_command_excludes_flow(settings) -> None:
    env = to_docker_config(build_spec(issue_job(flow="triage", command="review"), "/j", settings))["Env"]
    assert "PI_COMMAND=review" in env
    assert not any(e.startswith("PI_FLOW") for e in env)
    env = to_docker_config(build_spec(issue_job(flow=None), "/j", settings))["Env"]
    assert not any(e.startswith(("PI_FLOW", "PI_COMMAND")) for e in env)


def test_spec_not_marked_isolated_is_refused(settings) -> None:
    spec = dataclasses.replace(build_spec(issue_job(), "/j", settings), isolated=False)
    with pytest.raises(SpecRefused, match="isolated"):
        to_docker_config(spec)


@pytest.mark.parametrize("user", ["0:0", "0:1000", "1000:0", "1000", "pi", "pi:pi", "", "1000:1000:1"])
def test_root_or_malformed_user_is_refused(settings, user: str) -> None:
    spec = dataclasses.replace(build_spec(issue_job(), "/j", settings), user=user)
    with pytest.raises(SpecRefused):
        to_docker_config(spec)


def test_spec_is_frozen_including_its_env_and_labels(settings) -> None:
    spec: ContainerSpec = build_spec(issue_job(), "/j", settings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.user = "0:0"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.env["LD_PRELOAD"] = "/evil.so"  # type: ignore[index]
    with pytest.raises(TypeError):
        spec.labels["pd.host"] = "other"  # type: ignore[index]


def test_job_image_overrides_the_default_and_bad_refs_are_refused(settings) -> None:
    assert resolve_image(issue_job(), settings) == "pi-job:latest"
    assert resolve_image(issue_job(image="ghcr.io/acme/agent:2"), settings) == "ghcr.io/acme/agent:2"
    for bad in ["--privileged", "img name", "img\x00", " img", ""]:
        with pytest.raises(ValueError):
            resolve_image(issue_job(image=bad), settings)
