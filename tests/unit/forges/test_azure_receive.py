"""pidispatch.forges.azure.receive: Azure DevOps' variables and modes, boot refusals and the arm's steps."""

from __future__ import annotations

import base64

import pytest

from pidispatch.forges import refusals
from pidispatch.forges.arms import Classification
from pidispatch.forges.azure.receive import (
    AZURE_EVENT_TYPES,
    AZURE_INVALID_CREDENTIAL,
    AZURE_MISSING_CREDENTIAL,
    AZURE_MISSING_DELIVERY_ID,
    AZURE_TABLE,
    azure_credential_match,
    azure_preamble,
)
from pidispatch.forges.verify import token_digest
from tests.support.arms import NEVER_STORED, arm_for, refused, run_arm
from tests.support.receiver import (
    AZURE_BASIC_SECRET,
    AZURE_HEADER_NAME,
    AZURE_HEADER_SECRET,
    azure_basic_env,
    azure_basic_headers,
    azure_header_env,
    azure_header_headers,
)

# --- configuration ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trigger", ["AZURE_TOKEN", "AZURE_ORG_URL", "AZURE_WEBHOOK_SECRET", "AZURE_WEBHOOK_HEADER"]
)
def test_azure_without_mode_names_the_mode(trigger: str) -> None:
    message = refused({trigger: "x"})
    assert message.startswith("AZURE_WEBHOOK_MODE is required when the Azure DevOps arm is configured")


def test_azure_refusals_name_each_missing_variable() -> None:
    assert refused({"AZURE_WEBHOOK_MODE": "hmac"}) == (
        "AZURE_WEBHOOK_MODE='hmac' is refused; accepted: basic, header"
    )
    assert refused({"AZURE_WEBHOOK_MODE": "basic"}).startswith("AZURE_WEBHOOK_SECRET is required")
    assert refused({"AZURE_WEBHOOK_MODE": "header", "AZURE_WEBHOOK_SECRET": "s"}).startswith(
        "AZURE_WEBHOOK_HEADER is required when AZURE_WEBHOOK_MODE=header"
    )
    bad_name = {"AZURE_WEBHOOK_MODE": "header", "AZURE_WEBHOOK_SECRET": "s", "AZURE_WEBHOOK_HEADER": "X Bad:"}
    assert refused(bad_name).startswith("AZURE_WEBHOOK_HEADER='X Bad:' is refused")


# --- the arm's steps ----------------------------------------------------------------------------------


def test_only_actionable_events_are_stored() -> None:
    assert "workitem.updated" in AZURE_EVENT_TYPES
    for never in NEVER_STORED:
        assert never not in AZURE_EVENT_TYPES


def test_azure_basic_mode_reads_the_delivery_from_the_body() -> None:
    arm = arm_for(azure_basic_env(), "azure")
    body = b'{"id":"0b1d","eventType":"git.pullrequest.created","notificationId":4}'
    head, matched, verdict = run_arm(arm, azure_basic_headers(), body)
    assert (head.event, head.delivery) == (None, None)
    assert (matched, verdict) == (0, Classification("git.pullrequest.created", "0b1d", True))
    push = b'{"id":"0b1e","eventType":"git.push"}'
    assert run_arm(arm, azure_basic_headers(), push)[2] == Classification("git.push", "0b1e", False)
    assert run_arm(arm, azure_basic_headers(), b'{"eventType":"git.push"}')[2] is (
        AZURE_MISSING_DELIVERY_ID
    )
    assert run_arm(arm, azure_basic_headers(), b'{"id":"a b"}')[2] is AZURE_TABLE.invalid_delivery_id
    assert run_arm(arm, azure_basic_headers(), b"[]")[2] is AZURE_TABLE.invalid_json


