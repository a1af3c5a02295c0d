"""pidispatch.receiver.arms: which forges are served, boot refusals, path routing."""

from __future__ import annotations

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import Settings, load_settings
from pidispatch.receiver.arms import GITHUB_EVENTS, configure_arms, forge_for_path, normalise_path
from tests.helpers import github_signature


def test_webhook_secret_enables_github_with_that_secret() -> None:
    arms = configure_arms(Settings(webhook_secret="s3cret"))
    assert list(arms) == ["github"]
    gh = arms["github"]
    assert (gh.name, gh.path) == ("github", "/github")
    assert gh.verify(b"{}", github_signature("s3cret", b"{}"))
    assert not gh.verify(b"{}", github_signature("other", b"{}"))
    assert (gh.signature_header, gh.event_header, gh.delivery_header) == (
        "X-Hub-Signature-256",
        "X-GitHub-Event",
        "X-GitHub-Delivery",
    )
    assert gh.events == GITHUB_EVENTS


def test_auth_source_with_secret_serves_github() -> None:
    assert list(configure_arms(Settings(webhook_secret="s", github_auth_source="app"))) == ["github"]


@pytest.mark.parametrize("secret", [None, "", "   "])
def test_auth_source_without_secret_refuses_to_start(secret: str | None) -> None:
    with pytest.raises(ConfigError, match=r"^WEBHOOK_SECRET is required when GITHUB_AUTH_SOURCE is set"):
        configure_arms(Settings(webhook_secret=secret, github_auth_source="gh"))


def test_auth_source_with_blank_secret_from_environment_refuses() -> None:
    settings = load_settings({"GITHUB_AUTH_SOURCE": "pat", "WEBHOOK_SECRET": " \t "})
    with pytest.raises(ConfigError, match="WEBHOOK_SECRET"):
        configure_arms(settings)


@pytest.mark.parametrize("secret", [None, "   "])
def test_no_arm_at_all_names_webhook_secret(secret: str | None) -> None:
    with pytest.raises(ConfigError, match="set WEBHOOK_SECRET") as info:
        configure_arms(Settings(webhook_secret=secret))
    assert "\n" not in str(info.value)


def test_only_actionable_github_events_are_stored() -> None:
    assert frozenset({"issues", "issue_comment", "pull_request", "pull_request_review"}) == GITHUB_EVENTS
    assert "ping" not in GITHUB_EVENTS
    assert "push" not in GITHUB_EVENTS


@pytest.mark.parametrize(
    ("path", "forge"),
    [
        ("/", "github"),
        ("/github", "github"),
        ("/anything", "github"),
        ("/gitlab/x", "github"),
        ("/GITLAB", "github"),
        ("/gitlab", "gitlab"),
        ("/forgejo", "forgejo"),
        ("/azure", "azure"),
    ],
)
def test_forge_for_path_falls_through_to_github(path: str, forge: str) -> None:
    assert forge_for_path(path) == forge


@pytest.mark.parametrize(
    ("path", "normal"),
    [("/", "/"), ("/gitlab/", "/gitlab"), ("/gitlab", "/gitlab"), ("/gitlab//", "/gitlab/"), ("//", "/")],
)
def test_normalise_path_removes_one_trailing_slash(path: str, normal: str) -> None:
    assert normalise_path(path) == normal
