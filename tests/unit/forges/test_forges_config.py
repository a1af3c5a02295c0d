from __future__ import annotations

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.forges.azure.config import derive_graph_url
from pidispatch.forges.config import ForgeConfig, load_forge_config

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAtest\n-----END RSA PRIVATE KEY-----\n"
GUID = "6c3a1b9e-1234-4abc-8def-0123456789ab"
APP = {
    "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12345", "GITHUB_APP_INSTALLATION_ID": "777",
    "GITHUB_APP_PRIVATE_KEY": PEM,
}


def test_an_empty_environment_configures_no_forge_and_keeps_the_defaults() -> None:
    config = load_forge_config({})
    assert config.configured_forges() == ()
    assert config.block("github").api_url == "https://api.github.com"
    assert config.block("gitlab").url == "https://gitlab.com"
    assert config.block("forgejo").url is None and config.block("azure").org_url is None
    assert config.identity_retry_s == 600
    assert config == ForgeConfig()


def test_github_enterprise_api_url_is_kept_without_trailing_slashes() -> None:
    config = load_forge_config({"GITHUB_API_URL": " https://ghe.example.com/api/v3// "})
    assert config.block("github").api_url == "https://ghe.example.com/api/v3"


def test_http_is_accepted_for_loopback_style_urls() -> None:
    config = load_forge_config({"GITLAB_URL": "http://127.0.0.1:8080", "GITLAB_TOKEN": "t"})
    assert config.block("gitlab").url == "http://127.0.0.1:8080"
    assert config.block("gitlab").configured


