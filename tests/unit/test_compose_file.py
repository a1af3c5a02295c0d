"""compose.yaml passes only variables the services honour, and names each compose-only knob it reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pidispatch.common.unsupported import HONOURED
from pidispatch.dev.stack import SAMPLE_TRIGGERS

COMPOSE = Path(__file__).resolve().parents[2] / "compose.yaml"
# Read by compose itself (interpolation), never by a service; each is explained in compose.yaml's header
# or beside its use.
COMPOSE_ONLY = {"PD_SERVICE_IMAGE", "RECEIVER_PUBLISH", "PD_CONFIG_DIR", "PI_DATA_DIR", "WORKER_NAME_PREFIX",
                "PD_DEMO_MODEL_PUBLISH"}
# The services `docker-compose up` starts, and those each profile adds.
BASE = {"redis", "receiver", "front", "router", "worker"}
PROFILES = {"ha": {"redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"},
            "demo": {"forge", "model", "demo-delivery"}}
DEMO_ENV = COMPOSE.parent / "deploy" / "demo.env"


def _text() -> str:
    return COMPOSE.read_text()


def test_every_variable_a_service_is_given_is_honoured() -> None:
    given = set(re.findall(r"^\s+([A-Z][A-Z0-9_]*):", _text(), flags=re.M))
    assert given and not given - set(HONOURED), sorted(given - set(HONOURED))


def test_every_interpolated_name_is_honoured_or_compose_only() -> None:
    read = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", _text()))
    assert not read - set(HONOURED) - COMPOSE_ONLY, sorted(read - set(HONOURED) - COMPOSE_ONLY)
    assert read >= COMPOSE_ONLY  # a knob no longer used is dropped from this list, and from the docs


def _services(text: str) -> dict[str, str]:
    """Each service's block by name; a ``name: *anchor`` line gets its anchor's block."""
    body = text.split("\nservices:\n", 1)[1].split("\nvolumes:\n", maxsplit=1)[0]
    blocks: dict[str, str] = {}
    anchors: dict[str, str] = {}
    name = ""
    for line in body.splitlines():
        head = re.match(r"^  ([a-z][a-z0-9-]*):(?: &(\w+)| \*(\w+))?$", line)
        if head:
            name, anchor, alias = head.groups()
            blocks[name] = anchors[alias] if alias else ""
            if anchor:
                anchors[anchor] = name
        elif name and line.startswith("    "):
            blocks[name] += line + "\n"
    return {n: blocks.get(b, b) for n, b in blocks.items()}


def test_every_service_has_a_healthcheck_and_a_restart_policy_that_halts_on_exit_2() -> None:
    text = _text()
    services = _services(text)
    assert set(services) == BASE.union(*PROFILES.values())
    for name, block in services.items():
        assert "<<: *service" in block, name
        # A one-shot (restart "no") has nothing to be healthy about once it has done its one thing.
        assert "healthcheck:" in block or 'restart: "no"' in block, name
        profile = re.search(r'profiles: \["(\w+)"\]', block)
        assert (profile.group(1) if profile else None) == next(
            (p for p, members in PROFILES.items() if name in members), None), name
    assert 'PD_HALT_ON_CONFIG_ERROR: "1"' in text and "restart: unless-stopped" in text


def test_the_demo_env_file_sets_only_what_compose_reads_and_its_rule_file_exists() -> None:
    values = dict(line.split("=", 1) for line in DEMO_ENV.read_text().splitlines()
                  if line and not line.startswith("#"))
    read = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", _text()))
    assert set(values) <= read, sorted(set(values) - read)
    rules = COMPOSE.parent / values["PD_CONFIG_DIR"] / "triggers.json"
    assert json.loads(rules.read_text()) == SAMPLE_TRIGGERS  # dev's pi:demo rule, which the delivery fires
    # The model's published address and the URL jobs are given name one place.
    assert values["PI_MODEL_BASE_URL"] == f"http://{values['PD_DEMO_MODEL_PUBLISH']}/v1"
