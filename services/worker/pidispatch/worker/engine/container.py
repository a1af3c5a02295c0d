"""The container boundary: a runtime-neutral spec built first, translated to one runtime second.

``build_spec`` decides what a job gets (image, env, mounts, limits); ``to_docker_config`` turns that into
a Docker Engine API create body. The isolation flags live only in the translator and are not
configurable, so no job, trigger or image can weaken them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from pidispatch.common.configsyntax import image_ref_ok
from pidispatch.common.instance import LABEL_INSTANCE
from pidispatch.common.models import Job
from pidispatch.common.settings import Settings
from pidispatch.worker.engine.jobname import job_file_name

CONTAINER_PREFIX = "pi-job-"
LABEL_JOB = "pd.job"
LABEL_HOST = "pd.host"
PIDS_LIMIT = 512
SHM_CAP_BYTES = 1024**3
JOB_MOUNT = "/job"
WORKSPACE_MOUNT = "/workspace"
CONTAINER_HOME = "/home/pi"

_USER_RE = re.compile(r"^([0-9]+):([0-9]+)$")


class SpecRefused(ValueError):
    """The translator will not build a container from this spec; the message names the rule."""


class Mount(NamedTuple):
    source: str
    target: str
    read_only: bool


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """Everything one job's container is, independent of the runtime that will run it."""

    image: str
    name: str
    env: Mapping[str, str | None]
    mounts: tuple[Mount, ...]
    memory_bytes: int
    nano_cpus: int
    shm_size: int
    user: str
    labels: Mapping[str, str]
    # Docker's bridge, or with egress on the job's own internal network (its only other member: the proxy).
    network: str = "bridge"
    pids_limit: int = PIDS_LIMIT
    isolated: bool = True

    def __post_init__(self) -> None:
        # Read-only views: a frozen spec whose dicts could still be edited would not be frozen.
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))


def container_name(job_id: str) -> str:
    return CONTAINER_PREFIX + job_file_name(job_id)


def resolve_image(job: Job, settings: Settings) -> str:
    """The one image rule: the job's own image if the trigger set one, else ``PI_JOB_IMAGE``.

    Raises ``ValueError`` for a reference that could be read as a flag or smuggle control characters.
    """
    ref = job.image if job.image is not None else settings.job_image
    if not image_ref_ok(ref):
        raise ValueError("job image reference is refused")
    return ref


def build_spec(
    job: Job,
    job_dir: str,
    settings: Settings,
    *,
    env: Mapping[str, str | None],
    user: str | None = None,
    workspace: str | None = None,
    instance: str,
) -> ContainerSpec:
    """Pure: what this job's container is. Raises ``ValueError`` for a refused image reference and
    ``SpecRefused`` for a workspace that is not an absolute path.

    ``env`` is the job's closed allowlist, built by the caller (never the worker's environment).
    ``user`` defaults to ``PI_JOB_USER``; a local job passes its folder owner's ``uid:gid``.
    ``workspace`` defaults to the clone in ``<job_dir>/workspace``; a local job passes the operator's
    folder. ``instance``: this deployment's id (``common.instance``), a label every lookup filters on.
    Bind mounts here never ask for an SELinux relabel: relabelling the operator's folder would rewrite the
    labels of their own files.
    """
    workspace = os.path.join(job_dir, "workspace") if workspace is None else workspace
    if not os.path.isabs(workspace):
        raise SpecRefused("the workspace mount source must be an absolute path")
    return ContainerSpec(
        image=resolve_image(job, settings),
        name=container_name(job.id),
        env=env,
        mounts=(
            Mount(job_dir, JOB_MOUNT, True),
            Mount(workspace, WORKSPACE_MOUNT, False),
        ),
        memory_bytes=settings.job_memory_bytes,
        nano_cpus=settings.job_nano_cpus,
        shm_size=min(SHM_CAP_BYTES, settings.job_memory_bytes // 2),
        user=settings.job_user if user is None else user,
        labels={LABEL_JOB: job.id, LABEL_HOST: settings.worker_name, LABEL_INSTANCE: instance},
    )


def _check_user(user: str) -> None:
    m = _USER_RE.match(user)
    if not m:
        raise SpecRefused("container user must be <uid>:<gid> (numbers), not a name or a bare uid")
    if int(m.group(1)) == 0 or int(m.group(2)) == 0:
        raise SpecRefused("container user must not be root: uid and gid must both be non-zero")


def to_docker_config(spec: ContainerSpec) -> dict[str, Any]:
    """Pure: the Docker Engine API ``POST /containers/create`` body (the name travels as a query param).

    No ``Cmd``/``Entrypoint``: the image's own command runs, so a job cannot choose what executes.
    """
    if spec.isolated is not True:
        raise SpecRefused("spec is not marked isolated; refusing to translate it")
    _check_user(spec.user)
    env = [f"{k}={v}" for k, v in spec.env.items() if v is not None]
    return {
        "Image": spec.image,
        "User": spec.user,
        "Env": env,
        "Labels": dict(spec.labels),
        "Tty": False,
        "OpenStdin": False,
        "AttachStdin": False,
        "AttachStdout": True,
        "AttachStderr": True,
        "HostConfig": {
            # Kept after the exit: its exit code and output outlive a worker crash, and the worker
            # removes it only once the record of its end is written.
            "AutoRemove": False,
            "Init": True,
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges"],
            "PidsLimit": spec.pids_limit,
            "Memory": spec.memory_bytes,
            # Equal to Memory: no swap, so the memory limit is the real bound.
            "MemorySwap": spec.memory_bytes,
            "NanoCpus": spec.nano_cpus,
            "ShmSize": spec.shm_size,
            "Privileged": False,
            "NetworkMode": spec.network,
            "Mounts": [
                {"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only}
                for m in spec.mounts
            ],
        },
    }
