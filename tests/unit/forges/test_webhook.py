"""pidispatch.forges.webhook: the GitHub-style preamble and answers GitHub and Forgejo/Gitea share."""

from __future__ import annotations

import pytest

from pidispatch.forges import refusals, verify
from pidispatch.forges.webhook import MISSING_EVENT_HEADERS, github_preamble

# GitHub's documented example signature (docs: "Validating webhook deliveries"); the preamble only needs one.
DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

GOOD = {
    "method": "POST",
    "content_type": "application/json",
    "signature": DOC_SIGNATURE,
    "event": "issues",
    "delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    "content_length": 13,
}


def _preamble(**overrides: object) -> refusals.ReceiverRefusal | None:
    return github_preamble(**{**GOOD, **overrides})  # type: ignore[arg-type]


def test_preamble_accepts_a_well_formed_delivery() -> None:
    assert _preamble() is None
    assert _preamble(content_length=None) is None  # chunked: the streamed count decides
    assert _preamble(content_length=verify.MAX_BODY_BYTES) is None


def test_missing_signature_header_is_refused() -> None:
    assert _preamble(signature=None) is refusals.MISSING_SIGNATURE
    assert _preamble(signature="") is refusals.MISSING_SIGNATURE


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # Each row's fault plus every later fault: the earliest row wins (checks run in row order).
        ({"method": "GET", "content_type": None, "signature": None}, refusals.METHOD_NOT_ALLOWED),
        ({"content_type": "text/plain", "signature": None, "event": None}, refusals.UNSUPPORTED_MEDIA_TYPE),
        ({"signature": None, "event": None, "content_length": 10**9}, refusals.MISSING_SIGNATURE),
        ({"event": None, "content_length": 10**9}, MISSING_EVENT_HEADERS),
        ({"event": "", "delivery": "bad id"}, MISSING_EVENT_HEADERS),
        ({"delivery": None}, MISSING_EVENT_HEADERS),
        ({"delivery": "bad id", "content_length": 10**9}, refusals.INVALID_DELIVERY_ID),
        ({"content_length": verify.MAX_BODY_BYTES + 1}, refusals.PAYLOAD_TOO_LARGE),
    ],
)
def test_github_preamble_checks_run_in_a_fixed_order_and_the_first_fault_wins(
    overrides: dict[str, object], expected: refusals.ReceiverRefusal
) -> None:
    assert _preamble(**overrides) is expected


def test_each_refusal_carries_its_fixed_status_reason_and_body() -> None:
    assert MISSING_EVENT_HEADERS.body == b'{"error":"missing github event headers"}'
