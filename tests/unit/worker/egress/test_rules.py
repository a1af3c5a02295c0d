"""What a job may reach with egress on: the operator's list, its forges, its model endpoint; and the proxy
rules and job variables that say so."""

from __future__ import annotations

from pidispatch.common.egresssettings import Destination
from pidispatch.common.settings import load_settings
from pidispatch.forges.config import load_forge_config
from pidispatch.worker.egress.rules import (
    destinations,
    job_env,
    proxy_name,
    squid_rules,
    unreachable_providers,
    url_destination,
)


def test_a_urls_port_is_kept_only_when_it_names_one() -> None:
    assert url_destination("https://api.github.com") == Destination("api.github.com")
    assert url_destination("http://172.17.0.1:43123/v1") == Destination("172.17.0.1", 43123)
    assert url_destination("http://[fd00::1]:8080") == Destination("fd00::1", 8080)
    assert url_destination("not a url") is None


def test_a_job_reaches_its_forges_and_its_providers_public_endpoint() -> None:
    env = {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "x" * 40, "GITLAB_TOKEN": "glpat-" + "x" * 20,
           "PI_ALLOWED_MODELS": "anthropic/claude-sonnet-4,openai/gpt-5"}
    settings = load_settings(env)
    got = destinations(settings, load_forge_config(env).job_urls())
    assert [str(d) for d in got] == ["api.github.com", "github.com", "gitlab.com", "api.anthropic.com",
                                     "api.openai.com"]


def test_a_model_base_url_replaces_the_public_endpoints_and_the_operators_list_comes_first() -> None:
    settings = load_settings({"PI_MODEL_BASE_URL": "http://172.17.0.1:43123/v1"})
    got = destinations(settings, ())
    assert got == (Destination("172.17.0.1", 43123),)
    assert unreachable_providers(settings) == ()


def test_a_provider_with_no_known_endpoint_is_named() -> None:
    assert unreachable_providers(load_settings({"PI_PROVIDER": "ollama"})) == ("ollama",)


def test_each_destination_is_one_allow_rule_and_a_port_narrows_it() -> None:
    rules = squid_rules([Destination(".github.com"), Destination("172.17.0.1", 43123)])
    assert rules.splitlines() == [
        "acl pd_allow_1 dstdomain -n .github.com",
        "http_access allow pd_allow_1",
        "acl pd_allow_2 dst -n 172.17.0.1",
        "acl pd_allow_2_port port 43123",
        "http_access allow pd_allow_2 pd_allow_2_port",
    ]
    assert squid_rules([]) == ""  # the image denies everything after the rules


def test_the_proxy_is_named_by_its_host_deployment_rules_and_image() -> None:
    a = proxy_name("w1", "i1", "acl x dst 1.2.3.4", "pi-egress:latest")
    assert a == proxy_name("w1", "i1", "acl x dst 1.2.3.4", "pi-egress:latest")
    assert a.startswith("pd-egress-w1-")
    assert a != proxy_name("w2", "i1", "acl x dst 1.2.3.4", "pi-egress:latest")
    assert a != proxy_name("w1", "i2", "acl x dst 1.2.3.4", "pi-egress:latest")
    assert a != proxy_name("w1", "i1", "acl x dst 1.2.3.5", "pi-egress:latest")
    assert a != proxy_name("w1", "i1", "acl x dst 1.2.3.4", "pi-egress:2")


def test_the_job_gets_both_cases_of_the_proxy_variables() -> None:
    env = job_env("pd-egress-abc")
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://pd-egress-abc:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    assert env["NODE_USE_ENV_PROXY"] == "1"
