from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.router.match.predicate import Predicate
from pidispatch.router.triggers import FORGE_KINDS, RulesRef, load_triggers, parse_triggers

CRON = {"on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"},
        "run": {"kind": "local", "folder": "/srv/app", "task": "tidy", "flow": "tidy"}}
LABEL = {"on": {"type": "label", "any": ["pi:frontend"]}, "run": {"kind": "github", "flow": "frontend-fix"}}
COMMENT = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "triage"}}
PR = {"on": {"type": "pull_request", "action": ["opened", "labeled"], "any": ["pi:review"]},
      "run": {"kind": "github", "flow": "review"}}
PR_CLOSE = {"on": {"type": "pull_request", "action": ["closed"]}, "run": {"kind": "github", "flow": "deploy"}}
ISSUE = {"on": {"type": "issue", "action": ["closed"], "number": 40, "once": True},
         "run": {"kind": "github", "command": "release notes"}}


def text(*entries: Any) -> str:
    return json.dumps({"triggers": list(entries)})


def label(run: dict[str, Any] | None = None, **on: Any) -> dict[str, Any]:
    return {"on": {"type": "label", **(on or {"any": ["x"]})},
            "run": {"kind": "github", "flow": "fix", **(run or {})}}


def test_a_valid_file_keeps_raw_indices_and_groups_every_forge() -> None:
    rules = parse_triggers(text(CRON, LABEL, COMMENT, PR, PR_CLOSE, ISSUE))
    assert rules.count == 6
    assert [c.index for c in rules.cron] == [0]
    assert [r.index for r in rules.github.label] == [1]
    assert rules.github.label[0].predicate == Predicate(any=("pi:frontend",))
    assert rules.github.comment is not None and rules.github.comment.index == 2
    assert [r.index for r in rules.github.pull_request] == [3]
    assert rules.github.pull_request[0].actions == frozenset({"opened", "labeled"})
    assert [r.index for r in rules.github.pr_close] == [4]
    assert [r.index for r in rules.github.issue] == [5]
    for kind in FORGE_KINDS:
        assert rules.group(kind) is not None
    assert rules.gitlab.label == () and rules.gitlab.comment is None


def test_known_flows_come_from_webhook_flow_rules_only() -> None:
    rules = parse_triggers(text(CRON, LABEL, COMMENT, ISSUE))
    # cron's flow and the command rule add nothing.
    assert rules.known_flows == frozenset({"frontend-fix", "triage"})


def test_run_fields_are_carried_on_the_rule() -> None:
    run = {"image": "ghcr.io/acme/agent:1", "packages": False, "instructions": "Be brief.",
           "skillsDir": "/srv/skills", "secrets": {"STRIPE_KEY": "op://vault/stripe"},
           "secretsProfile": "prod", "replicas": 2, "unknownKnob": 1}
    spec = parse_triggers(text(label(run))).github.label[0].run
    assert (spec.flow, spec.image, spec.packages, spec.instructions) == (
        "fix", "ghcr.io/acme/agent:1", False, "Be brief.")
    assert spec.skills_dir == "/srv/skills" and spec.secrets == {"STRIPE_KEY": "op://vault/stripe"}
    assert (spec.secrets_profile, spec.replicas, spec.command) == ("prod", 2, None)


def test_label_rules_for_other_forges_are_validated_the_same_way() -> None:
    azure = {"on": {"type": "label", "all": ["pi:go"]},
             "run": {"kind": "azure", "flow": "fix", "repository": "widgets"}}
    rules = parse_triggers(text(azure, {**LABEL, "run": {"kind": "gitlab", "flow": "fix"}}))
    assert rules.azure.label[0].run.repository == "widgets"
    assert rules.gitlab.label[0].index == 1


