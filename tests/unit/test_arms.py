"""pidispatch.receiver.config and .arms: which forges are served, boot refusals, each arm's three steps."""

from __future__ import annotations

import base64
from collections.abc import Mapping

import pytest
from multidict import CIMultiDict

from pidispatch.common.errors import ConfigError
from pidispatch.common.settings import Settings, load_settings
from pidispatch.receiver import refusals
from pidispatch.receiver.arms import (
    AZURE_EVENT_TYPES,
    FORGEJO_EVENTS,
    GITHUB_EVENTS,
    GITLAB_OBJECT_KINDS,
    Arm,
    Classification,
    RequestHead,
    configure_arms,
    forge_for_path,
    normalise_path,
)
from pidispatch.receiver.config import ReceiverConfig, load_receiver_config
from tests.support.receiver import (
    AZURE_BASIC_SECRET,
    AZURE_HEADER_NAME,
    AZURE_HEADER_SECRET,
    FORGEJO_SECRET,
    GITLAB_KEY,
    GITLAB_SIGNING_TOKEN,
    GITLAB_TOKEN_SECRET,
    azure_basic_env,
    azure_basic_headers,
    azure_header_env,
    azure_header_headers,
    forgejo_env,
    forgejo_headers,
    github_headers,
    gitlab_signature_env,
    gitlab_signature_headers,
    gitlab_token_env,
    gitlab_token_headers,
    hmac_hex,
)

NOW_MS = 1_700_000_000_000
BODY = b'{"action":"opened"}'


def _config(env: Mapping[str, str]) -> ReceiverConfig:
    """As the process reads it: settings and the receiver's own variables from one environment."""
    return load_receiver_config(load_settings(env), env)


