"""The router's side of the forge registry: every forge has a ROUTE, the generic modules load none of
them on import, and what they read through it (credentials, explicit identities, questions) is each
forge's own."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.forges import FORGES
from pidispatch.forges import route as router_forge
from pidispatch.forges.authority import Authority
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.http import create_http
from pidispatch.forges.identity import explicit_self_ids
from pidispatch.forges.route import route_of, token_sources
from pidispatch.router.commands import require_credentials
from pidispatch.triggers.loader import parse_triggers
from pidispatch.triggers.lookup import Question, SelfIds

# Generic router modules: importing them must load no forge's router parts (those load on first use).
GENERIC = (
    "forges.pipeline", "forges.authority", "forges.identity", "triggers.loader", "triggers.runfields",
    "triggers.jobs", "console.events", "triggers.explain", "router.commands", "triggers.rules",
    "triggers.lookup", "router.service",
)
FORGE_PARTS = ("route", "match", "payload", "authority", "identity")


def test_every_forge_has_its_route() -> None:
    members = [m for m in vars(router_forge.RouterForge) if not m.startswith("_")]
    members += list(router_forge.RouterForge.__annotations__)
    for forge in FORGES:
        route = route_of(forge)
        assert route is import_module(f"{forge.package}.route").ROUTE
        assert route.name == forge.name
        assert all(hasattr(route, m) for m in members), forge.name


def test_the_generic_modules_load_no_forge_part() -> None:
    imports = "; ".join(f"import pidispatch.{m}" for m in GENERIC)
    parts = [f"{f.package}.{p}" for f in FORGES for p in FORGE_PARTS]
    code = f"import sys; {imports}; print(sorted(m for m in {parts!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_explicit_identities_come_from_each_forge_block() -> None:
    env = {"GITHUB_SELF_ID": "101", "GITLAB_SELF_ID": "102", "GITLAB_TOKEN": "glpat-test",
           "FORGEJO_BOT_ID": "103", "FORGEJO_URL": "https://fj.example", "FORGEJO_TOKEN": "fj-test",
           "AZURE_SELF_EMAIL": "Bot@Example.com", "AZURE_ORG_URL": "https://dev.azure.com/fabrikam",
           "AZURE_TOKEN": "az-test"}
    assert explicit_self_ids(load_forge_config(env)) == SelfIds(
        ids={
            "github": 101,
            "gitlab": 102,
            "forgejo": 103,
            "azure": (None, "bot@example.com"),
        },
    )
    assert explicit_self_ids(load_forge_config({})) == SelfIds()


async def test_only_a_configured_forge_with_a_token_source_has_one() -> None:
    http = create_http()
    try:
        assert token_sources(load_forge_config({}), http) == {}
        env = {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "ghp_test", "GITLAB_TOKEN": "glpat-test"}
        sources = token_sources(load_forge_config(env), http)
        assert list(sources) == ["github"]
        assert isinstance(sources["github"], GithubAuth)
    finally:
        await http.close()


async def test_a_question_is_answered_by_its_own_forge_only() -> None:
    http = create_http()
    try:
        authority = Authority(load_forge_config({}), {}, http)
        with pytest.raises(TypeError):
            await authority.ask("not a question")  # type: ignore[arg-type]

        class Stray(Question, frozen=True):
            forge = "local"

        with pytest.raises(TypeError):
            await authority.ask(Stray())
    finally:
        await http.close()


def test_credentials_refusals_name_the_always_asking_forges_first() -> None:
    rules = parse_triggers(
        '{"triggers": ['
        '{"on": {"type": "issue", "action": ["closed"]}, "run": {"kind": "github", "flow": "f"}},'
        '{"on": {"type": "label", "any": ["x"]}, "run": {"kind": "gitlab", "flow": "f"}}]}'
    )
    with pytest.raises(ConfigError, match="has gitlab rules"):
        require_credentials(rules, load_forge_config({}))
    github_only = parse_triggers(
        '{"triggers": [{"on": {"type": "label", "any": ["x"]}, "run": {"kind": "github", "flow": "f"}}]}'
    )
    require_credentials(github_only, load_forge_config({}))  # a label rule asks GitHub nothing


@pytest.mark.parametrize(("kind", "repo", "pull", "number", "ref"), [
    ("github", "acme/app", False, 7, "acme/app#7"),
    ("github", "acme/app", True, 7, "acme/app#7"),
    ("gitlab", "group/sub/proj", True, 3, "group/sub/proj!3"),
    ("gitlab", "group/sub/proj", False, 3, "group/sub/proj#3"),
    ("azure", "My Project/repo", True, 1, "My%20Project/repo!1"),
    ("github", "acme/app", False, None, "acme/app"),
    ("github", "acme/app", False, True, "acme/app"),
    ("github", "acme/app", False, "7", "acme/app"),
    ("github", "acme/app", False, 7.0, "acme/app#7"),  # the filter's reading, never #7.0
    ("github", "acme/app", False, 7.5, "acme/app"),
    ("github", "<script>", False, 7, None),
    ("github", "a\nb", False, 7, None),
    ("github", None, False, 7, None),
    ("github", "x" * 201, False, 7, None),
])
def test_a_delivery_target_passes_only_a_path_shaped_name_and_an_integer(
    kind: str, repo: object, pull: bool, number: object, ref: str | None
) -> None:
    assert router_forge.delivery_target(kind, repo, pull, number) == ref
