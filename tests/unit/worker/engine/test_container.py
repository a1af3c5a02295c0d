"""The container boundary: every fixed isolation setting survives translation, and weak specs are refused."""

from __future__ import annotations

import dataclasses
import os

import pytest

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.common.settings import load_settings
from pidispatch.worker.engine.container import (
    ContainerSpec,
    SpecRefused,
    build_spec,
    resolve_image,
    to_docker_config,
)
from tests.support.payloads import load_fixture


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


# What the caller's environment module hands in; the spec takes it as given.
ENV = {"PI_JOB_ID": "pi-job-x", "PI_OFFLINE": "1"}


@pytest.fixture
def settings():
    return load_settings({"PI_WORKER_NAME": "hostA", "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "1.5"})


def spec_of(job: Job, job_dir: str, settings, **kwargs: object) -> ContainerSpec:
    kwargs.setdefault("instance", "i1")
    return build_spec(job, job_dir, settings, env=kwargs.pop("env", ENV), **kwargs)  # type: ignore[arg-type]


def test_build_spec_names_labels_mounts_and_limits(settings) -> None:
    spec = spec_of(issue_job(id="gh-a:b/c"), "/jobs/job-x", settings)
    assert spec.name == "pi-job-gh-a_3ab_2fc"  # the injective name: "gh-a_b_c" is another container
    assert spec.labels == {"pd.job": "gh-a:b/c", "pd.host": "hostA", "pd.instance": "i1"}
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
    small = spec_of(issue_job(), "/j", load_settings({"PI_JOB_MEMORY": "256m"}))
    big = spec_of(issue_job(), "/j", load_settings({"PI_JOB_MEMORY": "8g"}))
    assert small.shm_size == 128 * 1024**2
    assert big.shm_size == 1024**3


def test_translation_carries_every_fixed_isolation_setting(settings) -> None:
    config = to_docker_config(spec_of(issue_job(), "/jobs/job-x", settings))
    assert "Cmd" not in config and "Entrypoint" not in config
    assert config["User"] == "1000:1000"
    assert config["Image"] == "pi-job:latest"
    assert config["Labels"] == {"pd.job": issue_job().id, "pd.host": "hostA", "pd.instance": "i1"}
    host = config["HostConfig"]
    assert host["AutoRemove"] is False  # kept until its end is recorded, then removed by the worker
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


def test_env_is_exactly_the_callers_map_never_the_worker_environment(settings, monkeypatch) -> None:
    monkeypatch.setenv("PD_CANARY_SECRET", "must-not-leak")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_must_not_leak")
    env = to_docker_config(spec_of(issue_job(), "/j", settings))["Env"]
    assert sorted(env) == ["PI_JOB_ID=pi-job-x", "PI_OFFLINE=1"]
    assert not any("must-not-leak" in e or "CANARY" in e for e in env)
    assert os.environ["PD_CANARY_SECRET"] == "must-not-leak"


def test_env_omits_none_values(settings) -> None:
    spec = spec_of(issue_job(), "/j", settings, env={"PI_COMMAND": "review", "PI_FLOW": None})
    assert to_docker_config(spec)["Env"] == ["PI_COMMAND=review"]


def test_env_given_is_copied_so_later_edits_do_not_reach_the_spec(settings) -> None:
    env = {"PI_OFFLINE": "1"}
    spec = spec_of(issue_job(), "/j", settings, env=env)
    env["LD_PRELOAD"] = "/evil.so"
    assert dict(spec.env) == {"PI_OFFLINE": "1"}


def test_local_job_mounts_the_operators_folder_and_runs_as_its_owner(settings) -> None:
    job = Job(id="local-0123456789abcdef-202611301200", kind="local", repo="local:app",
              folder="/home/op/app", task="fix the tests")
    spec = spec_of(job, "/jobs/job-y", settings, user="4242:4243", workspace="/home/op/app")
    assert [tuple(m) for m in spec.mounts] == [
        ("/jobs/job-y", "/job", True),
        ("/home/op/app", "/workspace", False),
    ]
    config = to_docker_config(spec)
    assert config["User"] == "4242:4243"
    # A bind mount through the Mounts API carries no relabel option: the operator's labels stay theirs.
    assert all(set(m) == {"Type", "Source", "Target", "ReadOnly"} for m in config["HostConfig"]["Mounts"])


def test_user_defaults_to_pi_job_user_and_a_root_owner_is_still_refused(settings) -> None:
    assert spec_of(issue_job(), "/j", settings).user == settings.job_user
    with pytest.raises(SpecRefused):
        to_docker_config(spec_of(issue_job(), "/j", settings, user="0:4242"))


def test_relative_workspace_is_refused(settings) -> None:
    with pytest.raises(SpecRefused, match="absolute"):
        spec_of(issue_job(), "/j", settings, workspace="app")


def test_spec_not_marked_isolated_is_refused(settings) -> None:
    spec = dataclasses.replace(spec_of(issue_job(), "/j", settings), isolated=False)
    with pytest.raises(SpecRefused, match="isolated"):
        to_docker_config(spec)


@pytest.mark.parametrize("user", ["0:0", "0:1000", "1000:0", "1000", "pi", "pi:pi", "", "1000:1000:1"])
def test_root_or_malformed_user_is_refused(settings, user: str) -> None:
    spec = dataclasses.replace(spec_of(issue_job(), "/j", settings), user=user)
    with pytest.raises(SpecRefused):
        to_docker_config(spec)


def test_spec_is_frozen_including_its_env_and_labels(settings) -> None:
    spec: ContainerSpec = spec_of(issue_job(), "/j", settings)
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
