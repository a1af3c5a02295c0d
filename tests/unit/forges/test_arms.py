"""pidispatch.receiver.config and .arms: the arms every forge's block describes, boot refusals, routing."""

from __future__ import annotations

import pytest

from pidispatch import forges
from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import Settings
from pidispatch.forges.armconfig import WEBHOOK_SECRET_VARS
from pidispatch.forges.arms import forge_for_path, normalise_path
from pidispatch.forges.receive import configure_arms, load_receiver_config, receive_of
from tests.support.arms import receiver_config
from tests.support.receiver import (
    AZURE_HEADER_SECRET,
    FORGEJO_SECRET,
    GITLAB_KEY,
    GITLAB_SIGNING_TOKEN,
    azure_header_env,
    forgejo_env,
    gitlab_signature_env,
    gitlab_token_env,
)

# --- configuration ------------------------------------------------------------------------------------


@pytest.mark.parametrize("secret", [None, "   "])
def test_no_arm_at_all_names_every_forge(secret: str | None) -> None:
    with pytest.raises(ConfigError, match="set WEBHOOK_SECRET") as info:
        load_receiver_config(Settings(webhook_secret=secret), {})
    message = str(info.value)
    assert "\n" not in message
    for variable in ("FORGEJO_WEBHOOK_SECRET", "GITLAB_WEBHOOK_MODE", "AZURE_WEBHOOK_MODE"):
        assert variable in message


def test_every_arm_at_once_and_secrets_never_print() -> None:
    env = {
        "WEBHOOK_SECRET": "gh-secret-value-01",
        "WEBHOOK_SECRET_PREVIOUS": "gh-old-value-00001",
        **forgejo_env(),
        **gitlab_signature_env(),
        **azure_header_env(),
    }
    config = receiver_config(env)
    assert config.forges() == ["github", "gitlab", "forgejo", "azure"]
    assert list(configure_arms(config)) == ["github", "gitlab", "forgejo", "azure"]
    text = repr(config) + str(config)
    secrets = (
        "gh-secret-value-01", "gh-old-value-00001", FORGEJO_SECRET, GITLAB_SIGNING_TOKEN, AZURE_HEADER_SECRET,
    )
    for secret in secrets:
        assert secret not in text
    assert repr(GITLAB_KEY)[2:-1] not in text


def test_every_forge_has_an_arm_on_its_own_path() -> None:
    # The registry-driven config covers every forge: adding one cannot leave the receiver behind.
    env = {"WEBHOOK_SECRET": "s" * 16, **forgejo_env(), **gitlab_signature_env(), **azure_header_env()}
    arms = configure_arms(receiver_config(env))
    assert tuple(arms) == forges.names()
    for forge in forges.FORGES:
        assert (arms[forge.name].name, arms[forge.name].path) == (forge.name, forge.path)
        assert receive_of(forge).setup_hint


# --- routing ------------------------------------------------------------------------------------------


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


@pytest.mark.parametrize("name", WEBHOOK_SECRET_VARS)
def test_every_forges_webhook_secret_under_16_characters_is_refused_by_name(name: str) -> None:
    env = {"WEBHOOK_SECRET": "g" * 16, **forgejo_env(), **gitlab_token_env(), **azure_header_env()}
    assert len(receiver_config(env).forges()) == len(forges.FORGES)
    with pytest.raises(ConfigError) as info:
        receiver_config({**env, name: "fifteen-chars-x"})
    assert str(info.value).startswith(f"{name} is 15 characters; accepted: a secret of at least 16")
    assert "fifteen" not in str(info.value)
