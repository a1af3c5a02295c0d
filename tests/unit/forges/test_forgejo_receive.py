"""pidispatch.forges.forgejo.receive: what serves Forgejo/Gitea, its boot refusals and its arm's steps."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from pidispatch.forges import refusals
from pidispatch.forges.arms import Classification
from pidispatch.forges.forgejo.receive import FORGEJO_EVENTS
from pidispatch.forges.webhook import MISSING_EVENT_HEADERS
from tests.support.arms import BODY, NEVER_STORED, arm_for, receiver_config, refused, run_arm
from tests.support.receiver import (
    FORGEJO_SECRET,
    forgejo_env,
    forgejo_headers,
    github_headers,
    hmac_hex,
)

# --- configuration ------------------------------------------------------------------------------------


@pytest.mark.parametrize("trigger", ["FORGEJO_TOKEN", "FORGEJO_URL", "FORGEJO_WEBHOOK_SECRET_PREVIOUS"])
def test_forgejo_half_configured_names_the_missing_secret(trigger: str) -> None:
    message = refused({trigger: "x"})
    assert message.startswith("FORGEJO_WEBHOOK_SECRET is required when the Forgejo arm is configured")
    assert f"({trigger} is set)" in message


def test_forgejo_needs_only_its_secret_not_a_token_or_url() -> None:
    assert receiver_config(forgejo_env()).forges() == ["forgejo"]


# --- the arm's steps ----------------------------------------------------------------------------------


def test_only_actionable_events_are_stored() -> None:
    assert {"issues", "issue_comment", "pull_request", "pull_request_approved"} <= FORGEJO_EVENTS
    for never in NEVER_STORED:
        assert never not in FORGEJO_EVENTS


@pytest.mark.parametrize("sender", ["forgejo", "gitea"])
def test_forgejo_and_gitea_deliveries_verify(sender: str) -> None:
    arm = arm_for(forgejo_env(), "forgejo")
    head, matched, verdict = run_arm(arm, forgejo_headers(BODY, "issues", "fj-1", sender=sender))
    assert (matched, verdict) == (0, Classification("issues", "fj-1", True))
    assert head.credential[0] == ""  # the bare-hex header was the one checked


def test_forgejo_github_compatible_headers_alone_verify() -> None:
    arm = arm_for(forgejo_env(), "forgejo")
    headers = github_headers(BODY, "pull_request", "gh-style", secret=FORGEJO_SECRET)
    assert run_arm(arm, headers)[1:] == (0, Classification("pull_request", "gh-style", True))


def test_forgejo_signature_is_not_rescued_by_another_header() -> None:
    arm = arm_for(forgejo_env(), "forgejo")
    headers = forgejo_headers(BODY, "issues", "fj-1")
    headers["X-Forgejo-Signature"] = hmac_hex("wrong", BODY)  # Gitea's and GitHub's names still right
    assert run_arm(arm, headers)[1] is refusals.INVALID_SIGNATURE


def test_forgejo_event_comes_from_the_delivery_headers_family() -> None:
    arm = arm_for(forgejo_env(), "forgejo")
    headers = forgejo_headers(BODY, "issues", "fj-1")
    headers["X-GitHub-Event"] = "push"
    assert run_arm(arm, headers)[2] == Classification("issues", "fj-1", True)
    del headers["X-Forgejo-Event"]  # Forgejo's delivery id without its event name
    head = arm.head("POST", CIMultiDict(headers), len(BODY))
    assert head.refusal is MISSING_EVENT_HEADERS


def test_forgejo_without_any_signature_is_missing_signature() -> None:
    arm = arm_for(forgejo_env(), "forgejo")
    headers = {
        k: v for k, v in forgejo_headers(BODY, "issues", "fj-1").items() if "Signature" not in k
    }
    assert arm.head("POST", CIMultiDict(headers), len(BODY)).refusal is refusals.MISSING_SIGNATURE
