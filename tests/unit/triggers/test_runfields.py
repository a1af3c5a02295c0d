"""The ``run`` fields of triggers.json: what loads, what each refusal names, and the value grammars behind
them (model references, dollar amounts, ``after`` instants)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from pidispatch.common.envnames import RESERVED_SECRET_NAMES
from pidispatch.common.errors import ConfigError
from pidispatch.triggers.loader import Rules, parse_triggers
from pidispatch.triggers.modelref import split_model_entry, usd_micros
from pidispatch.triggers.rules import RunSpec
from pidispatch.triggers.runfields import BACKENDS, REFUSED_RUN, REFUSED_RUN_TRUE, RUN_KEYS, near_miss
from pidispatch.triggers.waitfor import after_instant_ms

AFTER = "2026-09-01T09:00:00Z"


def label(run: dict[str, Any] | None = None, kind: str = "github", **on: Any) -> dict[str, Any]:
    return {"on": {"type": "label", "any": ["x"], **on}, "run": {"kind": kind, "flow": "fix", **(run or {})}}


def command(run: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"on": {"type": "label", "any": ["x"]},
            "run": {"kind": "github", "command": "check", **(run or {})}}


def cron(run: dict[str, Any] | None = None, **on: Any) -> dict[str, Any]:
    base = {"kind": "local", "folder": "/srv/app", "flow": "tidy", "task": "tidy up"}
    return {"on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *", **on},
            "run": {**base, **(run or {})}}


def parse(*entries: Any) -> Rules:
    return parse_triggers(json.dumps({"triggers": list(entries)}))


def spec(run: dict[str, Any], kind: str = "github") -> RunSpec:
    return parse(label(run, kind)).group(kind).label[0].run


def refusal(entry: Any) -> str:
    with pytest.raises(ConfigError) as err:
        parse(entry)
    message = str(err.value)
    assert message.startswith("PI_TRIGGERS_FILE triggers.json: triggers[0].")
    assert "\n" not in message
    return message


# --- acceptance -------------------------------------------------------------------------------------


def test_a_rule_with_every_field_set_loads_and_carries_each_into_run_spec() -> None:
    run = {
        "image": "ghcr.io/acme/agent:1", "backend": "local",
        "excludeTools": ["bash", "powershell"], "provider": "OpenAI", "model": "gpt-X", "maxTurns": 10,
        "models": ["OpenAI/gpt-X", "anthropic/claude-sonnet"], "maxCostUsd": "0.50",
        "instructions": "Be brief.", "secrets": {"STRIPE_KEY": "op://vault/stripe"}, "secretsProfile": "prod",
        "repository": "widgets", "waitFor": [{"after": AFTER}, {"profile": "jira"}],
        "packages": False, "resume": False,
    }
    assert spec(run, "azure") == RunSpec(
        flow="fix", image="ghcr.io/acme/agent:1", backend="local",
        exclude_tools=("bash", "powershell"), provider="OpenAI", model="gpt-X", max_turns=10,
        models=("OpenAI/gpt-X", "anthropic/claude-sonnet"), max_cost_usd="0.50",
        instructions="Be brief.", secrets={"STRIPE_KEY": "op://vault/stripe"},
        secrets_profile="prod", repository="widgets", wait_for=({"after": AFTER}, {"profile": "jira"}),
    )
    # Every accepted key of a webhook rule's run is set above (kind, flow, replicas and command aside).
    assert set(RUN_KEYS) - set(run) == {"kind", "flow", "command", "replicas"}


def test_replicas_are_carried_on_their_own_rules() -> None:
    assert spec({"replicas": 3}).replicas == 3
    assert spec({"replicas": 2.0}).replicas == 2


def test_a_command_rule_carries_the_command_and_no_flow() -> None:
    rules = parse(command({"replicas": 2}))
    assert rules.group("github").label[0].run == RunSpec(command="check", replicas=2)


def test_null_is_absent_for_the_model_fields() -> None:
    nulls = {"provider": None, "model": None, "maxTurns": None, "models": None, "maxCostUsd": None}
    assert spec(nulls) == RunSpec(flow="fix")


@pytest.mark.parametrize("value", ["1000000", "0.000001", 5, 0.5, 1e2, 0.000005, "12.345678"])
def test_max_cost_usd_accepts_plain_decimals_and_carries_them_as_written(value: Any) -> None:
    assert spec({"maxCostUsd": value}).max_cost_usd == value


def test_models_may_omit_the_rule_model_when_provider_or_model_comes_from_the_deployment() -> None:
    assert spec({"model": "gpt-x", "models": ["anthropic/claude"]}).models == ("anthropic/claude",)


def test_instructions_of_exactly_2000_characters_load() -> None:
    assert spec({"instructions": "x" * 2000}).instructions == "x" * 2000


def test_the_one_known_backend_is_local() -> None:
    assert BACKENDS == {"local": False}


def test_reserved_names_include_minted_tokens_forge_hosts_and_container_variables() -> None:
    assert {"GITHUB_TOKEN", "GH_TOKEN", "GITLAB_HOST", "PI_FLOW", "PI_COMMAND", "PI_JOB_ID",
            "HTTPS_PROXY"} <= RESERVED_SECRET_NAMES


@pytest.mark.parametrize("key", ["timeout", "fl\u00f6w", "modelling", "maxTokens", "note"])
def test_unrelated_unknown_keys_are_refused(key: str) -> None:
    assert f"triggers[0].run.{key} is not a field; " in refusal(label({key: 1}))


@pytest.mark.parametrize(("key", "value"), [("skillsDir", "/srv/skills")])
def test_each_run_field_no_worker_acts_on_is_refused_once_its_value_is_valid(key: str, value: Any) -> None:
    assert refusal(label({key: value})) == (
        f"PI_TRIGGERS_FILE triggers.json: triggers[0].run.{key} is not supported by pi-dispatch yet "
        f"({REFUSED_RUN[key]}); remove it"
    )


@pytest.mark.parametrize("key", sorted(REFUSED_RUN_TRUE))
def test_a_switch_whose_false_changes_nothing_here_loads_false_and_leaves_no_trace(key: str) -> None:
    # false is what every job here gets already: the job must not differ from one without the key.
    assert spec({key: False}) == spec({})
    assert parse(cron({key: False})).cron[0].run == parse(cron()).cron[0].run


@pytest.mark.parametrize("key", sorted(REFUSED_RUN_TRUE))
def test_a_switch_whose_true_no_worker_acts_on_is_refused_naming_false_as_accepted(key: str) -> None:
    assert refusal(label({key: True})) == (
        f"PI_TRIGGERS_FILE triggers.json: triggers[0].run.{key} true is not supported by pi-dispatch yet "
        f"({REFUSED_RUN_TRUE[key]}); accepted: false or absent"
    )


@pytest.mark.parametrize("value", ["", [], 0, None, "false"])
def test_a_switch_that_is_not_a_boolean_is_malformed_not_a_no_op(value: Any) -> None:
    # The original's own rule (strict boolean): an empty string or list is not false there either.
    assert refusal(label({"packages": value})).endswith("triggers[0].run.packages must be true or false")


# --- refusals: every run field ----------------------------------------------------------------------

RUN_REFUSALS: list[tuple[str, Any, str]] = [
    # flow / command
    ("flow_and_command", label({"command": "check"}), "run has both flow and command; accepted: exactly one"),
    ("neither_flow_nor_command", {"on": {"type": "label", "any": ["x"]}, "run": {"kind": "github"}},
     "run.flow must be a non-empty string (or use run.command)"),
    ("flow_null", label({"flow": None}), "run.flow must be a non-empty string"),
    ("flow_uppercase", label({"flow": "Fix"}), "run.flow 'Fix' is refused; accepted: 1-64 of a-z 0-9 - _"),
    ("flow_trailing_dash", label({"flow": "fix-"}), "run.flow"),
    ("flow_65_chars", label({"flow": "a" * 65}), "run.flow"),
    ("flow_colon", label({"flow": "a:b"}), "run.flow"),
    ("flow_number", label({"flow": 7}), "run.flow"),
    ("command_empty", command({"command": ""}), "run.command must be a non-empty string"),
    ("command_leading_slash", command({"command": "/wf"}), "run.command"),
    ("command_padded", command({"command": " wf"}), "run.command"),
    ("command_tab", command({"command": "wf\targ"}), "run.command"),
    ("command_newline", command({"command": "wf\nrm"}), "run.command"),
    ("command_del", command({"command": "wf\x7f"}), "run.command"),
    ("command_beside_instructions", command({"instructions": "hi"}),
     "run.instructions is refused beside run.command"),
    ("command_beside_resume_true", command({"resume": True}),
     "run.resume true is refused beside run.command"),
    # simple fields
    ("packages_string", label({"packages": "false"}), "run.packages must be true or false"),
    ("image_leading_dash", label({"image": "-evil"}), "run.image"),
    ("image_padded", label({"image": " img"}), "run.image"),
    ("image_c1_control", label({"image": "img\u0085"}), "run.image"),
    ("image_space", label({"image": "a b"}), "run.image"),
    ("image_empty", label({"image": ""}), "run.image"),
    ("image_number", label({"image": 7}), "run.image"),
    ("skills_dir_padded", label({"skillsDir": " /x"}), "run.skillsDir"),
    ("skills_dir_blank", label({"skillsDir": "  "}), "run.skillsDir"),
    ("instructions_blank", label({"instructions": " \n "}), "run.instructions"),
    ("instructions_2001", label({"instructions": "x" * 2001}),
     "run.instructions must be a non-blank string of at most 2000 characters"),
    # The limit counts UTF-16 code units: 1001 emoji are 2002 of them.
    ("instructions_2002_utf16_units", label({"instructions": "\U0001f600" * 1001}), "run.instructions"),
    ("resume_number", label({"resume": 1}), "run.resume must be true or false"),
    # repository
    ("repository_on_github", label({"repository": "widgets"}),
     "run.repository is refused here; accepted: only on azure label and comment triggers"),
    ("repository_on_azure_pr", {"on": {"type": "pull_request", "action": ["created"]},
                                "run": {"kind": "azure", "flow": "x", "repository": "w"}}, "run.repository"),
    ("repository_missing_on_azure_label", label(kind="azure"), "run.repository is required"),
    ("repository_missing_on_azure_comment", {"on": {"type": "comment", "phrase": "@pi"},
                                             "run": {"kind": "azure", "flow": "x"}},
                                              "run.repository is required"),
    ("repository_with_slash", label({"repository": "a/b"}, "azure"),
     "run.repository must be a repository name"),
    ("repository_padded", label({"repository": "w "}, "azure"), "run.repository"),
    # replicas
    ("replicas_1", label({"replicas": 1}), "run.replicas must be an integer from 2 to 3"),
    ("replicas_4", label({"replicas": 4}), "run.replicas must be an integer from 2 to 3"),
    ("replicas_string", label({"replicas": "2"}), "run.replicas"),
    ("replicas_bool", label({"replicas": True}), "run.replicas"),
    ("replicas_fraction", label({"replicas": 2.5}), "run.replicas"),
    ("replicas_beside_resume", label({"replicas": 2, "resume": True}),
     "run.replicas is refused beside run.resume true"),
    # secrets
    ("secrets_empty", label({"secrets": {}}), "run.secrets must be an object of 1 to 16 references"),
    ("secrets_17", label({"secrets": {f"K{i}": "ref" for i in range(17)}}), "run.secrets"),
    ("secrets_list", label({"secrets": ["K"]}), "run.secrets"),
    ("secrets_leading_digit", label({"secrets": {"1KEY": "ref"}}), "run.secrets name '1KEY' is refused"),
    ("secrets_dash_name", label({"secrets": {"A-B": "ref"}}), "run.secrets name 'A-B'"),
    ("secrets_equals_name", label({"secrets": {"A=B": "ref"}}), "run.secrets name"),
    ("secrets_minted_token", label({"secrets": {"GITHUB_TOKEN": "ref"}}), "run.secrets name 'GITHUB_TOKEN'"),
    ("secrets_forge_host", label({"secrets": {"FORGEJO_HOST": "ref"}}), "run.secrets name 'FORGEJO_HOST'"),
    ("secrets_container_var", label({"secrets": {"PI_FLOW": "ref"}}), "run.secrets name 'PI_FLOW'"),
    ("secrets_proto", label({"secrets": {"__proto__": "ref"}}), "run.secrets name '__proto__'"),
    ("secrets_value_dash", label({"secrets": {"KEY": "-ref"}}),
     "run.secrets.KEY must be a non-blank reference"),
    ("secrets_value_padded", label({"secrets": {"KEY": "ref "}}), "run.secrets.KEY"),
    ("secrets_value_blank", label({"secrets": {"KEY": " "}}), "run.secrets.KEY"),
    ("secrets_value_number", label({"secrets": {"KEY": 7}}), "run.secrets.KEY"),
    ("secrets_beside_resume", label({"secrets": {"KEY": "ref"}, "resume": True}),
     "run.secrets is refused beside run.resume true"),
    ("profile_without_secrets", label({"secretsProfile": "prod"}), "run.secretsProfile requires run.secrets"),
    ("profile_charset", label({"secrets": {"K": "r"}, "secretsProfile": "pr od"}),
     "run.secretsProfile must be"),
    ("profile_comma", label({"secrets": {"K": "r"}, "secretsProfile": "a,b"}), "run.secretsProfile"),
    ("profile_empty", label({"secrets": {"K": "r"}, "secretsProfile": ""}), "run.secretsProfile"),
    # waitFor (combinations before shape)
    ("wait_for_beside_once", {"on": {"type": "issue", "action": ["closed"], "number": 4, "once": True},
                              "run": {"kind": "github", "flow": "x", "waitFor": "garbage"}},
     "run.waitFor is refused beside on.once true"),
    ("wait_for_beside_replicas", label({"replicas": 2, "waitFor": "garbage"}),
     "run.waitFor is refused beside run.replicas"),
    ("wait_for_not_array", label({"waitFor": {"after": AFTER}}), "run.waitFor must be an array of 1 to 4"),
    ("wait_for_empty", label({"waitFor": []}), "run.waitFor must be an array"),
    ("wait_for_five", label({"waitFor": [{"profile": f"p{i}"} for i in range(5)]}), "run.waitFor"),
    ("wait_for_condition_string", label({"waitFor": ["jira"]}), "run.waitFor[0] must be an object"),
    ("wait_for_condition_empty", label({"waitFor": [{}]}),
     "run.waitFor[0] must be an object with exactly one"),
    ("wait_for_condition_two_keys", label({"waitFor": [{"after": AFTER, "profile": "jira"}]}),
     "run.waitFor[0]"),
    ("wait_for_exclusive", label({"waitFor": [{"exclusive": True}]}),
     "run.waitFor[0] exclusive is no longer"),
    ("wait_for_unknown_condition", label({"waitFor": [{"profile": "a"}, {"until": AFTER}]}),
     "run.waitFor[1] has an unsupported condition; accepted: after, profile"),
    ("wait_for_second_after", label({"waitFor": [{"after": AFTER}, {"after": AFTER}]}),
     'run.waitFor[1] is a second "after"'),
    ("wait_for_after_no_zone", label({"waitFor": [{"after": "2026-09-01T09:00:00"}]}),
     "run.waitFor[0].after must be an ISO-8601 instant carrying its own zone"),
    ("wait_for_after_date_only", label({"waitFor": [{"after": "2026-09-01Z"}]}), "run.waitFor[0].after"),
    ("wait_for_after_hour_24", label({"waitFor": [{"after": "2026-09-01T24:00:00Z"}]}),
     "run.waitFor[0].after"),
    ("wait_for_after_second_60", label({"waitFor": [{"after": "2026-09-01T09:00:60Z"}]}),
     "run.waitFor[0].after"),
    ("wait_for_after_feb_31", label({"waitFor": [{"after": "2026-02-31T09:00:00Z"}]}),
     "run.waitFor[0].after"),
    ("wait_for_after_feb_29_non_leap", label({"waitFor": [{"after": "2026-02-29T09:00Z"}]}),
     "run.waitFor[0].after"),
    ("wait_for_after_month_13", label({"waitFor": [{"after": "2026-13-01T09:00:00Z"}]}),
     "run.waitFor[0].after"),
    ("wait_for_after_offset_25h", label({"waitFor": [{"after": "2026-09-01T09:00:00+25:00"}]}),
     "run.waitFor[0].after"),
    ("wait_for_after_arabic_digits", label({"waitFor": [{"after": "\u0662026-09-01T09:00:00Z"}]}),
     "run.waitFor[0].after"),
    ("wait_for_after_number", label({"waitFor": [{"after": 1_700_000_000}]}), "run.waitFor[0].after"),
    ("wait_for_profile_charset", label({"waitFor": [{"profile": "ji ra"}]}), "run.waitFor[0].profile"),
    ("wait_for_profile_empty", label({"waitFor": [{"profile": ""}]}), "run.waitFor[0].profile"),
    ("wait_for_profile_duplicate", label({"waitFor": [{"profile": "jira"}, {"profile": "jira"}]}),
     "run.waitFor[1].profile repeats an earlier profile"),
    # backend
    ("backend_unknown", label({"backend": "remote-vendor"}),
     "run.backend must name a backend this build knows; accepted: local"),
    ("backend_charset", label({"backend": "lo cal"}), "run.backend"),
    ("backend_empty", label({"backend": ""}), "run.backend"),
    ("backend_number", label({"backend": 1}), "run.backend"),
    # excludeTools
    ("exclude_tools_empty", label({"excludeTools": []}), "run.excludeTools must be a non-empty array"),
    ("exclude_tools_string", label({"excludeTools": "bash"}), "run.excludeTools must be a non-empty array"),
    ("exclude_tools_unknown", label({"excludeTools": ["bash", "rm"]}),
     "run.excludeTools[1] must name a tool; accepted: read, bash, powershell, edit, write, grep, find, ls"),
    ("exclude_tools_not_string", label({"excludeTools": [7]}), "run.excludeTools[0]"),
    ("exclude_tools_duplicate", label({"excludeTools": ["bash", "bash"]}),
     "run.excludeTools[1] repeats an earlier tool"),
    ("tools_by_name", label({"tools": ["bash"]}), "run.tools is not a field; accepted: run.excludeTools"),
    ("no_tools_by_name", label({"noTools": True}), "run.noTools is not a field"),
    # model fields
    ("provider_space", label({"provider": "open ai"}), "run.provider must be a provider id of 1 to 64"),
    ("provider_slash", label({"provider": "a/b"}), "run.provider"),
    ("provider_leading_dash", label({"provider": "-x"}), "run.provider"),
    ("provider_65_chars", label({"provider": "a" * 65}), "run.provider"),
    ("provider_number", label({"provider": 7}), "run.provider"),
    ("provider_fullwidth", label({"provider": "\uff4fpenai"}), "run.provider"),
    ("model_kelvin_sign", label({"model": "\u212aimi"}), "run.model must be a model id"),
    ("model_leading_dot", label({"model": ".hidden"}), "run.model"),
    ("model_space", label({"model": "gpt x"}), "run.model"),
    ("model_empty", label({"model": ""}), "run.model"),
    ("max_turns_zero", label({"maxTurns": 0}), "run.maxTurns must be a positive integer"),
    ("max_turns_fraction", label({"maxTurns": 1.5}), "run.maxTurns"),
    ("max_turns_string", label({"maxTurns": "10"}), "run.maxTurns"),
    ("max_turns_bool", label({"maxTurns": True}), "run.maxTurns"),
    ("max_turns_unsafe", label({"maxTurns": 2**53}), "run.maxTurns"),
    ("models_empty", label({"models": []}), "run.models must have 1 to 16 entries"),
    ("models_17", label({"models": [f"p/m{i}" for i in range(17)]}), "run.models must have 1 to 16"),
    ("models_string", label({"models": "openai/gpt"}), "run.models must be an array"),
    ("models_no_slash", label({"models": ["gpt"]}), "run.models entry 1 must be provider/model"),
    ("models_empty_provider", label({"models": ["a/b", "/gpt"]}),
     "run.models entry 2 must be provider/model"),
    ("models_case_duplicate", label({"models": ["openai/GPT", "OpenAI/gpt"]}),
     "run.models entry 2 repeats an earlier entry"),
    ("models_missing_own_model", label({"provider": "openai", "model": "gpt", "models": ["openai/GPT"]}),
     "run.models does not list this trigger's own run.provider/run.model"),
    ("max_cost_zero", label({"maxCostUsd": "0"}), "run.maxCostUsd must be a dollar amount above 0"),
    ("max_cost_zero_number", label({"maxCostUsd": 0}), "run.maxCostUsd"),
    ("max_cost_negative", label({"maxCostUsd": -1}), "run.maxCostUsd"),
    ("max_cost_exponent_string", label({"maxCostUsd": "1e3"}), "run.maxCostUsd"),
    ("max_cost_seven_decimals", label({"maxCostUsd": "0.1234567"}), "run.maxCostUsd"),
    ("max_cost_tiny_float", label({"maxCostUsd": 1e-7}), "run.maxCostUsd"),
    ("max_cost_padded", label({"maxCostUsd": " 2"}), "run.maxCostUsd"),
    ("max_cost_leading_zero", label({"maxCostUsd": "01"}), "run.maxCostUsd"),
    ("max_cost_over_cap", label({"maxCostUsd": "1000000.01"}), "run.maxCostUsd"),
    ("max_cost_huge_float", label({"maxCostUsd": 1e21}), "run.maxCostUsd"),
    ("max_cost_bool", label({"maxCostUsd": True}), "run.maxCostUsd"),
    ("portfolio_on_webhook", label({"portfolio": True}), "run.portfolio is refused on webhook triggers"),
]


@pytest.mark.parametrize(("entry", "expected"), [(e, m) for _, e, m in RUN_REFUSALS],
                         ids=[case for case, _, _ in RUN_REFUSALS])
def test_each_run_refusal_names_the_entry_index_and_the_field(entry: Any, expected: str) -> None:
    assert expected in refusal(entry)


def test_refusals_never_echo_a_secret_reference_or_a_model_value() -> None:
    assert "op://vault" not in refusal(label({"secrets": {"KEY": " op://vault/x"}}))
    assert "sekrit-model" not in refusal(label({"model": "sekrit-model "}))


# --- near-miss keys: a misspelt or misplaced run key is refused naming the right one -----------------

NEAR_MISSES: list[tuple[str, str, str]] = [
    ("run", "waitfor", "run.waitFor"), ("run", "wait_for", "run.waitFor"), ("run", "WAIT-FOR", "run.waitFor"),
    ("on", "waitFor", "run.waitFor"),
    ("run", "backends", "run.backend"), ("run", "Backend", "run.backend"), ("on", "backend", "run.backend"),
    ("run", "b\u0430ckend", "run.backend"), ("run", "backe\u0578d", "run.backend"),
    ("run", "excludeTool", "run.excludeTools"), ("run", "exclude_tools", "run.excludeTools"),
    ("run", "excludedTools", "run.excludeTools"), ("on", "excludeTools", "run.excludeTools"),
    ("run", "\u0435xcludeTools", "run.excludeTools"),
    ("run", "modelId", "run.model"), ("run", "model_name", "run.model"), ("run", "Model", "run.model"),
    ("run", "m\u043edel", "run.model"), ("on", "model", "run.model"),
    ("run", "providers", "run.provider"), ("run", "providerId", "run.provider"),
    ("run", "allowedModels", "run.models"), ("run", "model_ids", "run.models"),
    ("run", "maxTurn", "run.maxTurns"), ("run", "max_turns", "run.maxTurns"),
    ("run", "max_cost", "run.maxCostUsd"), ("run", "maxCostUSD", "run.maxCostUsd"),
    ("on", "maxCostUsd", "run.maxCostUsd"),
]


@pytest.mark.parametrize(("where", "key", "meant"), NEAR_MISSES,
                         ids=[f"{w}.{k}" for w, k, _ in NEAR_MISSES])
def test_a_near_miss_key_is_refused_naming_the_field_it_means(where: str, key: str, meant: str) -> None:
    entry = label()
    entry[where][key] = []
    assert f"triggers[0].{where}.{key} is not a field; did you mean {meant}?" in refusal(entry)


def test_near_miss_compares_non_ascii_keys_as_subsequences_with_a_floor_of_four_letters() -> None:
    spellings = ("backend", "backends")
    assert near_miss("b\u0430\u0441kend", spellings) == "backend"  # two Cyrillic letters
    assert near_miss("\u0431\u0430\u0441k", spellings) is None  # one ASCII letter left: below the floor
    assert near_miss("fl\u00f6w", spellings) is None
    assert near_miss("back-end", spellings) == "backend"
    assert near_miss("backed", spellings) is None  # plain ASCII must match exactly
    assert near_miss("w\u0430itfor", ("waitfor",), homoglyphs=False) is None


# --- cron-only run rules -----------------------------------------------------------------------------

CRON_REFUSALS: list[tuple[str, Any, str]] = [
    ("folder_missing", cron({"folder": ""}), "run.folder must be a non-empty string"),
    ("task_missing_beside_flow", cron({"task": " "}), "run.task must be a non-empty string beside run.flow"),
    ("flow_missing", {"on": cron()["on"], "run": {"kind": "local", "folder": "/srv"}}, "run.flow"),
    ("command_beside_task", {"on": cron()["on"], "run": {"kind": "local", "folder": "/s", "command": "c",
                                                         "task": "t"}},
     "run.command is refused beside run.task"),
    ("instructions", cron({"instructions": "hi"}), "run.instructions is refused on a cron trigger"),
    ("resume_true", cron({"resume": True}), "run.resume true is refused on a cron trigger"),
    ("replicas", cron({"replicas": 2}), "run.replicas is refused on a cron trigger"),
    ("wait_for", cron({"waitFor": [{"after": AFTER}]}), "run.waitFor is refused on a cron trigger"),
    ("on_wait_for", cron(waitFor=[{"after": AFTER}]), "on.waitFor is not a field; did you mean run.waitFor?"),
    ("github_string", cron({"github": "true"}), "run.github must be true or false"),
    ("portfolio_string", cron({"portfolio": "yes"}), "run.portfolio must be true or false"),
    ("portfolio_beside_command", {"on": cron()["on"], "run": {"kind": "local", "folder": "/s", "command": "c",
                                                             "portfolio": True}},
     "run.portfolio true is refused beside run.command"),
    ("backend_unknown", cron({"backend": "podman"}), "run.backend"),
    ("secrets_reserved", cron({"secrets": {"GH_TOKEN": "x"}}), "run.secrets name 'GH_TOKEN'"),
    ("model_near_miss", cron({"modelId": "x"}), "run.modelId is not a field"),
]


@pytest.mark.parametrize(("entry", "expected"), [(e, m) for _, e, m in CRON_REFUSALS],
                         ids=[case for case, _, _ in CRON_REFUSALS])
def test_each_cron_run_refusal_names_the_entry_index_and_the_field(entry: Any, expected: str) -> None:
    assert expected in refusal(entry)


# --- value grammars -----------------------------------------------------------------------------------


def test_after_instant_reads_the_zone_and_fractional_seconds() -> None:
    utc = after_instant_ms(AFTER)
    assert utc == int(dt.datetime(2026, 9, 1, 9, tzinfo=dt.UTC).timestamp() * 1000)
    assert after_instant_ms("2026-09-01T11:00:00+02:00") == utc
    assert after_instant_ms("2026-09-01t09:00z") == utc
    assert after_instant_ms("2026-09-01T09:00:00.25Z") == utc + 250  # type: ignore[operator]
    assert after_instant_ms("2024-02-29T00:00:00-05:30") is not None
    assert after_instant_ms("2026-09-01T09:00:00") is None
    assert after_instant_ms("2026-04-31T09:00:00Z") is None


@pytest.mark.parametrize(
    ("value", "micros"),
    [("0.50", 500_000), ("1000000", 10**12), (5, 5_000_000), (1e2, 100_000_000), (0.000005, 5),
     ("0", None), (1e-7, None), ("1e3", None), (True, None), (None, None), ("1.", None), (".5", None)],
)
def test_usd_micros_reads_a_plain_decimal_exactly(value: Any, micros: int | None) -> None:
    assert usd_micros(value) == micros


def test_a_model_entry_splits_at_the_first_slash_and_keeps_its_case() -> None:
    assert split_model_entry("openrouter/~vendor/Model:tag") == ("openrouter", "~vendor/Model:tag")
    assert split_model_entry("cf/@cf/meta/llama") == ("cf", "@cf/meta/llama")
    assert split_model_entry("a b/c") is None and split_model_entry("noslash") is None
