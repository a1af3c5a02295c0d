"""triggers.json: file rules, per-forge vocabularies and every ``on`` type. The ``run`` fields are in
test_runfields.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.triggers.loader import (
    FORGE_KINDS,
    ISSUE_ACTIONS,
    ON_KEYS,
    PR_ACTIONS,
    REFUSED_ON_TYPES,
    Rules,
    RulesRef,
    load_triggers,
    parse_triggers,
)
from pidispatch.triggers.match.predicate import Predicate
from pidispatch.triggers.rules import CloseRule, ForgeGroup, PullRequestRule, RunSpec
from pidispatch.triggers.runfields import RUN_KEYS
from tests.support.sources import ROOT

CRON = {"on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *"},
        "run": {"kind": "local", "folder": "/srv/app", "task": "tidy", "flow": "tidy"}}
LABEL = {"on": {"type": "label", "any": ["pi:frontend"]}, "run": {"kind": "github", "flow": "frontend-fix"}}
COMMENT = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "triage"}}
PR = {"on": {"type": "pull_request", "action": ["opened", "labeled"], "any": ["pi:review"]},
      "run": {"kind": "github", "flow": "review"}}
PR_CLOSE = {"on": {"type": "pull_request", "action": ["closed"]}, "run": {"kind": "github", "flow": "deploy"}}
ISSUE = {"on": {"type": "issue", "action": ["closed"], "number": 40},
         "run": {"kind": "github", "command": "release notes"}}
GITLAB_LABEL = {"on": {"type": "label", "any": ["pi:go"]}, "run": {"kind": "gitlab", "flow": "fix"}}
DISARMED = {"at": "2026-05-01T10:00:00Z", "jobId": "gh-abc"}


def text(*entries: Any) -> str:
    return json.dumps({"triggers": list(entries)})


def parse(*entries: Any) -> Rules:
    return parse_triggers(text(*entries))


def refusal(*entries: Any) -> str:
    with pytest.raises(ConfigError) as err:
        parse(*entries)
    message = str(err.value)
    assert message.startswith("PI_TRIGGERS_FILE triggers.json: ")
    assert "\n" not in message
    return message


def on(type_: str, kind: str = "github", run: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """One webhook entry: ``on`` fields as keywords, a flow run unless ``run`` says otherwise."""
    return {"on": {"type": type_, **fields}, "run": {"kind": kind, "flow": "fix", **(run or {})}}


def cron(run: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    base = {"kind": "local", "folder": "/srv/app", "flow": "tidy", "task": "tidy up"}
    return {"on": {"type": "cron", "id": "nightly", "pattern": "0 3 * * *", **fields},
            "run": {**base, **(run or {})}}


# --- acceptance -------------------------------------------------------------------------------------


def test_another_forge_rule_at_index_0_shifts_github_rule_indices_to_1_to_5() -> None:
    rules = parse(GITLAB_LABEL, LABEL, COMMENT, PR, PR_CLOSE, ISSUE)
    assert rules.count == 6
    assert [r.index for r in rules.group("gitlab").label] == [0]
    assert [r.index for r in rules.group("github").label] == [1]
    assert rules.group("github").comment is not None and rules.group("github").comment.index == 2
    assert [r.index for r in rules.group("github").pull_request] == [3]
    assert [r.index for r in rules.group("github").pr_close] == [4]
    assert [r.index for r in rules.group("github").issue] == [5]


def test_groups_cover_exactly_the_four_forges_and_unused_ones_are_empty() -> None:
    rules = parse(LABEL)
    assert FORGE_KINDS == ("github", "gitlab", "forgejo", "azure")
    assert set(PR_ACTIONS) == set(FORGE_KINDS)
    for kind in FORGE_KINDS:
        assert isinstance(rules.group(kind), ForgeGroup)
    assert rules.group("gitlab") == rules.group("forgejo") == rules.group("azure") == ForgeGroup()


def test_known_flows_are_every_webhook_flow_of_any_forge_and_ignore_command_rules() -> None:
    gitlab = on("label", "gitlab", any=["x"], run={"flow": "gl-flow"})
    command = on("label", run={"flow": None}, any=["y"])
    del command["run"]["flow"]
    command["run"]["command"] = "standup now"
    rules = parse(LABEL, COMMENT, gitlab, command)
    # The command rule adds nothing.
    assert rules.known_flows == frozenset({"frontend-fix", "triage", "gl-flow"})


def test_a_disarmed_entry_is_still_validated_in_full() -> None:
    spent = on("issue", action=["closed"], number=40, once=True, disarmed=DISARMED, run={"image": "-x"})
    assert "triggers[0].run.image" in refusal(spent)


def test_a_one_shot_close_rule_loads_with_once() -> None:
    rules = parse(on("issue", action=["closed"], number=40, once=True),
                  on("pull_request", "gitlab", action=["close"], number=5, once=True))
    assert rules.group("github").issue[0].once is True and rules.group("gitlab").pr_close[0].once is True


def test_a_disarmed_one_shot_is_matched_by_nothing_but_keeps_its_index() -> None:
    spent = on("issue", action=["closed"], number=40, once=True, disarmed=DISARMED)
    rules = parse(spent, LABEL)
    assert rules.group("github").issue == () and rules.count == 2
    assert [r.index for r in rules.group("github").label] == [1]


def test_a_disarmed_mark_without_once_is_refused() -> None:
    assert "triggers[0].on.disarmed requires on.once true" in refusal(
        on("issue", action=["closed"], number=40, disarmed=DISARMED))


def test_close_rules_carry_actions_and_number() -> None:
    gitlab_close = on("pull_request", "gitlab", action=["close"], number=5)
    rules = parse(ISSUE, PR_CLOSE, gitlab_close)
    assert rules.group("github").issue[0] == CloseRule(
        index=0, actions=frozenset({"closed"}), number=40, once=False,
        run=RunSpec(command="release notes"),
    )
    github, gitlab = rules.group("github").pr_close[0], rules.group("gitlab").pr_close[0]
    assert github.number is None and github.once is False
    assert gitlab.actions == frozenset({"close"}) and gitlab.number == 5


def test_a_whole_number_written_as_float_reads_as_the_integer_like_the_original() -> None:
    rules = parse(on("issue", action=["closed"], number=40.0))
    assert rules.group("github").issue[0].number == 40 and type(rules.group("github").issue[0].number) is int


def test_pull_request_rules_carry_predicate_and_review_states() -> None:
    review = on("pull_request", action=["review_submitted"], reviewState=["changes_requested"])
    auto = on("pull_request", "forgejo", action=["opened", "synchronized"], none=["wip"])
    rules = parse(PR, review, auto)
    assert rules.group("github").pull_request[0] == PullRequestRule(
        index=0, actions=frozenset({"opened", "labeled"}), predicate=Predicate(any=("pi:review",)),
        review_states=None, run=RunSpec(flow="review"),
    )
    assert rules.group("github").pull_request[1].review_states == frozenset({"changes_requested"})
    # Without the label action a predicate is optional, and a none-only one is allowed (it narrows).
    assert rules.group("forgejo").pull_request[0].predicate == Predicate(none=("wip",))


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({**LABEL, "colour": "red"},
         "triggers[1].colour is not a field; accepted in a trigger: on, run"),
        ({"on": LABEL["on"], "runs": LABEL["run"]},
         "triggers[1].runs is not a field; did you mean run? accepted in a trigger: on, run"),
        (on("label", any=["x"], someday={"a": 1}),
         "triggers[1].on.someday is not a field; accepted in on of label triggers: type, any, all, none"),
        (on("label", anny=["x"]), "triggers[1].on.anny is not a field; did you mean on.any?"),
        # A key of another type is named as not being this type's, after the values were checked.
        (on("label", any=["x"], phrase="@pi"),
         "triggers[1].on.phrase is not a field; accepted in on of label"),
        (on("comment", "gitlab", phrase="@pi", action=["open"]),
         "triggers[1].on.action is not a field; accepted in on of comment triggers: type, phrase"),
        (on("issue", action=["closed"], reviewState=["approved"]),
         "triggers[1].on.reviewState is not a field"),
        (on("label", any=["x"], run={"imgae": "typo"}), "triggers[1].run.imgae is not a field; did you mean "
                                                          "run.image?"),
        # run.github is a cron entry's own field: never dropped on a webhook rule.
        (on("label", any=["x"], run={"github": True}),
         "triggers[1].run.github is not a field; accepted in run"),
        (on("label", any=["x"], run={"task": "do it"}), "triggers[1].run.task is not a field"),
    ],
    ids=["entry", "entry_close", "on", "on_close", "on_other_type", "on_action_on_comment",
         "on_review_state_on_issue", "run_close", "run_github", "run_task"],
)
def test_an_unknown_key_is_refused_naming_its_path_and_the_nearest_accepted_key(
    entry: dict[str, Any], expected: str
) -> None:
    assert expected in refusal(LABEL, entry)


def test_an_unknown_top_level_key_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        parse_triggers(json.dumps({"triggers": [], "triggerz": []}))
    assert str(err.value) == ("PI_TRIGGERS_FILE triggers.json: triggerz is not a field; did you mean "
                              "triggers? accepted at the top level: triggers")


def test_comment_triggers_of_two_forges_coexist_even_with_the_same_phrase() -> None:
    gitlab = {**COMMENT, "run": {"kind": "gitlab", "flow": "triage"}}
    rules = parse(COMMENT, gitlab)
    assert rules.group("github").comment is not None and rules.group("gitlab").comment is not None
    assert rules.group("gitlab").comment.phrase == "@pi"


def test_azure_label_rule_carries_its_repository() -> None:
    azure = on("label", "azure", all=["pi:go"], run={"repository": "widgets"})
    assert parse(azure).group("azure").label[0].run.repository == "widgets"


@pytest.mark.parametrize(("kind", "word"), [(k, w) for k, words in PR_ACTIONS.items() for w in sorted(words)])
def test_every_pull_request_word_of_each_forge_loads(kind: str, word: str) -> None:
    fields: dict[str, Any] = {"action": [word]}
    if word in ("labeled", "label_updated"):
        fields["any"] = ["x"]
    assert parse(on("pull_request", kind, **fields)).count == 1


@pytest.mark.parametrize(("kind", "word"), [(k, w) for k, words in ISSUE_ACTIONS.items() for w in words])
def test_every_issue_word_of_each_forge_loads(kind: str, word: str) -> None:
    assert parse(on("issue", kind, action=[word])).group(kind).issue[0].actions == {word}


# --- refusals: what this build parses but does not act on yet ---------------------------------------

UNSUPPORTED: list[tuple[str, Any, str]] = [
    ("cron_portfolio", cron({"portfolio": True}),
     "triggers[1].run.portfolio true is not supported by pi-dispatch yet (no worker writes a budget plan "
     "for a scheduled job); accepted: false or absent"),
    ("cron_forge_credentials", cron({"github": True}),
     "triggers[1].run.github true is not supported by pi-dispatch yet (no local job is given forge "
     "credentials)"),
    ("label_once", on("label", any=["x"], once=True),
     "triggers[1].on.once is refused on this label trigger; accepted: only on issue and close-only "
     "pull_request triggers"),
]


@pytest.mark.parametrize(("entry", "expected"), [(e, m) for _, e, m in UNSUPPORTED],
                         ids=[case for case, _, _ in UNSUPPORTED])
def test_a_type_or_field_this_build_does_not_act_on_is_refused(entry: Any, expected: str) -> None:
    assert expected in refusal(LABEL, entry)


def test_values_are_checked_in_the_whole_file_before_anything_is_refused_as_unsupported() -> None:
    # A malformed value anywhere is named first, so a file is fixed in one pass per kind of mistake.
    assert "triggers[1].on.any" in refusal(CRON, on("label", any="x"))
    assert "triggers[0].on.pattern" in refusal(cron(pattern="* *"), LABEL)


# --- refusals: file level --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        '{"triggers": [{"on": {"type": "label", "any": ["x"]}, '
        '"run": {"kind": "github", "flow": "a", "flow": "b"}}]}',
        '{"triggers": [], "triggers": []}',
        '{"triggers": [{"on": {"type": "label", "any": ["x"], "any": ["y"]}, '
        '"run": {"kind": "github", "flow": "a"}}]}',
        '{"triggers": [{"on": {"type": "label", "any": ["x"]}, '
        '"run": {"kind": "github", "flow": "a", "secrets": {"K": "a", "K": "b"}}}]}',
    ],
    ids=["run", "root", "on", "nested"],
)
def test_a_duplicated_json_key_anywhere_refuses_the_file(raw: str) -> None:
    with pytest.raises(ConfigError, match="is duplicated; accepted: each key once per object"):
        parse_triggers(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("{ not json", "is not valid JSON (line 1 column 3)"),
        ('{"triggers": [NaN]}', "is not valid JSON"),
        ('{"triggers": [Infinity]}', "is not valid JSON"),
        ("[]", 'must be an object with a "triggers" array'),
        ('{"triggers": {}}', 'must be an object with a "triggers" array'),
        ('{"rules": []}', 'must be an object with a "triggers" array'),
    ],
)
def test_file_level_refusals(raw: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_triggers(raw)
    assert expected in str(err.value)


def test_the_refusal_line_names_the_file_the_entry_and_the_field() -> None:
    assert refusal(CRON, LABEL, on("label", any="pi:x")) == (
        "PI_TRIGGERS_FILE triggers.json: triggers[2].on.any must be an array of non-empty strings"
    )


# --- refusals: every on type -----------------------------------------------------------------------

ON_REFUSALS: list[tuple[str, Any, str]] = [
    # entry shape and the on x run matrix
    ("entry_not_object", "not an object", "triggers[1] must be an object"),
    ("on_not_object", {"on": [], "run": {}}, "triggers[1].on must be an object"),
    ("run_not_object", {"on": {"type": "label"}, "run": "x"}, "triggers[1].run must be an object"),
    ("type_disarmed_not_authorable", {"on": {"type": "disarmed"}, "run": {"kind": "github"}},
     "triggers[1].on.type must be one of cron, label, comment, pull_request, issue"),
    ("type_unknown", {"on": {"type": "push"}, "run": {"kind": "github"}}, "triggers[1].on.type"),
    ("kind_unknown", on("label", "bitbucket", any=["x"]),
     "triggers[1].run.kind must be one of local, github, gitlab, forgejo, azure"),
    ("webhook_kind_local", on("label", "local", any=["x"]), "triggers[1].run.kind must be local for a cron"),
    ("cron_kind_forge", {**CRON, "run": {"kind": "github", "flow": "x"}}, "triggers[1].run.kind"),
    ("portfolio_on_webhook", on("label", any=["x"], run={"portfolio": False}), "triggers[1].run.portfolio"),
    # cron
    ("cron_id_empty", cron(id=""), "triggers[1].on.id must be a non-empty string"),
    ("cron_id_missing", {"on": {"type": "cron", "pattern": "* * * * *"}, "run": CRON["run"]},
     "triggers[1].on.id"),
    ("cron_id_colon", cron(id="a:b"), "triggers[1].on.id must not contain ':'"),
    ("cron_id_charset", cron(id="a b"), "triggers[1].on.id must be letters"),
    ("cron_id_duplicate", cron(), "triggers[1].on.id 'nightly' is already used by triggers[0]"),
    ("cron_pattern_missing", cron(pattern=""), "triggers[1].on.pattern"),
    ("cron_pattern_4_fields", cron(pattern="* * * *"),
     "triggers[1].on.pattern must be a cron pattern of 5 or 6"),
    ("cron_pattern_7_fields", cron(pattern="* * * * * * *"), "triggers[1].on.pattern"),
    ("cron_number", cron(number=3), "triggers[1].on.number is refused on a cron trigger"),
    ("cron_once", cron(once=False), "triggers[1].on.once is refused on a cron trigger"),
    ("cron_disarmed", cron(disarmed=DISARMED), "triggers[1].on.disarmed is refused on a cron trigger"),
    # label
    ("label_any_string", on("label", any="x"), "triggers[1].on.any must be an array of non-empty strings"),
    ("label_any_blank_item", on("label", any=["ok", ""]), "triggers[1].on.any"),
    ("label_all_whitespace", on("label", all=["  "]), "triggers[1].on.all"),
    ("label_none_string", on("label", any=["x"], none="blocked"), "triggers[1].on.none"),
    ("label_none_only", on("label", none=["blocked"]), "triggers[1].on needs a non-empty any or all"),
    ("label_empty_selectors", on("label", any=[], all=[]), "triggers[1].on needs a non-empty any or all"),
    ("label_no_selector", on("label"), "triggers[1].on needs a non-empty any or all"),
    ("label_number", on("label", any=["x"], number=3), "triggers[1].on.number is refused on this label"),
    ("label_once", on("label", any=["x"], once=True), "triggers[1].on.once"),
    ("label_disarmed", on("label", any=["x"], disarmed=DISARMED), "triggers[1].on.disarmed"),
    # comment
    ("comment_phrase_empty", on("comment", "gitlab", phrase=""), "triggers[1].on.phrase must be a non-empty"),
    ("comment_phrase_missing", on("comment", "gitlab"), "triggers[1].on.phrase"),
    ("comment_phrase_not_string", on("comment", "gitlab", phrase=7), "triggers[1].on.phrase"),
    ("comment_second_of_a_forge", COMMENT, "triggers[1].on.type comment is already used by triggers[0]"),
    ("comment_number", on("comment", "gitlab", phrase="@pi", number=1), "triggers[1].on.number"),
    ("comment_once", on("comment", "gitlab", phrase="@pi", once=True), "triggers[1].on.once"),
    # issue
    ("issue_azure", on("issue", "azure", action=["closed"]), "triggers[1].on.type issue is not supported"),
    ("issue_action_missing", on("issue"), "triggers[1].on.action must be a non-empty array"),
    ("issue_action_empty", on("issue", action=[]), "triggers[1].on.action"),
    ("issue_action_other_forge", on("issue", "gitlab", action=["closed"]),
     "triggers[1].on.action has 'closed'"),
    ("issue_action_not_close", on("issue", action=["opened"]), "triggers[1].on.action has 'opened'"),
    ("issue_predicate", on("issue", action=["closed"], any=["x"]),
     "triggers[1].on.any is refused on an issue"),
    ("issue_number_zero", on("issue", action=["closed"], number=0),
     "triggers[1].on.number must be an integer >= 1"),
    ("issue_number_string", on("issue", action=["closed"], number="40"), "triggers[1].on.number"),
    ("issue_number_fraction", on("issue", action=["closed"], number=4.5), "triggers[1].on.number"),
    ("issue_number_bool", on("issue", action=["closed"], number=True), "triggers[1].on.number"),
    ("issue_once_string", on("issue", action=["closed"], number=4, once="true"),
     "triggers[1].on.once must be true or false"),
    ("issue_once_without_number", on("issue", action=["closed"], once=True),
     "triggers[1].on.once true requires"),
    ("issue_once_beside_replicas", on("issue", action=["closed"], number=4, once=True, run={"replicas": 2}),
     "triggers[1].on.once true is refused beside run.replicas"),
    ("disarmed_not_object", on("issue", action=["closed"], number=4, once=True, disarmed="now"),
     "triggers[1].on.disarmed must be an object"),
    ("disarmed_extra_key",
     on("issue", action=["closed"], number=4, once=True, disarmed={"at": "x", "by": "y"}),
     "triggers[1].on.disarmed has the unsupported key 'by'"),
    ("disarmed_at_missing", on("issue", action=["closed"], number=4, once=True, disarmed={"jobId": "j"}),
     "triggers[1].on.disarmed.at"),
    ("disarmed_job_id_blank", on("issue", action=["closed"], number=4, once=True,
                                 disarmed={"at": "x", "jobId": " "}), "triggers[1].on.disarmed.jobId"),
    ("disarmed_without_once", on("issue", action=["closed"], number=4, disarmed={"at": "x"}),
     "triggers[1].on.disarmed requires on.once true"),
    # pull_request
    ("pr_action_other_forge", on("pull_request", "forgejo", action=["synchronize"]),
     "triggers[1].on.action has 'synchronize'"),
    ("pr_action_unlabeled", on("pull_request", action=["unlabeled"]),
     "triggers[1].on.action has 'unlabeled'"),
    ("pr_action_merge", on("pull_request", "gitlab", action=["merge"]), "triggers[1].on.action has 'merge'"),
    ("pr_action_not_strings", on("pull_request", action=[1]),
     "triggers[1].on.action must be a non-empty array"),
    ("pr_azure_close_word", on("pull_request", "azure", action=["closed"]),
     "triggers[1].on.action has 'closed'"),
    ("pr_close_mixed", on("pull_request", action=["closed", "opened"]),
     "triggers[1].on.action mixes 'closed'"),
    ("pr_review_state_gitlab", on("pull_request", "gitlab", action=["approved"], reviewState=["approved"]),
     "triggers[1].on.reviewState is refused for run.kind gitlab"),
    ("pr_review_state_without_review", on("pull_request", action=["opened"], reviewState=["approved"]),
     "triggers[1].on.reviewState requires on.action to include 'review_submitted'"),
    ("pr_review_state_empty", on("pull_request", action=["review_submitted"], reviewState=[]),
     "triggers[1].on.reviewState must be a non-empty array"),
    ("pr_review_state_dismissed", on("pull_request", action=["review_submitted"], reviewState=["dismissed"]),
     "triggers[1].on.reviewState"),
    ("pr_azure_predicate", on("pull_request", "azure", action=["created"], any=["x"]),
     "triggers[1].on.any is refused on an azure pull_request trigger"),
    ("pr_close_predicate", on("pull_request", action=["closed"], none=["x"]),
     "triggers[1].on.none is refused on a close-only pull_request trigger"),
    ("pr_labeled_without_positive", on("pull_request", action=["labeled", "opened"]),
     "triggers[1].on needs a non-empty any or all"),
    ("pr_label_updated_none_only", on("pull_request", "forgejo", action=["label_updated"], none=["x"]),
     "triggers[1].on needs a non-empty any or all"),
    ("pr_number_on_non_close", on("pull_request", action=["opened"], number=3),
     "triggers[1].on.number is refused on this pull_request trigger"),
    ("pr_once_on_non_close", on("pull_request", action=["opened"], once=False), "triggers[1].on.once"),
    ("pr_disarmed_on_non_close", on("pull_request", action=["opened"], disarmed=DISARMED),
     "triggers[1].on.disarmed"),
    ("pr_close_once_without_number", on("pull_request", "gitlab", action=["close"], once=True),
     "triggers[1].on.once true requires on.number"),
]


@pytest.mark.parametrize(("entry", "expected"), [(e, m) for _, e, m in ON_REFUSALS],
                         ids=[case for case, _, _ in ON_REFUSALS])
def test_each_on_refusal_names_the_entry_index_and_the_field(entry: Any, expected: str) -> None:
    first = CRON if expected.startswith("triggers[1].on.id 'nightly'") else COMMENT
    assert expected in refusal(first, entry)


# --- the loader's refusals, each case by name -----------------------------------------------------

LOADER_CASES: list[tuple[str, list[Any], str]] = [
    ("two_github_comment_triggers", [COMMENT, COMMENT], "triggers[1].on.type comment is already used"),
    ("gitlab_pr_action_opened", [on("pull_request", "gitlab", action=["opened"])], "triggers[0].on.action"),
    ("github_pr_closed_with_opened", [on("pull_request", action=["closed", "opened"])],
     "triggers[0].on.action"),
    ("once_without_number", [on("issue", action=["closed"], once=True)], "triggers[0].on.once"),
    ("replicas_1", [on("label", any=["x"], run={"replicas": 1})], "triggers[0].run.replicas"),
    ("replicas_4", [on("label", any=["x"], run={"replicas": 4})], "triggers[0].run.replicas"),
    ("replicas_beside_resume", [on("label", any=["x"], run={"replicas": 2, "resume": True})],
     "triggers[0].run.replicas"),
    ("azure_label_without_repository", [on("label", "azure", any=["x"])], "triggers[0].run.repository"),
    ("repository_on_github_rule", [on("label", any=["x"], run={"repository": "w"})],
     "triggers[0].run.repository"),
    ("review_state_on_gitlab", [on("pull_request", "gitlab", action=["open"], reviewState=["approved"])],
     "triggers[0].on.reviewState"),
    ("review_state_without_review_submitted",
     [on("pull_request", action=["opened"], reviewState=["approved"])], "triggers[0].on.reviewState"),
    ("label_with_only_none", [on("label", none=["x"])], "triggers[0].on"),
    ("flow_uppercase", [on("label", any=["x"], run={"flow": "Fix"})], "triggers[0].run.flow"),
    ("command_leading_slash",
     [{"on": {"type": "label", "any": ["x"]}, "run": {"kind": "github", "command": "/wf"}}],
     "triggers[0].run.command"),
    ("instructions_2001_chars", [on("label", any=["x"], run={"instructions": "x" * 2001})],
     "triggers[0].run.instructions"),
    ("wait_for_after_without_zone",
     [on("label", any=["x"], run={"waitFor": [{"after": "2026-09-01T09:00:00"}]})],
     "triggers[0].run.waitFor[0].after"),
    ("wait_for_exclusive", [on("label", any=["x"], run={"waitFor": [{"exclusive": True}]})],
     "triggers[0].run.waitFor[0]"),
    ("run_waitfor_near_miss", [on("label", any=["x"], run={"waitfor": [{"profile": "jira"}]})],
     "triggers[0].run.waitfor is not a field; did you mean run.waitFor?"),
]


@pytest.mark.parametrize(("entries", "expected"), [(e, m) for _, e, m in LOADER_CASES],
                         ids=[case for case, _, _ in LOADER_CASES])
def test_each_invalid_rule_is_refused_naming_its_field(entries: list[Any], expected: str) -> None:
    assert expected in refusal(*entries)


def test_a_duplicated_json_key_refuses() -> None:
    with pytest.raises(ConfigError, match="'flow' is duplicated"):
        parse_triggers('{"triggers": [{"on": {"type": "label", "any": ["x"]}, '
                       '"run": {"kind": "github", "flow": "a", "flow": "a"}}]}')


# --- loading from disk and the live reference --------------------------------------------------------


def test_load_triggers_reads_the_file_and_names_only_its_basename(tmp_path: Path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(text(LABEL))
    assert load_triggers(str(path)).group("github").label[0].index == 0
    path.write_text(text(on("label", any="x")))
    with pytest.raises(ConfigError) as err:
        load_triggers(str(path))
    assert str(err.value).startswith("PI_TRIGGERS_FILE rules.json: triggers[0].on.any")
    assert str(tmp_path) not in str(err.value)


def test_a_missing_file_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"PI_TRIGGERS_FILE triggers\.json: file not found"):
        load_triggers(str(tmp_path / "triggers.json"))


def test_a_file_that_is_not_utf8_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "triggers.json"
    path.write_bytes(b'{"triggers": ["\xff"]}')
    with pytest.raises(ConfigError, match="is not UTF-8; accepted: a UTF-8 JSON file"):
        load_triggers(str(path))


def test_rules_ref_swaps_in_one_step() -> None:
    first, second = parse(LABEL), parse(GITLAB_LABEL, LABEL)
    ref = RulesRef(first)
    ref.current = second
    assert ref.current.group("github").label[0].index == 1


# --- example files --------------------------------------------------------------------------------------

EXAMPLES = ROOT / "tests" / "fixtures" / "triggers"


def test_an_example_using_every_honoured_field_loads() -> None:
    path = EXAMPLES / "every-forge.json"
    rules = load_triggers(str(path))
    assert rules.count == 11 and rules.cron == ()
    entries = json.loads(path.read_text())["triggers"]
    used_on = {(e["on"]["type"], key) for e in entries for key in e["on"]}
    used_run = {key for e in entries for key in e["run"]}
    # Webhook fields only: the cron entry is the cron tests' (its run keys differ).
    webhook = {t: keys for t, keys in ON_KEYS.items() if t not in {*REFUSED_ON_TYPES, "cron"}}
    assert used_on == {(t, key) for t, keys in webhook.items() for key in keys}
    assert used_run == set(RUN_KEYS)


def test_an_example_with_fields_no_worker_acts_on_is_refused_naming_every_one_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        load_triggers(str(EXAMPLES / "refused-fields.json"))
    assert str(err.value) == (
        "PI_TRIGGERS_FILE refused-fields.json: 4 fields are not supported by pi-dispatch yet: "
        "triggers[0].run.skillsDir (no worker mounts a skills folder into a job; remove it), "
        "triggers[1].run.packages true (no worker stages packages into a job; accepted: false or absent), "
        "triggers[2].run.resume true (no worker keeps an agent session to resume; accepted: false or "
        "absent), triggers[3].run.portfolio true (no worker writes a budget plan for a scheduled job; "
        "accepted: false or absent)"
    )


def test_the_originals_example_file_loads_with_its_switches_false() -> None:
    rules = load_triggers(str(EXAMPLES / "original-example.json"))
    assert rules.count == 11 and [c.id for c in rules.cron] == ["nightly"]
    run = rules.group("github").label[0].run
    assert run.packages is None and run.flow == "frontend-fix"
    assert rules.group("github").pull_request[1].run.resume is None


def test_the_originals_example_with_what_it_can_ask_beyond_this_build_names_it_all_at_once() -> None:
    data = json.loads((EXAMPLES / "original-example.json").read_text())
    data["triggers"][0]["run"]["packages"] = True
    data["triggers"][3]["run"]["resume"] = True
    data["triggers"][7]["run"]["skillsDir"] = "/srv/skills"
    with pytest.raises(ConfigError) as err:
        parse_triggers(json.dumps(data))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("PI_TRIGGERS_FILE triggers.json: 3 fields are not supported by pi-dispatch "
                              "yet: ")
    assert [part.split(" (", 1)[0] for part in message.split(": ", 2)[2].split("), ")] == [
        "triggers[0].run.packages true", "triggers[3].run.resume true", "triggers[7].run.skillsDir",
    ]


def test_a_cron_entry_loads_into_rules_cron_with_its_run_in_the_files_names() -> None:
    rules = parse(LABEL, CRON, {**CRON, "on": {**CRON["on"], "id": "hourly", "pattern": "0 0 * * * *"}})
    assert [(c.index, c.id, c.pattern) for c in rules.cron] == [(1, "nightly", "0 3 * * *"),
                                                               (2, "hourly", "0 0 * * * *")]
    assert rules.cron[0].run == {"kind": "local", "folder": "/srv/app", "task": "tidy", "flow": "tidy"}
