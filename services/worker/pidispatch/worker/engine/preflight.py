"""Image preflight (ladder rows 5-6 in docs/worker.md): is the job's image here, and can it serve this job?

One ``inspect`` reads the image's labels; a pure function then decides. Nothing is cached: an operator
may build or remove an image mid-day, and this gate decides whether a budget slot is spent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from pidispatch.common.models import Job
from pidispatch.common.outcome import InfraFault, JobRefusal
from pidispatch.common.settings import Settings
from pidispatch.worker.engine.environment import effective_models
from pidispatch.worker.engine.runner import DockerUnavailable, is_unreachable

# The labels an image carries to say what it serves (the demo image and images/job set them).
FORGES_LABEL = "dev.pi-dispatch.forges"
CAPABILITIES_LABEL = "dev.pi-dispatch.capabilities"
PI_VERSION_LABEL = "dev.pi-dispatch.pi-version"

# A daemon that takes longer than this to describe one image is treated as not answering.
INSPECT_TIMEOUT_S = 30.0
# The containers always run with an explicit non-root user, which the image must accept.
ANY_UID = "anyUid"


@dataclass(frozen=True)
class ImageFacts:
    """What an image declares about itself. ``forges`` None = no exclusion; ``capabilities`` () = none."""

    image_id: str
    pi_version: str | None
    forges: tuple[str, ...] | None
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class CapabilityGate:
    token: str
    reason: str
    needed: Callable[[Job, Settings], bool]


# In this order: a job carrying several features is refused for the first one. Each
# exists because an image built before the feature silently ignores it and records a clean exit.
CAPABILITY_GATES: tuple[CapabilityGate, ...] = (
    CapabilityGate("replicas", "job-image-replicas-unsupported", lambda j, s: j.replica is not None),
    CapabilityGate("commands", "job-image-commands-unsupported", lambda j, s: bool(j.command)),
    CapabilityGate("excludeTools", "job-image-exclude-tools-unsupported", lambda j, s: bool(j.exclude_tools)),
    # The effective list: a deployment-wide PI_ALLOWED_MODELS is gated like a trigger's run.models.
    CapabilityGate(
        "modelPolicy", "job-image-model-policy-unsupported", lambda j, s: bool(effective_models(j, s))
    ),
    # Either source of a cap needs it: an image without the capability would run the job uncapped.
    CapabilityGate(
        "costCap", "job-image-cost-cap-unsupported",
        lambda j, s: j.max_cost_usd is not None or s.max_cost_micros is not None,
    ),
)


def _label(labels: Mapping[str, Any], name: str) -> str | None:
    value = labels.get(name)
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()


def _label_list(labels: Mapping[str, Any], name: str) -> tuple[str, ...] | None:
    """A comma list, spaces trimmed; a label that lists nothing usable counts as absent (a malformed
    ``forges`` label must not refuse every job)."""
    value = _label(labels, name)
    if value is None:
        return None
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    return items or None


def image_facts(info: Mapping[str, Any]) -> ImageFacts:
    """Pure: the facts in one ``GET /images/{ref}/json`` answer."""
    config = info.get("Config")
    labels = config.get("Labels") if isinstance(config, Mapping) else None
    if not isinstance(labels, Mapping):
        labels = {}
    image_id = info.get("Id")
    return ImageFacts(
        image_id=image_id if isinstance(image_id, str) else "",
        pi_version=_label(labels, PI_VERSION_LABEL),
        forges=_label_list(labels, FORGES_LABEL),
        capabilities=_label_list(labels, CAPABILITIES_LABEL) or (),
    )


async def _daemon_answers(docker: aiodocker.Docker) -> bool:
    try:
        await asyncio.wait_for(docker.version(), INSPECT_TIMEOUT_S)
    except Exception:
        return False
    return True


async def inspect_image(docker: aiodocker.Docker, ref: str) -> ImageFacts | None:
    """The image's facts, or None when the daemon answered that it does not have the image.

    A 404 alone is ambiguous (a proxy or a restarting daemon can answer one), so it is confirmed by
    asking the daemon for its version: no answer -> ``DockerUnavailable`` (the job is held, no attempt
    used). Any other refusal -> ``InfraFault("image-preflight")`` (retried).
    """
    try:
        info = await asyncio.wait_for(docker.images.inspect(ref), INSPECT_TIMEOUT_S)
    except DockerError as exc:
        if is_unreachable(exc):
            raise DockerUnavailable("image preflight: Docker daemon not answering") from None
        if exc.status == 404:
            if await _daemon_answers(docker):
                return None
            raise DockerUnavailable("image preflight: Docker daemon not answering") from None
        raise InfraFault("image-preflight") from None
    except (aiohttp.ClientError, TimeoutError, ConnectionError, OSError):
        raise DockerUnavailable("image preflight: Docker daemon not answering") from None
    if not isinstance(info, Mapping):
        raise InfraFault("image-preflight")
    return image_facts(info)


def image_refusal(facts: ImageFacts | None, job: Job, settings: Settings) -> JobRefusal | None:
    """Pure: the refusal this image earns this job, or None when it may run there.

    ``forges`` is an exclusion list (absent = every forge); ``capabilities`` is an inclusion list
    (absent = nothing claimed), consulted only for features the job actually carries.
    """
    if facts is None:
        return JobRefusal("job-image-missing")
    if not job.is_local and facts.forges is not None and job.kind not in facts.forges:
        return JobRefusal("job-image-forge-unsupported")
    for gate in CAPABILITY_GATES:
        if gate.needed(job, settings) and gate.token not in facts.capabilities:
            return JobRefusal(gate.reason)
    if ANY_UID not in facts.capabilities:
        return JobRefusal("job-image-any-uid-unsupported")
    return None
