"""pidispatch.receiver.verify: GitHub's signature, the header preamble's order, body checks."""

from __future__ import annotations

import pytest

from pidispatch.receiver import verify
from pidispatch.receiver.verify import github_preamble, github_signature_ok
from tests.helpers import github_signature

# GitHub's documented example (docs: "Validating webhook deliveries").
DOC_SECRET = b"It's a Secret to Everybody"
DOC_PAYLOAD = b"Hello, World!"
DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_github_documented_example_verifies() -> None:
    assert github_signature_ok(DOC_SECRET, DOC_PAYLOAD, DOC_SIGNATURE)


def test_tampered_body_is_refused() -> None:
    assert not github_signature_ok(DOC_SECRET, DOC_PAYLOAD + b" ", DOC_SIGNATURE)
    assert not github_signature_ok(DOC_SECRET, b"Hello, World?", DOC_SIGNATURE)


def test_other_secret_is_refused() -> None:
    assert not github_signature_ok(b"It's a Secret to Everybody!", DOC_PAYLOAD, DOC_SIGNATURE)


@pytest.mark.parametrize(
    "header",
    [
        DOC_SIGNATURE.removeprefix("sha256="),  # no prefix
        "sha1=" + DOC_SIGNATURE.removeprefix("sha256="),  # wrong algorithm prefix
        "SHA256=" + DOC_SIGNATURE.removeprefix("sha256="),  # prefix case
        "sha256=" + DOC_SIGNATURE.removeprefix("sha256=").upper(),  # hex must be lowercase
        DOC_SIGNATURE[:-1],  # one hex digit short
        DOC_SIGNATURE + "0",  # one hex digit long
        DOC_SIGNATURE + " ",
        "sha256=",
        "",
        DOC_SIGNATURE[:-1] + "é",  # non-ASCII must not raise from compare_digest
    ],
)
def test_malformed_signature_header_is_refused(header: str) -> None:
    assert not github_signature_ok(DOC_SECRET, DOC_PAYLOAD, header)


def test_signature_is_over_raw_bytes_not_decoded_text() -> None:
    body = b'{"a":"\xc3\xa9"}'
    assert github_signature_ok(b"s", body, github_signature("s", body))
    assert not github_signature_ok(b"s", b'{"a":"\\u00e9"}', github_signature("s", body))


GOOD = {
    "method": "POST",
    "content_type": "application/json",
    "signature": DOC_SIGNATURE,
    "event": "issues",
    "delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    "content_length": 13,
}


def _preamble(**overrides: object) -> verify.Refusal | None:
    return github_preamble(**{**GOOD, **overrides})  # type: ignore[arg-type]


def test_preamble_accepts_a_well_formed_delivery() -> None:
    assert _preamble() is None
    assert _preamble(content_length=None) is None  # chunked: the streamed count decides
    assert _preamble(content_length=verify.MAX_BODY_BYTES) is None


def test_missing_signature_header_is_refused() -> None:
    assert _preamble(signature=None) is verify.MISSING_SIGNATURE
    assert _preamble(signature="") is verify.MISSING_SIGNATURE


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # Each row's fault plus every later fault: the earliest row wins (spec §1.3 order).
        ({"method": "GET", "content_type": None, "signature": None}, verify.METHOD_NOT_ALLOWED),
        ({"content_type": "text/plain", "signature": None, "event": None}, verify.UNSUPPORTED_MEDIA_TYPE),
        ({"signature": None, "event": None, "content_length": 10**9}, verify.MISSING_SIGNATURE),
        ({"event": None, "content_length": 10**9}, verify.MISSING_EVENT_HEADERS),
        ({"event": "", "delivery": "bad id"}, verify.MISSING_EVENT_HEADERS),
        ({"delivery": None}, verify.MISSING_EVENT_HEADERS),
        ({"delivery": "bad id", "content_length": 10**9}, verify.INVALID_DELIVERY_ID),
        ({"content_length": verify.MAX_BODY_BYTES + 1}, verify.PAYLOAD_TOO_LARGE),
    ],
)
def test_preamble_checks_in_spec_order(overrides: dict[str, object], expected: verify.Refusal) -> None:
    assert _preamble(**overrides) is expected


def test_refusals_carry_the_spec_bodies() -> None:
    assert verify.METHOD_NOT_ALLOWED == (405, "method-not-allowed", b'{"error":"method not allowed"}')
    assert verify.UNSUPPORTED_MEDIA_TYPE.body == b'{"error":"unsupported media type"}'
    assert verify.MISSING_SIGNATURE.body == b'{"error":"missing signature"}'
    assert verify.MISSING_EVENT_HEADERS.body == b'{"error":"missing github event headers"}'
    assert verify.INVALID_DELIVERY_ID.body == b'{"error":"invalid delivery id"}'
    assert verify.PAYLOAD_TOO_LARGE.status == 413
    assert verify.INVALID_SIGNATURE == (401, "invalid-signature", b'{"error":"invalid signature"}')
    assert verify.INVALID_JSON == (400, "invalid-json", b'{"error":"invalid-json"}')
    gitlab = verify.not_configured("gitlab")
    assert gitlab == (404, "not-configured", b'{"error":"gitlab webhooks are not configured"}')


@pytest.mark.parametrize(
    ("content_type", "ok"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("  Application/JSON ;charset=UTF-8", True),
        ("application/x-www-form-urlencoded", False),  # GitHub's "form" webhooks
        ("application/jsonx", False),
        ("text/json", False),
        ("", False),
        (None, False),
    ],
)
def test_json_media_type(content_type: str | None, ok: bool) -> None:
    assert verify.is_json_media_type(content_type) is ok


@pytest.mark.parametrize(
    ("delivery", "ok"),
    [
        ("72d3162e-cc78-11e3-81ab-4c9367dc0958", True),
        ("x" * 128, True),
        ("poll-e123", True),
        ("x" * 129, False),
        ("", False),
        ("a b", False),
        ("a\tb", False),
        ("a\nb", False),
        ("a\x00b", False),
        ("a\x7fb", False),
        ("a\u00a0b", False),  # no-break space
        ("a\u2028b", False),  # line separator
    ],
)
def test_delivery_id_must_be_a_key_suffix(delivery: str, ok: bool) -> None:
    assert verify.valid_delivery_id(delivery) is ok


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        (b"{}", True),
        (b' {"a": [1, {"b": null}], "c": "\xc3\xa9"} ', True),
        (b"[]", False),
        (b"1", False),
        (b'"x"', False),
        (b"null", False),
        (b"", False),
        (b"{ not valid json", False),
        (b'{"a":1} trailing', False),
        (b'{"a":"\xff"}', False),  # invalid UTF-8 the router could not decode
        (b'{"\xff":1}', False),
    ],
)
def test_json_object(body: bytes, ok: bool) -> None:
    assert verify.is_json_object(body) is ok
