"""The bot-loop guard cannot be off: rules for a forge whose own account the router cannot know are refused
at start, and a reload that adds such rules is refused too."""

from __future__ import annotations

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.identity import require_knowable, unguarded
from pidispatch.triggers.loader import parse_triggers
from pidispatch.triggers.lookup import SelfIds

GITHUB_RULE = ('{"triggers": [{"on": {"type": "comment", "phrase": "@pi"}, '
               '"run": {"kind": "github", "flow": "fix"}}]}')


def test_rules_for_a_forge_without_credentials_or_its_own_id_are_refused_naming_both_fixes() -> None:
    with pytest.raises(ConfigError) as err:
        require_knowable(parse_triggers(GITHUB_RULE), load_forge_config({}))
    assert str(err.value) == (
        "triggers.json has github rules but the harness's own GitHub account cannot be known, so its own "
        "comments could start jobs; set GITHUB_SELF_ID, or GITHUB_AUTH_SOURCE (gh, pat or app) and its "
        "credentials"
    )


@pytest.mark.parametrize("env", [{"GITHUB_SELF_ID": "4242"},
                                 {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": "ghp_x"}])
def test_an_explicit_id_or_credentials_to_look_it_up_are_enough(env: dict[str, str]) -> None:
    require_knowable(parse_triggers(GITHUB_RULE), load_forge_config(env))


def test_a_forge_without_rules_needs_no_identity() -> None:
    require_knowable(parse_triggers('{"triggers": []}'), load_forge_config({}))


def test_a_reload_is_unguarded_for_forges_whose_identity_was_not_resolved() -> None:
    rules = parse_triggers(GITHUB_RULE)
    assert unguarded(rules, SelfIds()) == ["github"]
    assert unguarded(rules, SelfIds(ids={"github": 4242})) == []
