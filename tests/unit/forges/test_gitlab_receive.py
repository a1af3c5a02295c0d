"""pidispatch.forges.gitlab.receive: GitLab's variables and modes, its boot refusals and its arm's steps."""

from __future__ import annotations

import base64

import pytest

from pidispatch.forges import refusals, verify
from pidispatch.forges.arms import Classification
from pidispatch.forges.gitlab.receive import (
    GITLAB_OBJECT_KINDS,
    MISSING_GITLAB_DELIVERY,
    MISSING_GITLAB_EVENT,
    GitLabArmConfig,
    gitlab_preamble,
)
from tests.support.arms import NEVER_STORED, NOW_MS, arm_for, receiver_config, refused, run_arm
from tests.support.receiver import (
    GITLAB_SIGNING_TOKEN,
    GITLAB_TOKEN_SECRET,
    gitlab_signature_env,
    gitlab_signature_headers,
    gitlab_token_env,
    gitlab_token_headers,
)

# --- configuration ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trigger", ["GITLAB_WEBHOOK_SECRET", "GITLAB_TOKEN", "GITLAB_WEBHOOK_SECRET_PREVIOUS"]
)
def test_gitlab_without_mode_names_the_mode(trigger: str) -> None:
    message = refused({trigger: "whsec_YWJj"})
    assert message.startswith("GITLAB_WEBHOOK_MODE is required when the GitLab arm is configured")
    assert message.endswith("accepted: signature, token")


def test_gitlab_url_alone_is_no_arm() -> None:
    env = {"GITLAB_URL": "https://gitlab.example", "WEBHOOK_SECRET": "s" * 16}
    assert receiver_config(env).forges() == ["github"]


@pytest.mark.parametrize("mode", ["Signature", "hmac", "both"])
def test_gitlab_unknown_mode_is_refused(mode: str) -> None:
    message = refused({"GITLAB_WEBHOOK_MODE": mode, "GITLAB_WEBHOOK_SECRET": "whsec_YWJj"})
    assert message == f"GITLAB_WEBHOOK_MODE={mode!r} is refused; accepted: signature, token"


@pytest.mark.parametrize("mode", ["signature", "token"])
def test_gitlab_mode_without_secret_names_the_secret(mode: str) -> None:
    message = refused({"GITLAB_WEBHOOK_MODE": mode, "GITLAB_TOKEN": "glpat"})
    assert message.startswith("GITLAB_WEBHOOK_SECRET is required when the GitLab arm is configured")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GITLAB_WEBHOOK_SECRET", "whsec_"),
        ("GITLAB_WEBHOOK_SECRET", "whsec_not-base64!"),
        ("GITLAB_WEBHOOK_SECRET", "plain token with spaces"),
        ("GITLAB_WEBHOOK_SECRET_PREVIOUS", "whsec_Y"),
    ],
)
def test_gitlab_signing_token_that_decodes_to_no_key_refuses_at_boot(variable: str, value: str) -> None:
    env = {**gitlab_signature_env(), variable: value}
    message = refused(env)
    assert message.startswith(f"{variable} is not a signing token in signature mode")
    assert value == "whsec_" or value not in message  # never echo a secret


def test_gitlab_token_mode_takes_any_token() -> None:
    gitlab = receiver_config(gitlab_token_env()).arms.get("gitlab")
    assert isinstance(gitlab, GitLabArmConfig)
    assert gitlab.mode == "token"


# --- the arm's steps ----------------------------------------------------------------------------------


def test_only_actionable_events_are_stored() -> None:
    assert {"issue", "merge_request", "note"} == GITLAB_OBJECT_KINDS
    for never in NEVER_STORED:
        assert never not in GITLAB_OBJECT_KINDS