def test_azure_modes_never_accept_each_others_credential() -> None:
    basic = arm_for(azure_basic_env(), "azure")
    in_header = azure_header_headers(secret=AZURE_BASIC_SECRET)
    assert run_arm(basic, in_header)[1] is AZURE_MISSING_CREDENTIAL
    header = arm_for(azure_header_env(), "azure")
    body = b'{"id":"x","eventType":"workitem.updated"}'
    assert run_arm(header, azure_header_headers(), body)[1] == 0
    any_case = {"Content-Type": "application/json", AZURE_HEADER_NAME.lower(): AZURE_HEADER_SECRET}
    assert run_arm(header, any_case, body)[1] == 0
    assert run_arm(header, azure_header_headers(name="X-Other"), body)[1] is AZURE_MISSING_CREDENTIAL
    assert run_arm(header, azure_basic_headers(secret=AZURE_HEADER_SECRET), body)[1] is (
        AZURE_MISSING_CREDENTIAL
    )


# --- the preamble and the credential ------------------------------------------------------------------

BASIC = base64.b64encode(b"hooks:pass").decode()


@pytest.mark.parametrize(
    ("presented", "expected"),
    [
        (f"Basic {BASIC}", 0),
        (f"Basic   {BASIC}  ", 0),  # the rest is trimmed
        (f"Basic {base64.b64encode(b'hooks:wrong').decode()}", AZURE_INVALID_CREDENTIAL),
        (f"basic {BASIC}", AZURE_INVALID_CREDENTIAL),  # exactly "Basic "
        (f"Bearer {BASIC}", AZURE_INVALID_CREDENTIAL),
        (BASIC, AZURE_INVALID_CREDENTIAL),
        ("Basic ", AZURE_INVALID_CREDENTIAL),
        ("", AZURE_MISSING_CREDENTIAL),
        (None, AZURE_MISSING_CREDENTIAL),
    ],
)
def test_azure_basic_mode(presented: str | None, expected: int | refusals.ReceiverRefusal) -> None:
    assert azure_credential_match((token_digest(BASIC.encode()),), presented, basic=True) == expected


def test_azure_header_mode_is_exact_and_rotates() -> None:
    digests = (token_digest(b"s3cret"), token_digest(b"old"))
    assert azure_credential_match(digests, "s3cret", basic=False) == 0
    assert azure_credential_match(digests, "old", basic=False) == 1
    assert azure_credential_match(digests, "Basic s3cret", basic=False) is AZURE_INVALID_CREDENTIAL
    assert azure_credential_match(digests, "s3cret2", basic=False) is AZURE_INVALID_CREDENTIAL
    assert azure_credential_match(digests, None, basic=False) is AZURE_MISSING_CREDENTIAL


def test_azure_preamble_checks_method_then_media_type_then_size() -> None:
    table = AZURE_TABLE
    assert azure_preamble("GET", "text/plain", 10**9) is table.method_not_allowed
    assert azure_preamble("POST", "application/x-www-form-urlencoded", 10**9) is (
        table.unsupported_media_type
    )
    assert azure_preamble("POST", "application/json", 3 * 1024 * 1024) is table.payload_too_large
    assert azure_preamble("POST", "application/json", None) is None


def test_each_refusal_carries_its_fixed_status_reason_and_body() -> None:
    azure = AZURE_TABLE
    assert [r.body for r in azure[:3]] == [
        b'{"error":"method-not-allowed"}',
        b'{"error":"unsupported-media-type"}',
        b'{"error":"payload-too-large"}',
    ]
    assert AZURE_INVALID_CREDENTIAL.body == AZURE_MISSING_CREDENTIAL.body
    assert AZURE_INVALID_CREDENTIAL.body == b'{"error":"unauthorized"}'
    assert AZURE_MISSING_DELIVERY_ID.body == b'{"error":"missing-delivery-id"}'
    assert azure.invalid_delivery_id.body == b'{"error":"invalid-delivery-id"}'
    assert azure.internal_error.body == b'{"error":"internal"}'
