"""``{replica}`` in PI_WORKER_NAME: finding this worker's container, naming it from its compose label, and
refusing a template at load that no replica could turn into a valid name."""

from __future__ import annotations

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import load_settings
from pidispatch.worker.replica import NOT_A_REPLICA, own_container_id, replica_name

CID = "d0806e58c96575aaea390254fee502ddb44e7aa2a7cfce0a60d9fd9bfea2c4af"
LAYER = "c56b19ae466edecab6b98073ec08da31ec0d1abceb7075fda407a82464f557dc"

# Taken from a container on Docker 20+ (vfs driver, cgroup v1): the layer id comes first and must lose.
MOUNTINFO_VFS = f"""\
67 44 254:0 /var/lib/docker/vfs/dir/{LAYER} / rw,relatime master:1 - ext4 /dev/vda rw,discard
68 67 0:40 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
73 72 0:29 /docker/{CID} /sys/fs/cgroup/cpu ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu
84 67 254:0 /var/lib/docker/containers/{CID}/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/vda rw
85 67 254:0 /var/lib/docker/containers/{CID}/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw
86 67 254:0 /var/lib/docker/containers/{CID}/hosts /etc/hosts rw,relatime - ext4 /dev/vda rw
"""

# overlay2 and cgroup v2 (no id in the cgroup lines), data-root on its own filesystem (root is relative).
MOUNTINFO_OVERLAY = f"""\
1203 1180 0:340 / / rw,relatime master:437 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/Q3,\
upperdir=/var/lib/docker/overlay2/{LAYER}/diff,workdir=/var/lib/docker/overlay2/{LAYER}/work
1210 1203 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate
1224 1203 8:17 /containers/{CID}/hostname /etc/hostname rw,relatime - ext4 /dev/sdb1 rw
"""

# The host itself: Docker's per-container shm mounts name container ids, but this process is in none.
MOUNTINFO_HOST = f"""\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
300 22 0:52 / /var/lib/docker/containers/{CID}/mounts/shm rw,nosuid,nodev,noexec - tmpfs shm rw
"""

# Labels as docker-compose v1 (1.29) and v2 (2.x) set them on a service container.
LABELS_V1 = {
    "com.docker.compose.config-hash": "9f1b",
    "com.docker.compose.container-number": "2",
    "com.docker.compose.oneoff": "False",
    "com.docker.compose.project": "pd",
    "com.docker.compose.service": "worker",
    "com.docker.compose.version": "1.29.2",
}
LABELS_V2 = {
    "com.docker.compose.config-hash": "4be0",
    "com.docker.compose.container-number": "3",
    "com.docker.compose.depends_on": "redis:service_started:false",
    "com.docker.compose.image": "sha256:0d3c",
    "com.docker.compose.oneoff": "False",
    "com.docker.compose.project": "pd",
    "com.docker.compose.project.working_dir": "/srv/pd",
    "com.docker.compose.service": "worker",
    "com.docker.compose.version": "2.24.6",
}


@pytest.mark.parametrize("mountinfo", [MOUNTINFO_VFS, MOUNTINFO_OVERLAY])
def test_the_container_id_comes_from_the_files_docker_mounts_in(mountinfo: str) -> None:
    # A hostname set in compose (not hex) must not matter when the mounts name the container.
    assert own_container_id(mountinfo, "worker-box") == CID


def test_without_those_mounts_a_hex_hostname_is_the_id_and_anything_else_is_none() -> None:
    assert own_container_id(MOUNTINFO_HOST, CID[:12]) == CID[:12]
    assert own_container_id("", CID) == CID
    assert own_container_id(MOUNTINFO_HOST, "vm") is None
    assert own_container_id("", CID[:11]) is None
    assert own_container_id("", CID[:12].upper()) is None


@pytest.mark.parametrize(("labels", "name"), [(LABELS_V1, "edge1-worker-2"), (LABELS_V2, "edge1-worker-3")])
def test_the_compose_number_label_fills_the_placeholder(labels: dict[str, str], name: str) -> None:
    assert replica_name("edge1-worker-{replica}", labels) == name


@pytest.mark.parametrize(
    "labels",
    [
        {},
        {"com.docker.compose.service": "worker"},
        {"com.docker.compose.container-number": ""},
        {"com.docker.compose.container-number": "0"},
        {"com.docker.compose.container-number": "-1"},
        {"com.docker.compose.container-number": "01"},
        {"com.docker.compose.container-number": "two"},
    ],
)
def test_no_positive_number_label_is_not_a_replica(labels: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        replica_name("worker-{replica}", labels)
    assert str(info.value) == NOT_A_REPLICA
    assert str(info.value).startswith("PI_WORKER_NAME uses {replica} but this worker is not a compose")


def test_a_one_off_container_would_share_replica_ones_name_and_is_refused() -> None:
    with pytest.raises(ConfigError, match="one-off"):
        replica_name("worker-{replica}", {**LABELS_V2, "com.docker.compose.oneoff": "True"})


def test_a_number_that_pushes_the_name_past_64_characters_is_refused() -> None:
    template = "w" * 63 + "{replica}"
    assert replica_name(template, {"com.docker.compose.container-number": "9"}) == "w" * 63 + "9"
    with pytest.raises(ConfigError, match=r"^PI_WORKER_NAME="):
        replica_name(template, {"com.docker.compose.container-number": "10"})


@pytest.mark.parametrize("template", ["worker-{replica}", "{replica}", "edge1-worker-{replica}.b"])
def test_a_template_loads_as_declared_and_unresolved(template: str) -> None:
    s = load_settings({"PI_WORKER_NAME": template})
    assert (s.worker_name, s.worker_name_declared) == (template, True)


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("worker-{replica}-{replica}", "at most once"),
        ("worker-{n}", "no other"),
        ("worker-{Replica}", "no other"),
        ("worker-{replica", "no other"),
        ("-{replica}", "starting with a letter"),
        ("{replica}.log", "not ending in .json or .log"),
        ("w" * 64 + "{replica}", "1-64"),
    ],
)
def test_a_template_no_replica_could_use_is_refused_at_load(template: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"PI_WORKER_NAME": template})
    message = str(info.value)
    assert message.startswith(f"PI_WORKER_NAME={template!r} is refused; accepted: ")
    assert why in message and "{replica}" in message
    assert "\n" not in message