def test_gitlab_signature_mode_routes_on_object_kind() -> None:
    arm = arm_for(gitlab_signature_env(), "gitlab")
    body = b'{"object_kind":"merge_request"}'
    headers = gitlab_signature_headers(body, "msg-1", NOW_MS // 1000, event="Merge Request Hook")
    head, matched, verdict = run_arm(arm, headers, body)
    assert head.event == "Merge Request Hook"
    assert (matched, verdict) == (0, Classification("merge_request", "msg-1", True))
    push = b'{"object_kind":"push"}'
    headers = gitlab_signature_headers(push, "msg-2", NOW_MS // 1000, event="Issue Hook")
    assert run_arm(arm, headers, push)[2] == Classification("push", "msg-2", False)  # the header is not used


def test_gitlab_signature_mode_refuses_the_token_modes_header() -> None:
    arm = arm_for(gitlab_signature_env(), "gitlab")
    headers = gitlab_token_headers("d-1", token=GITLAB_SIGNING_TOKEN)
    assert run_arm(arm, headers)[1] is refusals.MISSING_SIGNATURE


def test_gitlab_idempotency_key_is_the_delivery_but_not_the_signed_id() -> None:
    token = arm_for(gitlab_token_env(), "gitlab")
    body = b'{"object_kind":"issue"}'
    assert run_arm(token, gitlab_token_headers("legacy-1", legacy_id=True), body)[2] == Classification(
        "issue", "legacy-1", True
    )
    signature = arm_for(gitlab_signature_env(), "gitlab")
    headers = gitlab_signature_headers(body, "legacy-2", NOW_MS // 1000)
    headers["Idempotency-Key"] = headers.pop("webhook-id")
    assert run_arm(signature, headers, body)[1] is refusals.MISSING_SIGNATURE


def test_gitlab_token_mode_refuses_the_signature_modes_headers() -> None:
    arm = arm_for({"GITLAB_WEBHOOK_MODE": "token", "GITLAB_WEBHOOK_SECRET": GITLAB_SIGNING_TOKEN}, "gitlab")
    body = b'{"object_kind":"issue"}'
    headers = gitlab_signature_headers(body, "d-1", NOW_MS // 1000)
    assert run_arm(arm, headers, body)[1] is refusals.MISSING_TOKEN
    other_token = gitlab_token_headers("d-1", token=GITLAB_TOKEN_SECRET)
    assert run_arm(arm, other_token, body)[1] is refusals.INVALID_TOKEN


def test_gitlab_previous_signing_key_matches_with_index_one() -> None:
    new_key = b"new signing key"
    env = {
        "GITLAB_WEBHOOK_MODE": "signature",
        "GITLAB_WEBHOOK_SECRET": base64.b64encode(new_key).decode(),  # whsec_ is optional
        "GITLAB_WEBHOOK_SECRET_PREVIOUS": GITLAB_SIGNING_TOKEN,
    }
    arm = arm_for(env, "gitlab")
    body = b'{"object_kind":"note"}'
    assert run_arm(arm, gitlab_signature_headers(body, "m", NOW_MS // 1000, key=new_key), body)[1] == 0
    assert run_arm(arm, gitlab_signature_headers(body, "m", NOW_MS // 1000), body)[1] == 1


# --- the preamble -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"method": "PUT", "content_type": None, "event": None}, refusals.METHOD_NOT_ALLOWED),
        ({"content_type": "text/plain", "event": None}, refusals.UNSUPPORTED_MEDIA_TYPE),
        ({"event": None, "delivery": None, "content_length": 10**9}, MISSING_GITLAB_EVENT),
        ({"delivery": None, "content_length": 10**9}, MISSING_GITLAB_DELIVERY),
        ({"delivery": ""}, MISSING_GITLAB_DELIVERY),
        ({"delivery": "a b", "content_length": 10**9}, refusals.INVALID_DELIVERY_ID),
        ({"content_length": verify.MAX_BODY_BYTES + 1}, refusals.PAYLOAD_TOO_LARGE),
        ({}, None),
    ],
)
def test_gitlab_preamble_checks_run_in_a_fixed_order_and_the_first_fault_wins(
    overrides: dict[str, object], expected: refusals.ReceiverRefusal | None
) -> None:
    args: dict[str, object] = {
        "method": "POST",
        "content_type": "application/json",
        "event": "Issue Hook",
        "delivery": "d-1",
        "content_length": 10,
        **overrides,
    }
    assert gitlab_preamble(**args) is expected  # type: ignore[arg-type]


def test_each_refusal_carries_its_fixed_status_reason_and_body() -> None:
    assert MISSING_GITLAB_EVENT.body == b'{"error":"missing gitlab event header"}'
    gitlab = verify.msgspec.json.decode(MISSING_GITLAB_DELIVERY.body)
    assert gitlab["error"] == "missing delivery id"
    assert "GitLab 17.4 or later" in gitlab["detail"]
