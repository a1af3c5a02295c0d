"""Image preflight: which images may run which jobs."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiodocker
import pytest
from aiohttp import web

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.common.outcome import InfraFault, JobRefusal
from pidispatch.common.settings import Settings, load_settings
from pidispatch.dev.demoimage import TEST_AGENT_SCRIPT, build_image
from pidispatch.worker.engine.preflight import (
    CAPABILITIES_LABEL,
    FORGES_LABEL,
    PI_VERSION_LABEL,
    ImageFacts,
    image_facts,
    image_refusal,
    inspect_image,
)
from pidispatch.worker.engine.runner import DockerUnavailable
from tests.support.payloads import load_fixture

ALL_CAPS = ("anyUid", "replicas", "commands", "excludeTools", "modelPolicy", "costCap")


def settings(**env: str) -> Settings:
    return load_settings(env)


def facts(*, forges: tuple[str, ...] | None = None, caps: tuple[str, ...] = ("anyUid",)) -> ImageFacts:
    return ImageFacts(image_id="sha256:x", pi_version=None, forges=forges, capabilities=caps)


def job(kind: str = "github", **overrides: object) -> Job:
    p = load_fixture("github/issues.labeled.json")
    built = Job(
        id="gh-1", kind=kind, repo=p["repository"]["full_name"], flow="triage",
        target=Target(type="issue", number=p["issue"]["number"]),
        trigger=Trigger(event="issues", action="labeled", sender=Sender(id=p["sender"]["id"]),
                        matched=Matched(index=0, type="label", label="bug")),
    )
    for key, value in overrides.items():
        setattr(built, key, value)
    return built


# ---- the pure decision ----------------------------------------------------------------------------


def test_a_missing_image_is_refused() -> None:
    assert image_refusal(None, job(), settings()) == JobRefusal("job-image-missing")


def test_forges_label_excludes_forges_it_does_not_list() -> None:
    two = facts(forges=("github", "gitlab"))
    assert image_refusal(two, job("azure"), settings()) == JobRefusal("job-image-forge-unsupported")
    assert image_refusal(two, job("github"), settings()) is None
    assert image_refusal(facts(), job("azure"), settings()) is None  # no label: every forge
    # A local job is never excluded by the forges label.
    local = Job(id="local-1", kind="local", repo="local:app", flow="fix", folder="/srv/app", task="t")
    assert image_refusal(facts(forges=("github",)), local, settings()) is None


def test_a_replica_job_needs_the_replicas_capability() -> None:
    assert image_refusal(facts(), job(replica=2), settings()) == JobRefusal("job-image-replicas-unsupported")
    assert image_refusal(facts(), job(), settings()) is None
    assert image_refusal(facts(caps=("anyUid", "replicas")), job(replica=2), settings()) is None


def test_capability_gates_refuse_replicas_commands_tools_models_then_cost_cap() -> None:
    everything = job(replica=1, command="review", exclude_tools=["bash"], models=["anthropic/claude-x"],
                     max_cost_usd="0")  # 0 is the tightest cap, not none
    expected = [
        "job-image-replicas-unsupported",
        "job-image-commands-unsupported",
        "job-image-exclude-tools-unsupported",
        "job-image-model-policy-unsupported",
        "job-image-cost-cap-unsupported",
    ]
    for i, reason in enumerate(expected):
        declared = ("anyUid", *ALL_CAPS[1 : 1 + i])
        assert image_refusal(facts(caps=declared), everything, settings()) == JobRefusal(reason)
    assert image_refusal(facts(caps=ALL_CAPS), everything, settings()) is None


def test_a_deployment_model_list_needs_model_policy_too() -> None:
    s = settings(PI_ALLOWED_MODELS="anthropic/claude-x")
    assert image_refusal(facts(), job(), s) == JobRefusal("job-image-model-policy-unsupported")
    assert image_refusal(facts(caps=("anyUid", "modelPolicy")), job(), s) is None


def test_an_image_that_does_not_run_as_any_uid_is_refused_last() -> None:
    assert image_refusal(facts(caps=()), job(), settings()) == JobRefusal("job-image-any-uid-unsupported")
    # A forge exclusion or a missing feature capability is the more specific reason.
    assert image_refusal(facts(forges=("gitlab",), caps=()), job(), settings()) == JobRefusal(
        "job-image-forge-unsupported"
    )
    assert image_refusal(facts(caps=()), job(command="x"), settings()) == JobRefusal(
        "job-image-commands-unsupported"
    )


def test_labels_are_comma_lists_with_spaces_trimmed_and_empty_means_absent() -> None:
    got = image_facts({
        "Id": "sha256:abc",
        "Config": {"Labels": {FORGES_LABEL: " github , gitlab ,", CAPABILITIES_LABEL: "anyUid,, replicas ",
                              PI_VERSION_LABEL: " 0.42.1 "}},
    })
    assert got == ImageFacts("sha256:abc", "0.42.1", ("github", "gitlab"), ("anyUid", "replicas"))
    # A malformed forges label must not refuse every job: it counts as no label.
    blank = image_facts({"Config": {"Labels": {FORGES_LABEL: " , ", PI_VERSION_LABEL: ""}}})
    assert (blank.forges, blank.capabilities, blank.pi_version, blank.image_id) == (None, (), None, "")
    assert image_facts({"Id": "sha256:abc", "Config": {"Labels": None}}).capabilities == ()


# ---- against a real daemon ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def labelled_image(test_image: str) -> Iterator[str]:
    tag = f"pd-test-labels-{uuid.uuid4().hex[:12]}:latest"
    labels = {
        FORGES_LABEL: "github, gitlab", CAPABILITIES_LABEL: "anyUid, replicas", PI_VERSION_LABEL: "0.42.1"
    }
    asyncio.run(build_image(tag, TEST_AGENT_SCRIPT, labels=labels))
    yield tag

    async def remove() -> None:
        async with aiodocker.Docker() as docker:
            with contextlib.suppress(aiodocker.DockerError):
                await docker.images.delete(tag, force=True)

    asyncio.run(remove())


@pytest.fixture
async def docker(require_docker: None) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker()
    yield client
    await client.close()


@pytest.mark.docker
async def test_inspect_reads_the_labels_of_a_real_image(
    docker: aiodocker.Docker, labelled_image: str
) -> None:
    got = await inspect_image(docker, labelled_image)
    assert got is not None
    assert got.image_id.startswith("sha256:")
    assert got.forges == ("github", "gitlab")
    assert (got.capabilities, got.pi_version) == (("anyUid", "replicas"), "0.42.1")
    assert image_refusal(got, job("azure"), settings()) == JobRefusal("job-image-forge-unsupported")
    assert image_refusal(got, job("gitlab", replica=2), settings()) is None
    assert image_refusal(got, job(command="review"), settings()) == JobRefusal(
        "job-image-commands-unsupported"
    )


@pytest.mark.docker
async def test_the_default_test_image_declares_any_uid_and_no_forges(
    docker: aiodocker.Docker, test_image: str
) -> None:
    got = await inspect_image(docker, test_image)
    assert got is not None
    assert (got.forges, got.capabilities) == (None, ("anyUid",))
    assert image_refusal(got, job("azure"), settings()) is None


@pytest.mark.docker
async def test_an_absent_image_is_missing_when_the_daemon_answers(docker: aiodocker.Docker) -> None:
    missing = f"pd-test-absent-{uuid.uuid4().hex[:12]}:latest"
    got = await inspect_image(docker, missing)
    assert got is None
    assert image_refusal(got, job(), settings()) == JobRefusal("job-image-missing")


async def test_no_daemon_at_all_is_unavailable_not_missing() -> None:
    with tempfile.TemporaryDirectory(prefix="pd") as d:
        docker = aiodocker.Docker(url=f"unix://{d}/docker.sock", api_version="v1.41")
        try:
            with pytest.raises(DockerUnavailable):
                await inspect_image(docker, "pi-job:latest")
        finally:
            await docker.close()


@contextlib.asynccontextmanager
async def fake_daemon(images_status: int, version_status: int) -> AsyncIterator[aiodocker.Docker]:
    """A daemon that answers the two calls the preflight makes with the given statuses."""

    async def images(request: web.Request) -> web.Response:
        return web.json_response({"message": "No such image"}, status=images_status)

    async def version(request: web.Request) -> web.Response:
        return web.json_response({"message": "restarting"}, status=version_status)

    app = web.Application()
    app.router.add_get("/{v}/images/{name:.+}/json", images)
    app.router.add_get("/{v}/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    with tempfile.TemporaryDirectory(prefix="pd") as d:
        sock = str(Path(d) / "docker.sock")
        await web.UnixSite(runner, sock).start()
        docker = aiodocker.Docker(url=f"unix://{sock}", api_version="v1.41")
        try:
            yield docker
        finally:
            await docker.close()
            await runner.cleanup()


async def test_a_404_is_confirmed_by_asking_the_daemon() -> None:
    async with fake_daemon(404, 200) as docker:
        assert await inspect_image(docker, "pi-job:latest") is None
    async with fake_daemon(404, 503) as docker:
        with pytest.raises(DockerUnavailable):
            await inspect_image(docker, "pi-job:latest")


async def test_another_refusal_is_a_retried_fault() -> None:
    async with fake_daemon(500, 200) as docker:
        with pytest.raises(InfraFault) as caught:
            await inspect_image(docker, "pi-job:latest")
    assert caught.value.reason == "image-preflight"
