"""pidispatch.forges.verify and .refusals: the credential checks, body reads and shared answers.

Published vectors first (GitHub's documented example, RFC 4231 case 2, the Standard Webhooks spec
example), then differential tests against the ``standardwebhooks`` reference package. Each forge's
preamble order and its own answers are tested with its ``receive`` (tests/unit/forges).
"""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from pidispatch.forges import receive, refusals, verify
from pidispatch.forges.azure import verify as azure_verify
from pidispatch.forges.gitlab import verify as gitlab_verify
from pidispatch.forges.gitlab.verify import (
    decode_gitlab_signing_key,
    gitlab_signature_match,
    gitlab_token_match,
)
from pidispatch.forges.verify import NO_MATCH, github_signature_ok, hmac_hex_match, token_digest
from tests.support.receiver import github_signature, standard_webhooks_signature

# GitHub's documented example (docs: "Validating webhook deliveries").
DOC_SECRET = b"It's a Secret to Everybody"
DOC_PAYLOAD = b"Hello, World!"
DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

# RFC 4231 test case 2: HMAC-SHA-256, key "Jefe"; Forgejo/Gitea send it as bare lowercase hex.
RFC4231_KEY = b"Jefe"
RFC4231_DATA = b"what do ya want for nothing?"
RFC4231_HEX = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"

# The Standard Webhooks specification's example (spec.md, "Verifying webhooks").
SW_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SW_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SW_TIMESTAMP = "1614265330"
SW_BODY = b'{"test": 2432232314}'
SW_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
SW_NOW_MS = 1614265330 * 1000


# --- GitHub ------------------------------------------------------------------------------------------


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
        DOC_SIGNATURE[:-1] + "\udcff",  # a byte aiohttp could not decode
    ],
)
def test_malformed_signature_header_is_refused(header: str) -> None:
    assert not github_signature_ok(DOC_SECRET, DOC_PAYLOAD, header)


def test_signature_is_over_raw_bytes_not_decoded_text() -> None:
    body = b'{"a":"\xc3\xa9"}'
    assert github_signature_ok(b"s", body, github_signature("s", body))
    assert not github_signature_ok(b"s", b'{"a":"\\u00e9"}', github_signature("s", body))


def test_hmac_match_names_the_secret_that_matched() -> None:
    secrets = (b"current", DOC_SECRET)
    assert hmac_hex_match(secrets, DOC_PAYLOAD, DOC_SIGNATURE, "sha256=") == 1
    assert hmac_hex_match(secrets[::-1], DOC_PAYLOAD, DOC_SIGNATURE, "sha256=") == 0
    assert hmac_hex_match((b"a", b"b"), DOC_PAYLOAD, DOC_SIGNATURE, "sha256=") == NO_MATCH


# --- Forgejo / Gitea ---------------------------------------------------------------------------------


def test_rfc4231_case_2_verifies_as_forgejo_bare_hex() -> None:
    assert hmac_hex_match((RFC4231_KEY,), RFC4231_DATA, RFC4231_HEX) == 0
    assert hmac_hex_match((RFC4231_KEY,), RFC4231_DATA, "sha256=" + RFC4231_HEX, "sha256=") == 0


@pytest.mark.parametrize(
    "header",
    ["sha256=" + RFC4231_HEX, RFC4231_HEX.upper(), RFC4231_HEX[:-1], RFC4231_HEX + "0", ""],
)
def test_forgejo_bare_hex_must_be_exact(header: str) -> None:
    assert hmac_hex_match((RFC4231_KEY,), RFC4231_DATA, header) == NO_MATCH


# --- GitLab ------------------------------------------------------------------------------------------


def test_standard_webhooks_spec_vector_verifies() -> None:
    key = decode_gitlab_signing_key(SW_SECRET)
    assert key is not None
    assert gitlab_signature_match((key,), SW_SIGNATURE, SW_ID, SW_TIMESTAMP, SW_BODY, SW_NOW_MS) == 0


def _sw(signature: str = SW_SIGNATURE, **kw: object) -> int | refusals.ReceiverRefusal:
    key = decode_gitlab_signing_key(SW_SECRET)
    assert key is not None
    args: dict[str, object] = {
        "keys": (key,),
        "signature": signature,
        "msg_id": SW_ID,
        "timestamp": SW_TIMESTAMP,
        "body": SW_BODY,
        "now_ms": SW_NOW_MS,
        **kw,
    }
    return gitlab_signature_match(**args)  # type: ignore[arg-type]


def test_any_v1_entry_may_match() -> None:
    assert _sw(f"v1,AAAA {SW_SIGNATURE}") == 0
    assert _sw(f"v1a,xyz v2,{SW_SIGNATURE[3:]} {SW_SIGNATURE}") == 0
    assert _sw(f"{SW_SIGNATURE} v1,AAAA") == 0