def test_the_refusal_line_names_the_file_the_entry_and_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        parse_triggers(text(CRON, LABEL, label(any="pi:x")))
    assert str(err.value) == (
        "PI_TRIGGERS_FILE triggers.json: triggers[2].on.any must be an array of non-empty strings"
    )


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ("not an object", "triggers[1] must be an object"),
        ({"on": [], "run": {}}, "triggers[1].on must be an object"),
        ({"on": {"type": "label"}, "run": "x"}, "triggers[1].run must be an object"),
        ({"on": {"type": "disarmed"}, "run": {"kind": "github"}}, "triggers[1].on.type"),
        ({"on": {"type": "push"}, "run": {"kind": "github"}}, "triggers[1].on.type"),
        (label({"kind": "bitbucket"}), "triggers[1].run.kind"),
        (label({"kind": "local"}), "triggers[1].run.kind"),
        ({**CRON, "run": {"kind": "github", "flow": "x"}}, "triggers[1].run.kind"),
        (label(any=["ok", ""]), "triggers[1].on.any"),
        (label(all=["  "]), "triggers[1].on.all"),
        (label(any=["x"], none="blocked"), "triggers[1].on.none"),
        (label(none=["blocked"]), "triggers[1].on needs a non-empty any or all"),
        (label(any=[], all=[]), "triggers[1].on needs a non-empty any or all"),
        (label(any=["x"], number=3), "triggers[1].on.number"),
        (label(any=["x"], once=True), "triggers[1].on.once"),
        (label(any=["x"], disarmed={"at": "now"}), "triggers[1].on.disarmed"),
        (label({"command": "check"}), "triggers[1].run has both flow and command"),
        ({"on": {"type": "label", "any": ["x"]}, "run": {"kind": "github"}},
         "triggers[1].run.flow must be a non-empty string (or use run.command)"),
        (label({"flow": "Fix"}), "triggers[1].run.flow 'Fix' is refused"),
        (label({"flow": "fix-"}), "triggers[1].run.flow"),
        (label({"flow": "a" * 65}), "triggers[1].run.flow"),
        (label({"flow": 7}), "triggers[1].run.flow"),
        ({"on": {"type": "label", "any": ["x"]}, "run": {"kind": "github", "command": "/wf"}},
         "triggers[1].run.command"),
        ({"on": {"type": "label", "any": ["x"]}, "run": {"kind": "github", "command": " wf"}},
         "triggers[1].run.command"),
        ({"on": {"type": "label", "any": ["x"]}, "run": {"kind": "github", "command": "wf\tx"}},
         "triggers[1].run.command"),
        ({"on": {"type": "label", "any": ["x"]},
          "run": {"kind": "github", "command": "wf", "instructions": "hi"}}, "triggers[1].run.instructions"),
        ({"on": {"type": "label", "any": ["x"]},
          "run": {"kind": "github", "command": "wf", "resume": True}}, "triggers[1].run.resume"),
        (label({"instructions": "x" * 2001}), "triggers[1].run.instructions"),
        (label({"instructions": "   "}), "triggers[1].run.instructions"),
        (label({"image": "-evil"}), "triggers[1].run.image"),
        (label({"image": " img"}), "triggers[1].run.image"),
        (label({"image": "img\u0085"}), "triggers[1].run.image"),
        (label({"image": ""}), "triggers[1].run.image"),
        (label({"skillsDir": " /x"}), "triggers[1].run.skillsDir"),
        (label({"packages": "no"}), "triggers[1].run.packages"),
        (label({"resume": 1}), "triggers[1].run.resume"),
        (label({"replicas": 1}), "triggers[1].run.replicas"),
        (label({"replicas": 4}), "triggers[1].run.replicas"),
        (label({"replicas": "2"}), "triggers[1].run.replicas"),
        (label({"replicas": True}), "triggers[1].run.replicas"),
        (label({"replicas": 2, "resume": True}), "triggers[1].run.replicas"),
        (label({"secrets": {}}), "triggers[1].run.secrets"),
        (label({"secrets": {f"K{i}": "ref" for i in range(17)}}), "triggers[1].run.secrets"),
        (label({"secrets": {"1KEY": "ref"}}), "triggers[1].run.secrets"),
        (label({"secrets": {"GITHUB_TOKEN": "ref"}}), "triggers[1].run.secrets"),
        (label({"secrets": {"__proto__": "ref"}}), "triggers[1].run.secrets"),
        (label({"secrets": {"KEY": "-ref"}}), "triggers[1].run.secrets.KEY"),
        (label({"secrets": {"KEY": " "}}), "triggers[1].run.secrets.KEY"),
        (label({"secrets": {"KEY": "ref"}, "resume": True}), "triggers[1].run.secrets"),
        (label({"secretsProfile": "prod"}), "triggers[1].run.secretsProfile requires run.secrets"),
        (label({"secrets": {"KEY": "ref"}, "secretsProfile": "pr od"}), "triggers[1].run.secretsProfile"),
        (label({"repository": "widgets"}), "triggers[1].run.repository"),
        ({"on": {"type": "label", "any": ["x"]}, "run": {"kind": "azure", "flow": "fix"}},
         "triggers[1].run.repository is required"),
        ({"on": {"type": "label", "any": ["x"]},
          "run": {"kind": "azure", "flow": "fix", "repository": "a/b"}},
         "triggers[1].run.repository"),
        (label({"portfolio": []}), "triggers[1].run.portfolio"),
        (label({"tools": ["bash"]}), "triggers[1].run.tools"),
        (label({"waitFor": [{"profile": "jira"}]}), "triggers[1].run.waitFor"),
        (label({"maxCostUsd": "0.5"}), "triggers[1].run.maxCostUsd"),
        (COMMENT, "triggers[1].on.type comment is already used by triggers[0]"),
        ({"on": {"type": "comment", "phrase": ""}, "run": {"kind": "gitlab", "flow": "x"}},
         "triggers[1].on.phrase"),
        ({"on": {"type": "pull_request", "action": ["opened"]}, "run": {"kind": "gitlab", "flow": "x"}},
         "triggers[1].on.action has 'opened'"),
        ({"on": {"type": "pull_request", "action": ["closed", "opened"]},
          "run": {"kind": "github", "flow": "x"}},
         "triggers[1].on.action mixes 'closed'"),
        ({"on": {"type": "pull_request", "action": []}, "run": {"kind": "github", "flow": "x"}},
         "triggers[1].on.action"),
        ({"on": {"type": "issue", "action": ["closed"]}, "run": {"kind": "azure", "flow": "x"}},
         "triggers[1].on.type issue is not supported"),
        ({"on": {"type": "cron", "id": "", "pattern": "* * * * *"}, "run": {"kind": "local"}},
         "triggers[1].on.id"),
    ],
)
def test_each_refusal_names_the_entry_index_and_the_field(entry: Any, field: str) -> None:
    first = COMMENT if field.startswith("triggers[1].on.type comment") else LABEL
    with pytest.raises(ConfigError) as err:
        parse_triggers(text(first, entry))
    message = str(err.value)
    assert message.startswith("PI_TRIGGERS_FILE triggers.json: ")
    assert field in message
    assert "\n" not in message


