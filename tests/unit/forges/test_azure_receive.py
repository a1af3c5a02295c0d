"""pidispatch.forges.azure.receive: Azure DevOps' variables and modes, boot refusals and the arm's steps."""

from __future__ import annotations

import pytest

from pidispatch.forges.azure.receive import AZURE_EVENT_TYPES
from pidispatch.receiver import refusals
from pidispatch.receiver.arms import Classification
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
        refusals.AZURE_MISSING_DELIVERY_ID
    )
    assert run_arm(arm, azure_basic_headers(), b'{"id":"a b"}')[2] is refusals.AZURE_TABLE.invalid_delivery_id
    assert run_arm(arm, azure_basic_headers(), b"[]")[2] is refusals.AZURE_TABLE.invalid_json


def test_azure_modes_never_accept_each_others_credential() -> None:
    basic = arm_for(azure_basic_env(), "azure")
    in_header = azure_header_headers(secret=AZURE_BASIC_SECRET)
    assert run_arm(basic, in_header)[1] is refusals.AZURE_MISSING_CREDENTIAL
    header = arm_for(azure_header_env(), "azure")
    body = b'{"id":"x","eventType":"workitem.updated"}'
    assert run_arm(header, azure_header_headers(), body)[1] == 0
    any_case = {"Content-Type": "application/json", AZURE_HEADER_NAME.lower(): AZURE_HEADER_SECRET}
    assert run_arm(header, any_case, body)[1] == 0
    assert run_arm(header, azure_header_headers(name="X-Other"), body)[1] is refusals.AZURE_MISSING_CREDENTIAL
    assert run_arm(header, azure_basic_headers(secret=AZURE_HEADER_SECRET), body)[1] is (
        refusals.AZURE_MISSING_CREDENTIAL
    )