@pytest.mark.parametrize(
    "signature",
    [
        "v2," + SW_SIGNATURE[3:],  # only v1 entries count
        "v1," + SW_SIGNATURE[3:].rstrip("="),  # unpadded base64 is not the signature
        SW_SIGNATURE[3:],  # no version
        "v1,AAAA",
        "v1," + base64.b64encode(b"\0" * 32).decode(),
        "v1,",
        "v1,é",
        ",",
        " ",
    ],
)
def test_no_matching_v1_entry_is_invalid_signature(signature: str) -> None:
    assert _sw(signature) is refusals.INVALID_SIGNATURE


def test_tampered_body_id_or_timestamp_is_invalid_signature() -> None:
    assert _sw(body=SW_BODY + b" ") is refusals.INVALID_SIGNATURE
    assert _sw(msg_id=SW_ID + "x") is refusals.INVALID_SIGNATURE
    assert _sw(timestamp=str(int(SW_TIMESTAMP) + 1)) is refusals.INVALID_SIGNATURE


@pytest.mark.parametrize("missing", ["signature", "msg_id", "timestamp"])
def test_missing_standard_webhooks_header_is_missing_signature(missing: str) -> None:
    assert _sw(**{missing: None}) is refusals.MISSING_SIGNATURE
    assert _sw(**{missing: ""}) is refusals.MISSING_SIGNATURE


@pytest.mark.parametrize("offset_ms", [-300_000, 300_000, 0, 1])
def test_timestamp_inside_five_minutes_either_way_is_accepted(offset_ms: int) -> None:
    assert _sw(now_ms=SW_NOW_MS + offset_ms) == 0


@pytest.mark.parametrize("offset_ms", [-300_001, 300_001, -6 * 60_000, 10**12])
def test_stale_or_future_timestamp_is_refused_before_the_hmac(offset_ms: int) -> None:
    # The signature is valid: only its age refuses it.
    assert _sw(now_ms=SW_NOW_MS + offset_ms) is refusals.INVALID_TIMESTAMP


@pytest.mark.parametrize("timestamp", ["1614265330.0", "-1614265330", " 1614265330", "1e9", "x", "١٢٣"])
def test_timestamp_that_is_not_unix_seconds_is_refused(timestamp: str) -> None:
    assert _sw(timestamp=timestamp) is refusals.INVALID_TIMESTAMP


def test_previous_signing_key_matches_with_index_one() -> None:
    key = decode_gitlab_signing_key(SW_SECRET)
    assert key is not None
    match = gitlab_signature_match((b"new key", key), SW_SIGNATURE, SW_ID, SW_TIMESTAMP, SW_BODY, SW_NOW_MS)
    assert match == 1


@pytest.mark.parametrize(
    ("token", "key"),
    [
        (SW_SECRET, base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")),
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", base64.b64decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")),
        ("whsec_YWJj", b"abc"),
        ("whsec_YWI", b"ab"),  # padding optional
        ("whsec_", None),  # zero bytes is no key
        ("", None),
        ("whsec_not base64!", None),
        ("whsec_Y", None),
    ],
)
def test_signing_token_decoding(token: str, key: bytes | None) -> None:
    assert decode_gitlab_signing_key(token) == key


def test_token_mode_compares_digests() -> None:
    digests = (token_digest(b"current"), token_digest(b"previous"))
    assert gitlab_token_match(digests, "current") == 0
    assert gitlab_token_match(digests, "previous") == 1
    assert gitlab_token_match(digests, "guessed") is refusals.INVALID_TOKEN
    assert gitlab_token_match(digests, "current ") is refusals.INVALID_TOKEN
    assert gitlab_token_match(digests, "\udcff") is refusals.INVALID_TOKEN
    assert gitlab_token_match(digests, None) is refusals.MISSING_TOKEN
    assert gitlab_token_match(digests, "") is refusals.MISSING_TOKEN


# --- the Standard Webhooks reference package, both directions ------------------------------------------

_ids = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)
_bodies = st.text(max_size=200)  # the package signs text; any Unicode, encoded as UTF-8 on the wire
_keys = st.binary(min_size=1, max_size=64)


@settings(max_examples=150, deadline=None)
@given(key=_keys, msg_id=_ids, body=_bodies, seconds=st.integers(10**9, 2 * 10**9))
def test_reference_package_signs_and_we_verify(key: bytes, msg_id: str, body: str, seconds: int) -> None:
    token = "whsec_" + base64.b64encode(key).decode()
    signature = Webhook(token).sign(msg_id, datetime.fromtimestamp(seconds, tz=UTC), body)
    ours = decode_gitlab_signing_key(token)
    assert ours == key
    raw = body.encode()
    assert gitlab_signature_match((key,), signature, msg_id, str(seconds), raw, seconds * 1000) == 0
    assert gitlab_signature_match((key,), signature, msg_id, str(seconds), raw + b"x", seconds * 1000) == (
        refusals.INVALID_SIGNATURE
    )


