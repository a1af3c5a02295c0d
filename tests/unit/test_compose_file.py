"""compose.yaml passes only variables the services honour, and names each compose-only knob it reads."""

from __future__ import annotations

import re
from pathlib import Path

from pidispatch.common.unsupported import HONOURED

COMPOSE = Path(__file__).resolve().parents[2] / "compose.yaml"
# Read by compose itself (interpolation), never by a service; each is explained in compose.yaml's header
# or beside its use.
COMPOSE_ONLY = {"PD_SERVICE_IMAGE", "RECEIVER_PUBLISH", "PD_CONFIG_DIR", "PI_DATA_DIR", "WORKER_NAME_PREFIX"}


def _text() -> str:
    return COMPOSE.read_text()


def test_every_variable_a_service_is_given_is_honoured() -> None:
    given = set(re.findall(r"^\s+([A-Z][A-Z0-9_]*):", _text(), flags=re.M))
    assert given and not given - set(HONOURED), sorted(given - set(HONOURED))


def test_every_interpolated_name_is_honoured_or_compose_only() -> None:
    read = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", _text()))
    assert not read - set(HONOURED) - COMPOSE_ONLY, sorted(read - set(HONOURED) - COMPOSE_ONLY)
    assert read >= COMPOSE_ONLY  # a knob no longer used is dropped from this list, and from the docs


def test_every_service_has_a_healthcheck_and_a_restart_policy_that_halts_on_exit_2() -> None:
    text = _text()
    services = re.findall(r"^  ([a-z]+):\n", text.split("\nservices:\n", 1)[1].split("\nvolumes:\n")[0], re.M)
    assert set(services) == {"redis", "receiver", "front", "router", "worker"}
    assert text.count("healthcheck:") == len(services)
    assert text.count("<<: *service") == len(services)
    assert 'PD_HALT_ON_CONFIG_ERROR: "1"' in text and "restart: unless-stopped" in text
