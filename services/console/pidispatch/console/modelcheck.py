"""doctor's ``model`` check: does a job container reach the model its pi would talk to?

The URL is ``PI_MODEL_BASE_URL``, else the provider's public endpoint; a throw-away container of the job
image fetches it from Docker's bridge (``worker.engine.modelprobe``), as ``pi-dispatch dev`` proves its
stand-in model's address. Beside a running dev, ``dev.json`` has already given this process dev's job
image and stand-in model, so the check judges the path dev's jobs take.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pidispatch.common import devstate
from pidispatch.common.envnames import PROVIDER_KEY_VARS
from pidispatch.common.instance import LABEL_INSTANCE
from pidispatch.common.keys import Keys
from pidispatch.common.models import text
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.settings import Settings
from pidispatch.console import diagnosis as dx
from pidispatch.worker.egress.rules import PROVIDER_HOSTS
from pidispatch.worker.engine.container import LABEL_HOST
from pidispatch.worker.engine.modelprobe import fetch_from_job_image
from pidispatch.worker.engine.preflight import ImageFacts

# A probe starts a container and node in it: more than one API call, so it gets at least this long.
PROBE_FLOOR_S = 10.0


@dataclass(frozen=True)
class ModelFacts:
    """What the check needs beyond the settings: the environment (the provider's key), this deployment's
    id (the probe container's label), the dev running here, and whether the agent variables (PI_PROVIDER
    and the rest) were refused."""

    env: Mapping[str, str]
    instance: str | None
    dev: devstate.DevState | None
    refused: bool


async def read_instance(redis: Redis | None, keys: Keys, timeout_s: float) -> str | None:
    """This deployment's id, read (never made: the doctor only looks), for the probe container's label."""
    if redis is None:
        return None
    with contextlib.suppress(Exception):
        found = await bounded(redis.get(keys.instance), timeout_s)
        return text(found) if found is not None else None
    return None


def running_dev(cwd: Path) -> devstate.DevState | None:
    """The dev running in ``cwd`` (its ``.pi-dispatch/dev.json``, its pid alive), if any."""
    found = devstate.read_state(cwd / devstate.STATE_DIR / devstate.STATE_FILE)
    return found if found is not None and devstate.pid_alive(found.pid) else None


def model_url(settings: Settings) -> str | None:
    """Pure: where the job's pi sends its requests (None: no endpoint known for the provider)."""
    if settings.model_base_url:
        return settings.model_base_url
    hosts = PROVIDER_HOSTS.get(settings.provider, ())
    return f"https://{hosts[0]}" if hosts else None


async def model_row(
    docker: Any, settings: Settings, facts: ImageFacts | None, model: ModelFacts, timeout_s: float
) -> dx.Check:
    """The ``model`` check; skipped when the job image is missing or the agent variables are refused."""
    if facts is None:
        return dx.skipped("model", f"{settings.job_image} is missing", "fix the job-image check first")
    if model.refused:
        return dx.skipped("model", "PI_PROVIDER or another agent variable is refused",
                          "fix the config check first")
    return await _probed(docker, settings, model.env, facts, model.instance, model.dev, timeout_s)


async def _probed(
    docker: Any, settings: Settings, env: Mapping[str, str], facts: ImageFacts, instance: str | None,
    dev: devstate.DevState | None, timeout_s: float,
) -> dx.Check:
    url = model_url(settings)
    key_vars = PROVIDER_KEY_VARS.get(settings.provider, ())
    path = dx.ModelPath(
        image=settings.job_image, has_pi=facts.pi_version is not None, provider=settings.provider, url=url,
        key_vars=key_vars, key_set=any(env.get(v) for v in key_vars),
        dev_standin=dev is not None and url is not None and dev.env.get("PI_MODEL_BASE_URL") == url,
    )
    if not path.has_pi or url is None:
        return dx.model_check(path)
    labels = {LABEL_HOST: settings.worker_name, **({LABEL_INSTANCE: instance} if instance else {})}
    probe = await fetch_from_job_image(docker, settings.job_image, url, labels, max(timeout_s, PROBE_FLOOR_S))
    return dx.model_check(replace(path, status=probe.status, error=probe.error))
