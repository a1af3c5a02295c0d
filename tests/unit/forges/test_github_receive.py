"""pidispatch.forges.github.receive: which variables serve GitHub, its boot refusals and its arm's steps."""

from __future__ import annotations

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import Settings
from pidispatch.forges import refusals
from pidispatch.forges.arms import Classification
from pidispatch.forges.github.receive import GITHUB_EVENTS
from pidispatch.forges.receive import configure_arms, load_receiver_config
from tests.support.arms import BODY, NEVER_STORED, arm_for, receiver_config, refused, run_arm
from tests.support.receiver import (
    github_headers,
)

# --- configuration ------------------------------------------------------------------------------------


def test_webhook_secret_enables_github_with_that_secret() -> None:
    arms = configure_arms(load_receiver_config(Settings(webhook_secret="s3cret"), {}))
    assert list(arms) == ["github"]
    gh = arms["github"]
    assert (gh.name, gh.path) == ("github", "/github")
    _, matched, verdict = run_arm(gh, github_headers(BODY, "issues", "d-1", secret="s3cret"))
    assert (matched, verdict) == (0, Classification("issues", "d-1", True))
    _, matched, _ = run_arm(gh, github_headers(BODY, "issues", "d-1", secret="other"))
    assert matched is refusals.INVALID_SIGNATURE


def test_auth_source_with_secret_serves_github() -> None:
    assert receiver_config({"WEBHOOK_SECRET": "s" * 16, "GITHUB_AUTH_SOURCE": "app"}).forges() == ["github"]


@pytest.mark.parametrize("secret", [None, "", "   "])
def test_auth_source_without_secret_refuses_to_start(secret: str | None) -> None:
    with pytest.raises(ConfigError, match=r"^WEBHOOK_SECRET is required when GITHUB_AUTH_SOURCE is set"):
        load_receiver_config(Settings(webhook_secret=secret, github_auth_source="gh"), {})


def test_auth_source_with_blank_secret_from_environment_refuses() -> None:
    assert "WEBHOOK_SECRET" in refused({"GITHUB_AUTH_SOURCE": "pat", "WEBHOOK_SECRET": " \t "})


def test_previous_secret_without_current_refuses() -> None:
    message = refused({"WEBHOOK_SECRET_PREVIOUS": "old", "FORGEJO_WEBHOOK_SECRET": "f"})
    assert message.startswith("WEBHOOK_SECRET is required when WEBHOOK_SECRET_PREVIOUS is set")


def test_github_previous_secret_verifies_with_index_one() -> None:
    new, old = "new-secret-0000001", "old-secret-0000001"
    gh = arm_for({"WEBHOOK_SECRET": new, "WEBHOOK_SECRET_PREVIOUS": old}, "github")
    assert run_arm(gh, github_headers(BODY, "issues", "d", secret=new))[1] == 0
    assert run_arm(gh, github_headers(BODY, "issues", "d", secret=old))[1] == 1
    assert run_arm(gh, github_headers(BODY, "issues", "d", secret="older"))[1] is refusals.INVALID_SIGNATURE


# --- the arm's steps ----------------------------------------------------------------------------------


def test_only_actionable_events_are_stored() -> None:
    assert frozenset({"issues", "issue_comment", "pull_request", "pull_request_review"}) == GITHUB_EVENTS
    for never in NEVER_STORED:
        assert never not in GITHUB_EVENTS


def test_github_ping_is_verified_then_not_stored() -> None:
    gh = arm_for({"WEBHOOK_SECRET": "s" * 16}, "github")
    _, matched, verdict = run_arm(gh, github_headers(BODY, "ping", "d-1", secret="s" * 16))
    assert (matched, verdict) == (0, Classification("ping", "d-1", False))


@pytest.mark.parametrize("name", ["WEBHOOK_SECRET", "WEBHOOK_SECRET_PREVIOUS"])
def test_a_webhook_secret_under_16_characters_is_refused_by_name(name: str) -> None:
    env = {"WEBHOOK_SECRET": "a" * 16, name: "fifteen-chars-x"}
    message = refused(env)
    assert message.startswith(f"{name} is 15 characters; accepted: a secret of at least 16 characters")
    assert "fifteen" not in message
    assert receiver_config({"WEBHOOK_SECRET": "a" * 16}).forges() == ["github"]