def _refused(env: Mapping[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        _config(env)
    message = str(info.value)
    assert "\n" not in message
    return message


def _arm(env: Mapping[str, str], forge: str) -> Arm:
    return configure_arms(_config(env))[forge]


def _run(
    arm: Arm, headers: Mapping[str, str], body: bytes = BODY, method: str = "POST", now_ms: int = NOW_MS
) -> tuple[
    RequestHead, int | refusals.ReceiverRefusal | None, Classification | refusals.ReceiverRefusal | None
]:
    """The three steps as the app runs them, stopping at the first refusal."""
    head = arm.head(method, CIMultiDict(headers), len(body))
    if head.refusal is not None:
        return head, None, None
    matched = arm.authenticate(head, body, now_ms)
    if isinstance(matched, refusals.ReceiverRefusal):
        return head, matched, None
    return head, matched, arm.classify(head, body)


# --- configuration: GitHub ----------------------------------------------------------------------------


def test_webhook_secret_enables_github_with_that_secret() -> None:
    arms = configure_arms(load_receiver_config(Settings(webhook_secret="s3cret"), {}))
    assert list(arms) == ["github"]
    gh = arms["github"]
    assert (gh.name, gh.path) == ("github", "/github")
    _, matched, verdict = _run(gh, github_headers(BODY, "issues", "d-1", secret="s3cret"))
    assert (matched, verdict) == (0, Classification("issues", "d-1", True))
    _, matched, _ = _run(gh, github_headers(BODY, "issues", "d-1", secret="other"))
    assert matched is refusals.INVALID_SIGNATURE


def test_auth_source_with_secret_serves_github() -> None:
    assert _config({"WEBHOOK_SECRET": "s", "GITHUB_AUTH_SOURCE": "app"}).forges() == ["github"]


@pytest.mark.parametrize("secret", [None, "", "   "])
def test_auth_source_without_secret_refuses_to_start(secret: str | None) -> None:
    with pytest.raises(ConfigError, match=r"^WEBHOOK_SECRET is required when GITHUB_AUTH_SOURCE is set"):
        load_receiver_config(Settings(webhook_secret=secret, github_auth_source="gh"), {})


def test_auth_source_with_blank_secret_from_environment_refuses() -> None:
    assert "WEBHOOK_SECRET" in _refused({"GITHUB_AUTH_SOURCE": "pat", "WEBHOOK_SECRET": " \t "})


@pytest.mark.parametrize("secret", [None, "   "])
def test_no_arm_at_all_names_every_forge(secret: str | None) -> None:
    with pytest.raises(ConfigError, match="set WEBHOOK_SECRET") as info:
        load_receiver_config(Settings(webhook_secret=secret), {})
    message = str(info.value)
    assert "\n" not in message
    for variable in ("FORGEJO_WEBHOOK_SECRET", "GITLAB_WEBHOOK_MODE", "AZURE_WEBHOOK_MODE"):
        assert variable in message


def test_previous_secret_without_current_refuses() -> None:
    message = _refused({"WEBHOOK_SECRET_PREVIOUS": "old", "FORGEJO_WEBHOOK_SECRET": "f"})
    assert message.startswith("WEBHOOK_SECRET is required when WEBHOOK_SECRET_PREVIOUS is set")


def test_github_previous_secret_verifies_with_index_one() -> None:
    gh = _arm({"WEBHOOK_SECRET": "new", "WEBHOOK_SECRET_PREVIOUS": "old"}, "github")
    assert _run(gh, github_headers(BODY, "issues", "d", secret="new"))[1] == 0
    assert _run(gh, github_headers(BODY, "issues", "d", secret="old"))[1] == 1
    assert _run(gh, github_headers(BODY, "issues", "d", secret="older"))[1] is refusals.INVALID_SIGNATURE


# --- configuration: the other forges ------------------------------------------------------------------


@pytest.mark.parametrize("trigger", ["FORGEJO_TOKEN", "FORGEJO_URL", "FORGEJO_WEBHOOK_SECRET_PREVIOUS"])
def test_forgejo_half_configured_names_the_missing_secret(trigger: str) -> None:
    message = _refused({trigger: "x"})
    assert message.startswith("FORGEJO_WEBHOOK_SECRET is required when the Forgejo arm is configured")
    assert f"({trigger} is set)" in message


def test_forgejo_needs_only_its_secret_not_a_token_or_url() -> None:
    assert _config(forgejo_env()).forges() == ["forgejo"]


@pytest.mark.parametrize(
    "trigger", ["GITLAB_WEBHOOK_SECRET", "GITLAB_TOKEN", "GITLAB_WEBHOOK_SECRET_PREVIOUS"]
)
def test_gitlab_without_mode_names_the_mode(trigger: str) -> None:
    message = _refused({trigger: "whsec_YWJj"})
    assert message.startswith("GITLAB_WEBHOOK_MODE is required when the GitLab arm is configured")
    assert message.endswith("accepted: signature, token")


def test_gitlab_url_alone_is_no_arm() -> None:
    assert _config({"GITLAB_URL": "https://gitlab.example", "WEBHOOK_SECRET": "s"}).forges() == ["github"]


@pytest.mark.parametrize("mode", ["Signature", "hmac", "both"])
def test_gitlab_unknown_mode_is_refused(mode: str) -> None:
    message = _refused({"GITLAB_WEBHOOK_MODE": mode, "GITLAB_WEBHOOK_SECRET": "whsec_YWJj"})
    assert message == f"GITLAB_WEBHOOK_MODE={mode!r} is refused; accepted: signature, token"


@pytest.mark.parametrize("mode", ["signature", "token"])
def test_gitlab_mode_without_secret_names_the_secret(mode: str) -> None:
    message = _refused({"GITLAB_WEBHOOK_MODE": mode, "GITLAB_TOKEN": "glpat"})
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
    message = _refused(env)
    assert message.startswith(f"{variable} is not a signing token in signature mode")
    assert value == "whsec_" or value not in message  # never echo a secret


def test_gitlab_token_mode_takes_any_token() -> None:
    config = _config(gitlab_token_env())
    assert config.gitlab is not None
    assert config.gitlab.mode == "token"


@pytest.mark.parametrize(
    "trigger", ["AZURE_TOKEN", "AZURE_ORG_URL", "AZURE_WEBHOOK_SECRET", "AZURE_WEBHOOK_HEADER"]
)
def test_azure_without_mode_names_the_mode(trigger: str) -> None:
    message = _refused({trigger: "x"})
    assert message.startswith("AZURE_WEBHOOK_MODE is required when the Azure DevOps arm is configured")


def test_azure_refusals_name_each_missing_variable() -> None:
    assert _refused({"AZURE_WEBHOOK_MODE": "hmac"}) == (
        "AZURE_WEBHOOK_MODE='hmac' is refused; accepted: basic, header"
    )
    assert _refused({"AZURE_WEBHOOK_MODE": "basic"}).startswith("AZURE_WEBHOOK_SECRET is required")
    assert _refused({"AZURE_WEBHOOK_MODE": "header", "AZURE_WEBHOOK_SECRET": "s"}).startswith(
        "AZURE_WEBHOOK_HEADER is required when AZURE_WEBHOOK_MODE=header"
    )
    bad_name = {"AZURE_WEBHOOK_MODE": "header", "AZURE_WEBHOOK_SECRET": "s", "AZURE_WEBHOOK_HEADER": "X Bad:"}
    assert _refused(bad_name).startswith("AZURE_WEBHOOK_HEADER='X Bad:' is refused")


def test_every_arm_at_once_and_secrets_never_print() -> None:
    env = {
        "WEBHOOK_SECRET": "gh-secret-value",
        "WEBHOOK_SECRET_PREVIOUS": "gh-old-value",
        **forgejo_env(),
        **gitlab_signature_env(),
        **azure_header_env(),
    }
    config = _config(env)
    assert config.forges() == ["github", "gitlab", "forgejo", "azure"]
    assert list(configure_arms(config)) == ["github", "gitlab", "forgejo", "azure"]
    text = repr(config) + str(config)
    secrets = ("gh-secret-value", "gh-old-value", FORGEJO_SECRET, GITLAB_SIGNING_TOKEN, AZURE_HEADER_SECRET)
    for secret in secrets:
        assert secret not in text
    assert repr(GITLAB_KEY)[2:-1] not in text


# --- each arm's steps ---------------------------------------------------------------------------------


def test_only_actionable_events_are_stored() -> None:
    assert frozenset({"issues", "issue_comment", "pull_request", "pull_request_review"}) == GITHUB_EVENTS
    assert {"issues", "issue_comment", "pull_request", "pull_request_approved"} <= FORGEJO_EVENTS
    assert {"issue", "merge_request", "note"} == GITLAB_OBJECT_KINDS
    assert "workitem.updated" in AZURE_EVENT_TYPES
    for never in ("ping", "push", "create", "release", "repository", "wiki", "git.push", "build.complete"):
        assert never not in GITHUB_EVENTS | FORGEJO_EVENTS | GITLAB_OBJECT_KINDS | AZURE_EVENT_TYPES


def test_github_ping_is_verified_then_not_stored() -> None:
    gh = _arm({"WEBHOOK_SECRET": "s"}, "github")
    _, matched, verdict = _run(gh, github_headers(BODY, "ping", "d-1", secret="s"))
    assert (matched, verdict) == (0, Classification("ping", "d-1", False))


@pytest.mark.parametrize("sender", ["forgejo", "gitea"])
def test_forgejo_and_gitea_deliveries_verify(sender: str) -> None:
    arm = _arm(forgejo_env(), "forgejo")
    head, matched, verdict = _run(arm, forgejo_headers(BODY, "issues", "fj-1", sender=sender))
    assert (matched, verdict) == (0, Classification("issues", "fj-1", True))
    assert head.credential[0] == ""  # the bare-hex header was the one checked


def test_forgejo_github_compatible_headers_alone_verify() -> None:
    arm = _arm(forgejo_env(), "forgejo")
    headers = github_headers(BODY, "pull_request", "gh-style", secret=FORGEJO_SECRET)
    assert _run(arm, headers)[1:] == (0, Classification("pull_request", "gh-style", True))


def test_forgejo_signature_is_not_rescued_by_another_header() -> None:
    arm = _arm(forgejo_env(), "forgejo")
    headers = forgejo_headers(BODY, "issues", "fj-1")
    headers["X-Forgejo-Signature"] = hmac_hex("wrong", BODY)  # Gitea's and GitHub's names still right
    assert _run(arm, headers)[1] is refusals.INVALID_SIGNATURE


def test_forgejo_event_comes_from_the_delivery_headers_family() -> None:
    arm = _arm(forgejo_env(), "forgejo")
    headers = forgejo_headers(BODY, "issues", "fj-1")
    headers["X-GitHub-Event"] = "push"
    assert _run(arm, headers)[2] == Classification("issues", "fj-1", True)
    del headers["X-Forgejo-Event"]  # Forgejo's delivery id without its event name
    head = arm.head("POST", CIMultiDict(headers), len(BODY))
    assert head.refusal is refusals.MISSING_EVENT_HEADERS


def test_forgejo_without_any_signature_is_missing_signature() -> None:
    arm = _arm(forgejo_env(), "forgejo")
    headers = {
        k: v for k, v in forgejo_headers(BODY, "issues", "fj-1").items() if "Signature" not in k
    }
    assert arm.head("POST", CIMultiDict(headers), len(BODY)).refusal is refusals.MISSING_SIGNATURE


def test_gitlab_signature_mode_routes_on_object_kind() -> None:
    arm = _arm(gitlab_signature_env(), "gitlab")
    body = b'{"object_kind":"merge_request"}'
    headers = gitlab_signature_headers(body, "msg-1", NOW_MS // 1000, event="Merge Request Hook")
    head, matched, verdict = _run(arm, headers, body)
    assert head.event == "Merge Request Hook"
    assert (matched, verdict) == (0, Classification("merge_request", "msg-1", True))
    push = b'{"object_kind":"push"}'
    headers = gitlab_signature_headers(push, "msg-2", NOW_MS // 1000, event="Issue Hook")
    assert _run(arm, headers, push)[2] == Classification("push", "msg-2", False)  # the header is not used


def test_gitlab_signature_mode_refuses_the_token_modes_header() -> None:
    arm = _arm(gitlab_signature_env(), "gitlab")
    headers = gitlab_token_headers("d-1", token=GITLAB_SIGNING_TOKEN)
    assert _run(arm, headers)[1] is refusals.MISSING_SIGNATURE


def test_gitlab_idempotency_key_is_the_delivery_but_not_the_signed_id() -> None:
    token = _arm(gitlab_token_env(), "gitlab")
    body = b'{"object_kind":"issue"}'
    assert _run(token, gitlab_token_headers("legacy-1", legacy_id=True), body)[2] == Classification(
        "issue", "legacy-1", True
    )
    signature = _arm(gitlab_signature_env(), "gitlab")
    headers = gitlab_signature_headers(body, "legacy-2", NOW_MS // 1000)
    headers["Idempotency-Key"] = headers.pop("webhook-id")
    assert _run(signature, headers, body)[1] is refusals.MISSING_SIGNATURE


def test_gitlab_token_mode_refuses_the_signature_modes_headers() -> None:
    arm = _arm({"GITLAB_WEBHOOK_MODE": "token", "GITLAB_WEBHOOK_SECRET": GITLAB_SIGNING_TOKEN}, "gitlab")
    body = b'{"object_kind":"issue"}'
    headers = gitlab_signature_headers(body, "d-1", NOW_MS // 1000)
    assert _run(arm, headers, body)[1] is refusals.MISSING_TOKEN
    other_token = gitlab_token_headers("d-1", token=GITLAB_TOKEN_SECRET)
    assert _run(arm, other_token, body)[1] is refusals.INVALID_TOKEN


def test_gitlab_previous_signing_key_matches_with_index_one() -> None:
    new_key = b"new signing key"
    env = {
        "GITLAB_WEBHOOK_MODE": "signature",
        "GITLAB_WEBHOOK_SECRET": base64.b64encode(new_key).decode(),  # whsec_ is optional
        "GITLAB_WEBHOOK_SECRET_PREVIOUS": GITLAB_SIGNING_TOKEN,
    }
    arm = _arm(env, "gitlab")
    body = b'{"object_kind":"note"}'
    assert _run(arm, gitlab_signature_headers(body, "m", NOW_MS // 1000, key=new_key), body)[1] == 0
    assert _run(arm, gitlab_signature_headers(body, "m", NOW_MS // 1000), body)[1] == 1


def test_azure_basic_mode_reads_the_delivery_from_the_body() -> None:
    arm = _arm(azure_basic_env(), "azure")
    body = b'{"id":"0b1d","eventType":"git.pullrequest.created","notificationId":4}'
    head, matched, verdict = _run(arm, azure_basic_headers(), body)
    assert (head.event, head.delivery) == (None, None)
    assert (matched, verdict) == (0, Classification("git.pullrequest.created", "0b1d", True))
    push = b'{"id":"0b1e","eventType":"git.push"}'
    assert _run(arm, azure_basic_headers(), push)[2] == Classification("git.push", "0b1e", False)
    assert _run(arm, azure_basic_headers(), b'{"eventType":"git.push"}')[2] is (
        refusals.AZURE_MISSING_DELIVERY_ID
    )
    assert _run(arm, azure_basic_headers(), b'{"id":"a b"}')[2] is refusals.AZURE_TABLE.invalid_delivery_id
    assert _run(arm, azure_basic_headers(), b"[]")[2] is refusals.AZURE_TABLE.invalid_json


def test_azure_modes_never_accept_each_others_credential() -> None:
    basic = _arm(azure_basic_env(), "azure")
    in_header = azure_header_headers(secret=AZURE_BASIC_SECRET)
    assert _run(basic, in_header)[1] is refusals.AZURE_MISSING_CREDENTIAL
    header = _arm(azure_header_env(), "azure")
    body = b'{"id":"x","eventType":"workitem.updated"}'
    assert _run(header, azure_header_headers(), body)[1] == 0
    any_case = {"Content-Type": "application/json", AZURE_HEADER_NAME.lower(): AZURE_HEADER_SECRET}
    assert _run(header, any_case, body)[1] == 0
    assert _run(header, azure_header_headers(name="X-Other"), body)[1] is refusals.AZURE_MISSING_CREDENTIAL
    assert _run(header, azure_basic_headers(secret=AZURE_HEADER_SECRET), body)[1] is (
        refusals.AZURE_MISSING_CREDENTIAL
    )


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