@settings(max_examples=150, deadline=None)
@given(key=_keys, msg_id=_ids, body=_bodies, tamper=st.booleans())
def test_we_sign_and_reference_package_verifies(key: bytes, msg_id: str, body: str, tamper: bool) -> None:
    seconds = int(time.time())  # the package checks its window against the real clock
    signature = standard_webhooks_signature(key, msg_id, seconds, body.encode())
    sent = body + " " if tamper else body
    headers = {"webhook-id": msg_id, "webhook-timestamp": str(seconds), "webhook-signature": signature}
    theirs = Webhook(key)
    if tamper:
        with pytest.raises(WebhookVerificationError):
            theirs.verify(sent, headers, json_parse=False)
    else:
        theirs.verify(sent, headers, json_parse=False)
    ours = gitlab_signature_match((key,), signature, msg_id, str(seconds), sent.encode(), seconds * 1000)
    assert (ours == 0) is (not tamper)


# --- shared rules and body reads ---------------------------------------------------------------------


def test_each_refusal_carries_its_fixed_status_reason_and_body() -> None:
    assert refusals.METHOD_NOT_ALLOWED == (405, "method-not-allowed", b'{"error":"method not allowed"}')
    assert refusals.UNSUPPORTED_MEDIA_TYPE.body == b'{"error":"unsupported media type"}'
    assert refusals.MISSING_SIGNATURE.body == b'{"error":"missing signature"}'
    assert refusals.INVALID_DELIVERY_ID.body == b'{"error":"invalid delivery id"}'
    assert refusals.PAYLOAD_TOO_LARGE == (413, "payload-too-large", b'{"error":"payload too large"}')
    assert refusals.INVALID_SIGNATURE == (401, "invalid-signature", b'{"error":"invalid signature"}')
    assert refusals.INVALID_JSON == (400, "invalid-json", b'{"error":"invalid-json"}')
    assert refusals.ENQUEUE_FAILED == (503, "enqueue-failed", b'{"error":"enqueue-failed"}')
    assert refusals.INVALID_TIMESTAMP.body == b'{"error":"stale or invalid timestamp"}'
    assert refusals.MISSING_TOKEN.body == b'{"error":"missing token"}'
    assert refusals.INVALID_TOKEN.body == b'{"error":"invalid token"}'
    assert refusals.not_configured("gitlab") == (
        404,
        "not-configured",
        b'{"error":"gitlab webhooks are not configured"}',
    )


def test_reason_tokens_are_a_small_fixed_set() -> None:
    assert {
        "method-not-allowed",
        "unsupported-media-type",
        "payload-too-large",
        "body-incomplete",
        "invalid-delivery-id",
        "invalid-json",
        "enqueue-failed",
        "internal-error",
        "missing-signature",
        "missing-event-headers",
        "invalid-signature",
        "missing-event-header",
        "missing-delivery-id",
        "invalid-timestamp",
        "missing-token",
        "invalid-token",
        "missing-credential",
        "invalid-credential",
        "not-configured",
    } == receive.reasons()


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
        ("a\udcffb", False),  # an undecodable header byte
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


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b'{"object_kind":"issue","x":[1]}', "issue"),
        (b'{"object_kind":7}', None),
        (b'{"event_name":"project_create"}', None),  # system hooks
        (b'{"object_kind":"note","object_kind":"push"}', "push"),  # the last duplicate, as JSON.parse
    ],
)
def test_gitlab_object_kind(body: bytes, kind: str | None) -> None:
    read = gitlab_verify.read_gitlab_body(body)
    assert read is not None
    assert read.object_kind == kind


@pytest.mark.parametrize("body", [b"[]", b'{"object_kind":"issue"', b'{"object_kind":"\xff"}', b""])
def test_gitlab_body_that_is_not_a_json_object(body: bytes) -> None:
    assert gitlab_verify.read_gitlab_body(body) is None


@pytest.mark.parametrize(
    ("body", "delivery", "event_type"),
    [
        (b'{"id":"a-b","eventType":"workitem.updated","notificationId":3}', "a-b", "workitem.updated"),
        (b'{"notificationId":3,"eventType":"git.push"}', None, "git.push"),
        (b'{"id":"","eventType":"git.push"}', None, "git.push"),
        (b'{"id":42,"eventType":["x"]}', None, None),
        (b'{"id":"x"}', "x", None),
    ],
)
def test_azure_body_head(body: bytes, delivery: str | None, event_type: str | None) -> None:
    read = azure_verify.read_azure_body(body)
    assert read is not None
    assert (read.id, read.event_type) == (delivery, event_type)


@pytest.mark.parametrize("body", [b"[]", b'"id"', b'{"id":"a"', b'{"id":"\xc3"}'])
def test_azure_body_that_is_not_a_json_object(body: bytes) -> None:
    assert azure_verify.read_azure_body(body) is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # nested arrays, well formed
        b'{"object_kind":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_001,  # nested objects
        b'{"id":' + b"[" * 100_000 + b"}",  # unbalanced, as deep
    ],
    ids=["arrays", "objects", "unbalanced"],
)
def test_json_nested_deeper_than_the_decoder_goes_is_not_a_json_object(body: bytes) -> None:
    """A recursion limit in the decoder is an invalid body (400), never an error (500)."""
    assert verify.is_json_object(body) is False
    assert gitlab_verify.read_gitlab_body(body) is None
    assert azure_verify.read_azure_body(body) is None