def test_comment_triggers_of_two_forges_coexist() -> None:
    gitlab = {**COMMENT, "run": {"kind": "gitlab", "flow": "triage"}}
    rules = parse_triggers(text(COMMENT, gitlab))
    assert rules.github.comment is not None and rules.gitlab.comment is not None


@pytest.mark.parametrize(
    "raw",
    [
        '{"triggers": [{"on": {"type": "label", "any": ["x"]}, '
        '"run": {"kind": "github", "flow": "a", "flow": "b"}}]}',
        '{"triggers": [], "triggers": []}',
        '{"triggers": [{"on": {"type": "label", "any": ["x"], "any": ["y"]}, '
        '"run": {"kind": "github", "flow": "a"}}]}',
    ],
)
def test_a_duplicated_key_anywhere_refuses_the_file(raw: str) -> None:
    with pytest.raises(ConfigError, match="is duplicated"):
        parse_triggers(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("{ not json", "is not valid JSON (line 1 column 3)"),
        ('{"triggers": [NaN]}', "is not valid JSON"),
        ("[]", 'must be an object with a "triggers" array'),
        ('{"triggers": {}}', 'must be an object with a "triggers" array'),
    ],
)
def test_file_level_refusals(raw: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        parse_triggers(raw)


def test_load_triggers_reads_the_file_and_names_only_its_basename(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(text(LABEL))
    assert load_triggers(str(path)).github.label[0].index == 0
    path.write_text(text(label(any="x")))
    with pytest.raises(ConfigError) as err:
        load_triggers(str(path))
    assert str(err.value).startswith("PI_TRIGGERS_FILE rules.json: triggers[0].on.any")
    assert str(tmp_path) not in str(err.value)


def test_a_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"PI_TRIGGERS_FILE triggers\.json: file not found"):
        load_triggers(str(tmp_path / "triggers.json"))


def test_rules_ref_swaps_in_one_step() -> None:
    first, second = parse_triggers(text(LABEL)), parse_triggers(text(CRON, LABEL))
    ref = RulesRef(first)
    ref.current = second
    assert ref.current.github.label[0].index == 1
