from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import shlex
from pathlib import Path

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.dev.forgestandin import demo_delivery
from pidispatch.dev.stack import DEMO_LABEL, SAMPLE_TRIGGERS, demo_curl


def test_demo_delivery_fires_the_sample_rule() -> None:
    payload = json.loads(demo_delivery())
    rule = SAMPLE_TRIGGERS["triggers"][0]
    assert payload["action"] == "labeled"
    assert DEMO_LABEL in rule["on"]["any"]
    assert {lab["name"] for lab in payload["issue"]["labels"]} >= {DEMO_LABEL}
    assert isinstance(payload["sender"]["id"], int)



def test_demo_curl_signs_with_the_dev_secret_and_a_fresh_issue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    monkeypatch.setenv("RECEIVER_PORT", "3999")
    (tmp_path / "webhook-secret").write_text("persisted\n")
    demo_curl(argparse.Namespace(dir=str(tmp_path)))
    demo_curl(argparse.Namespace(dir=str(tmp_path)))
    deliveries, numbers = set(), []
    for line in capsys.readouterr().out.splitlines():
        argv = shlex.split(line)
        assert "http://127.0.0.1:3999/github" in argv
        body = argv[argv.index("--data-binary") + 1].encode()
        headers = [argv[i + 1] for i, a in enumerate(argv) if a == "-H"]
        sig = next(h.split(": ", 1)[1] for h in headers if h.startswith("X-Hub-Signature-256"))
        assert sig == "sha256=" + hmac.new(b"persisted", body, hashlib.sha256).hexdigest()
        deliveries.add(next(h for h in headers if h.startswith("X-GitHub-Delivery")))
        numbers.append(json.loads(body)["issue"]["number"])
    assert len(deliveries) == 2
    assert 1 not in numbers


def test_demo_curl_without_a_secret_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    with pytest.raises(ConfigError, match="WEBHOOK_SECRET"):
        demo_curl(argparse.Namespace(dir=str(tmp_path)))


class _Images:
    def __init__(self, labels: dict[str, str] | None) -> None:
        self.labels = labels

    async def inspect(self, ref: str) -> dict[str, object]:
        from aiodocker.exceptions import DockerError

        if self.labels is None:
            raise DockerError(404, {"message": f"No such image: {ref}"})
        return {"Config": {"Labels": self.labels}}


class _Docker:
    def __init__(self, labels: dict[str, str] | None) -> None:
        self.images = _Images(labels)


async def test_a_demo_image_without_the_any_uid_capability_is_rebuilt() -> None:
    from pidispatch.dev.imagechoice import DEMO_CAPABILITIES_LABEL
    from pidispatch.dev.imagechoice import demo_image_current as _demo_image_current

    assert await _demo_image_current(_Docker({DEMO_CAPABILITIES_LABEL: "replicas, anyUid"}))
    assert not await _demo_image_current(_Docker({}))  # built by an older version: every job refused
    assert not await _demo_image_current(_Docker({DEMO_CAPABILITIES_LABEL: "anyUidX"}))
    assert not await _demo_image_current(_Docker(None))