def test_pat_is_read_from_the_variable_github_pat_var_names() -> None:
    env = {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT_VAR": "MY_TOKEN", "MY_TOKEN": " tok "}
    config = load_forge_config(env)
    assert config.block("github").pat == Secret("tok")
    assert config.block("github").pat_var == "MY_TOKEN"
    assert config.configured_forges() == ("github",)


def test_gh_source_needs_nothing_else_and_a_stray_pat_is_ignored() -> None:
    config = load_forge_config({"GITHUB_AUTH_SOURCE": "gh", "GITHUB_PAT": "leftover"})
    assert config.block("github").configured and config.block("github").pat is None


def test_app_block_loads_and_a_one_line_pem_gets_real_newlines() -> None:
    config = load_forge_config({**APP, "GITHUB_APP_PRIVATE_KEY": PEM.replace("\n", "\\n")})
    gh = config.block("github")
    assert (gh.app_id, gh.installation_id) == ("12345", 777)
    assert gh.app_private_key is not None and gh.app_private_key.reveal() == PEM


def test_app_key_may_come_from_a_path() -> None:
    env = {k: v for k, v in APP.items() if k != "GITHUB_APP_PRIVATE_KEY"}
    config = load_forge_config({**env, "GITHUB_APP_PRIVATE_KEY_PATH": "/keys/app.pem"})
    assert config.block("github").app_private_key is None
    assert config.block("github").app_private_key_path == "/keys/app.pem"


def test_forgejo_and_azure_urls_are_trimmed_and_the_graph_host_derived() -> None:
    config = load_forge_config({
        "FORGEJO_URL": " https://codeberg.org/ ", "FORGEJO_TOKEN": "t", "FORGEJO_BOT_ID": "17",
        "AZURE_ORG_URL": "  https://dev.azure.com/fabrikam//  ", "AZURE_TOKEN": "p",
        "AZURE_SELF_ID": GUID, "AZURE_SELF_EMAIL": "Pi-Bot@Example.com",
    })
    assert config.block("forgejo").url == "https://codeberg.org" and config.block("forgejo").bot_id == 17
    assert config.block("azure").org_url == "https://dev.azure.com/fabrikam"
    assert config.block("azure").graph_url == "https://vssps.dev.azure.com/fabrikam"
    assert config.block("azure").self_email == "pi-bot@example.com"
    assert config.configured_forges() == ("forgejo", "azure")


@pytest.mark.parametrize(
    ("org", "graph"),
    [
        ("https://dev.azure.com/fabrikam", "https://vssps.dev.azure.com/fabrikam"),
        ("https://fabrikam.visualstudio.com", "https://fabrikam.vssps.visualstudio.com"),
        ("https://tfs.example.com/DefaultCollection", "https://tfs.example.com/DefaultCollection"),
    ],
)
def test_graph_url_derivation(org: str, graph: str) -> None:
    assert derive_graph_url(org) == graph


def test_azure_graph_url_can_be_overridden() -> None:
    config = load_forge_config({
        "AZURE_ORG_URL": "http://127.0.0.1:9000/fabrikam", "AZURE_TOKEN": "p",
        "AZURE_GRAPH_URL": "http://127.0.0.1:9001/fabrikam/",
    })
    assert config.block("azure").graph_url == "http://127.0.0.1:9001/fabrikam"


@pytest.mark.parametrize(("raw", "window"), [("30", 60), ("60", 60), ("900", 900)])
def test_identity_window_has_a_floor_of_sixty_seconds(raw: str, window: int) -> None:
    assert load_forge_config({"PD_IDENTITY_RETRY_SECONDS": raw}).identity_retry_s == window


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"GITHUB_API_URL": "ftp://example.com"}, "GITHUB_API_URL"),
        ({"GITHUB_API_URL": "https://user:pw@example.com"}, "GITHUB_API_URL"),
        ({"GITHUB_API_URL": "https://example.com/api?x=1"}, "GITHUB_API_URL"),
        ({"GITHUB_API_URL": "api.github.com"}, "GITHUB_API_URL"),
        ({"GITHUB_API_URL": "https://example.com:99999"}, "GITHUB_API_URL"),
        ({"GITHUB_AUTH_SOURCE": "token"}, "GITHUB_AUTH_SOURCE"),
        ({"GITHUB_AUTH_SOURCE": "pat"}, "GITHUB_PAT"),
        ({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "   "}, "GITHUB_PAT"),
        ({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT_VAR": "1BAD"}, "GITHUB_PAT_VAR"),
        ({"GITHUB_AUTH_SOURCE": "gh", "GITHUB_PAT_VAR": "X"}, "GITHUB_PAT_VAR"),
        ({"GITHUB_SELF_ID": "abc"}, "GITHUB_SELF_ID"),
        ({"GITHUB_SELF_ID": "0"}, "GITHUB_SELF_ID"),
        ({"GITHUB_SELF_ID": "-4"}, "GITHUB_SELF_ID"),
        ({**APP, "GITHUB_APP_ID": ""}, "GITHUB_APP_ID"),
        ({**APP, "GITHUB_APP_ID": "abc"}, "GITHUB_APP_ID"),
        ({**APP, "GITHUB_APP_INSTALLATION_ID": ""}, "GITHUB_APP_INSTALLATION_ID"),
        ({**APP, "GITHUB_APP_INSTALLATION_ID": "x7"}, "GITHUB_APP_INSTALLATION_ID"),
        ({**APP, "GITHUB_APP_PRIVATE_KEY": ""}, "GITHUB_APP_PRIVATE_KEY_PATH"),
        ({**APP, "GITHUB_APP_PRIVATE_KEY_PATH": "/k.pem"}, "GITHUB_APP_PRIVATE_KEY_PATH"),
        ({**APP, "GITHUB_APP_PRIVATE_KEY": "hunter2"}, "GITHUB_APP_PRIVATE_KEY"),
        ({"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "t", "GITHUB_APP_ID": "1"}, "GITHUB_APP_ID"),
        ({"GITHUB_APP_PRIVATE_KEY_PATH": "/k.pem"}, "GITHUB_APP_PRIVATE_KEY_PATH"),
        ({"GITLAB_SELF_ID": "5"}, "GITLAB_TOKEN"),
        ({"GITLAB_TOKEN": "t", "GITLAB_SELF_ID": "five"}, "GITLAB_SELF_ID"),
        ({"GITLAB_TOKEN": "t", "GITLAB_URL": "gitlab.example.com"}, "GITLAB_URL"),
        ({"FORGEJO_TOKEN": "t"}, "FORGEJO_URL"),
        ({"FORGEJO_URL": "https://codeberg.org"}, "FORGEJO_TOKEN"),
        ({"FORGEJO_BOT_ID": "17"}, "FORGEJO_URL"),
        ({"FORGEJO_URL": "https://codeberg.org", "FORGEJO_TOKEN": "t", "FORGEJO_BOT_ID": "0"},
         "FORGEJO_BOT_ID"),
        ({"FORGEJO_URL": "codeberg.org", "FORGEJO_TOKEN": "t"}, "FORGEJO_URL"),
        ({"AZURE_TOKEN": "p"}, "AZURE_ORG_URL"),
        ({"AZURE_ORG_URL": "https://dev.azure.com/x"}, "AZURE_TOKEN"),
        ({"AZURE_SELF_EMAIL": "bot@example.com"}, "AZURE_ORG_URL"),
        ({"AZURE_ORG_URL": "https://dev.azure.com/x", "AZURE_TOKEN": "p", "AZURE_SELF_ID": "bot"},
         "AZURE_SELF_ID"),
        ({"AZURE_ORG_URL": "https://dev.azure.com/x", "AZURE_TOKEN": "p", "AZURE_SELF_EMAIL": "a b"},
         "AZURE_SELF_EMAIL"),
        ({"AZURE_ORG_URL": "https://dev.azure.com/x", "AZURE_TOKEN": "p", "AZURE_GRAPH_URL": "vssps"},
         "AZURE_GRAPH_URL"),
        ({"PD_IDENTITY_RETRY_SECONDS": "ten"}, "PD_IDENTITY_RETRY_SECONDS"),
        ({"PD_IDENTITY_RETRY_SECONDS": "-5"}, "PD_IDENTITY_RETRY_SECONDS"),
        ({"PD_IDENTITY_RETRY_SECONDS": "999999"}, "PD_IDENTITY_RETRY_SECONDS"),
    ],
)
def test_refusals_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_forge_config(env)
    message = str(refused.value)
    assert variable in message
    assert "\n" not in message
    assert "hunter2" not in message


def test_secrets_never_appear_in_repr() -> None:
    config = load_forge_config({
        **APP, "GITLAB_TOKEN": "glpat-SECRET1",
        "FORGEJO_URL": "https://f.example", "FORGEJO_TOKEN": "SECRET2",
        "AZURE_ORG_URL": "https://dev.azure.com/x", "AZURE_TOKEN": "SECRET3",
    })
    text = repr(config) + str(config)
    for secret in ("SECRET1", "SECRET2", "SECRET3", "MIIEowIBAAKCAQEAtest"):
        assert secret not in text
    assert "Secret(***)" in text
    assert str(Secret("x")) == repr(Secret("x")) == "Secret(***)"


def test_require_refuses_a_forge_without_credentials() -> None:
    config = load_forge_config({"GITLAB_TOKEN": "t"})
    config.require("gitlab")
    with pytest.raises(ConfigError, match="FORGEJO_URL and FORGEJO_TOKEN"):
        config.require("forgejo")
