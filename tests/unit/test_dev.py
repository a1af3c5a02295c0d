from __future__ import annotations

import hashlib
import hmac
import json
import shlex

from pidispatch.common.dev import DEMO_LABEL, SAMPLE_TRIGGERS, demo_delivery, signed_curl


def test_printed_curl_is_signed_over_exactly_the_bytes_it_sends() -> None:
    body = demo_delivery()
    argv = shlex.split(signed_curl("http://127.0.0.1:3000/github", "s3cret", body, "d-1"))
    sent = argv[argv.index("--data-binary") + 1].encode()
    headers = [argv[i + 1] for i, a in enumerate(argv) if a == "-H"]
    sig = next(h.split(": ", 1)[1] for h in headers if h.startswith("X-Hub-Signature-256"))
    assert sent == body
    assert sig == "sha256=" + hmac.new(b"s3cret", sent, hashlib.sha256).hexdigest()
    assert "X-GitHub-Delivery: d-1" in headers
    assert "X-GitHub-Event: issues" in headers


def test_demo_delivery_fires_the_sample_rule() -> None:
    payload = json.loads(demo_delivery())
    rule = SAMPLE_TRIGGERS["triggers"][0]
    assert payload["action"] == "labeled"
    assert DEMO_LABEL in rule["on"]["any"]
    assert {lab["name"] for lab in payload["issue"]["labels"]} >= {DEMO_LABEL}
    assert isinstance(payload["sender"]["id"], int)
