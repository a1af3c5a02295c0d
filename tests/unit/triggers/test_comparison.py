"""The comparison behind ``pi-dispatch triggers test``: stored decisions against re-runs, pure."""

from __future__ import annotations

from pidispatch.common.models import Job
from pidispatch.triggers import comparison
from pidispatch.triggers.comparison import Outcome, Row, compared, outcome_text, recorded, same
from pidispatch.triggers.decision import Drop, Fire
from pidispatch.triggers.decisions import Decided


def fire(index: int, flow: str | None = "fix") -> Outcome:
    return comparison.decided(Fire(Job(id="gh-d", kind="github", repo="a/b", flow=flow), index))


def drop(reason: str) -> Outcome:
    return comparison.decided(Drop(reason))


def stored(outcome: str, reason: str = "", trigger: int | None = None) -> Decided:
    return Decided(outcome, reason, ["gh-d"] if trigger is not None else [], trigger, 1, "1-0")


def row(decided: Decided | None, in_force: Outcome, would: Outcome) -> tuple[Row, bool]:
    return compared("d", "github", "issues", "labeled", "a/b#1", decided, in_force, would)


def test_a_stored_fire_takes_its_flow_from_the_file_in_force_when_that_fires_the_same_rule() -> None:
    assert recorded(stored("queued", trigger=1), fire(1, "docs")) == Outcome(
        outcome="queued", trigger=1, flow="docs")
    unknown = recorded(stored("deduplicated", "semantic-window", 1), fire(0, "fix"))
    assert unknown is not None and not unknown.flow_known and unknown.flow is None


def test_only_final_stored_decisions_are_the_baseline() -> None:
    assert recorded(None, fire(0)) is None
    assert recorded(stored("pending", "lookup-failed:status-502"), fire(0)) is None
    assert recorded(stored("dead", "lookup-failed"), fire(0)) is None
    assert recorded(stored("dead", "malformed-event"), fire(0)) == comparison.malformed()
    assert recorded(stored("dropped", "no-allowlisted-label"), fire(0)) == Outcome(
        outcome="dropped", reason="no-allowlisted-label")


def test_queued_and_deduplicated_are_the_fire_they_were() -> None:
    for word in ("queued", "deduplicated"):
        assert same(Outcome(outcome=word, trigger=0, flow="fix"), fire(0, "fix"))
        assert not same(Outcome(outcome=word, trigger=0, flow="fix"), fire(1, "fix"))  # renumbered
        assert not same(Outcome(outcome=word, trigger=0, flow="fix"), fire(0, "docs"))
    # A flow the record cannot tell is not compared.
    assert same(Outcome(outcome="queued", trigger=0, flow_known=False), fire(0, "docs"))
    assert same(Outcome(outcome="dropped", reason="self"), drop("self"))
    assert not same(Outcome(outcome="dropped", reason="self"), drop("no-allowlisted-label"))
    assert not same(Outcome(outcome="dropped", reason="x"), fire(0))
    assert not same(Outcome(outcome="queued", trigger=0), comparison.unanswered("network"))


def test_a_row_is_changed_only_when_the_candidate_differs_from_the_stored_decision() -> None:
    decided = stored("queued", trigger=1)
    r, changed = row(decided, fire(1, "docs"), drop("no-allowlisted-label"))
    assert changed and r.recorded and r.stored == Outcome(outcome="queued", trigger=1, flow="docs")
    assert not row(decided, fire(1, "docs"), fire(1, "docs"))[1]
    # No record left: the file in force stands in, and says so.
    r, changed = row(None, drop("no-allowlisted-label"), fire(0))
    assert changed and not r.recorded and r.stored == drop("no-allowlisted-label")
    assert comparison.stored_text(r) == "drop: no-allowlisted-label (no stored decision: the file in force)"


def test_offline_the_same_question_under_both_files_keeps_the_stored_verdict() -> None:
    ask = comparison.asking(Fire(Job(id="gh-d", kind="github", repo="a/b", flow="closed"), 3))
    assert ask.outcome == "ask" and ask.needs == "authority"
    refused = stored("dropped", "closer-not-allowed")
    assert not row(refused, ask, ask)[1]
    assert not row(stored("queued", trigger=3), ask, ask)[1]
    # Another rule, or a question the file in force never asked: a change, marked as needing the forge.
    other = comparison.asking(Fire(Job(id="gh-d", kind="github", repo="a/b", flow="closed"), 4))
    assert row(refused, ask, other)[1]
    assert row(refused, drop("unhandled-event"), ask)[1]
    assert outcome_text(ask) == "fire rule #3, flow closed if the forge allows (not asked)"


def test_an_unknown_own_id_marks_fires_only() -> None:
    assert comparison.needing_identity(fire(0)).needs == "identity"
    assert comparison.needing_identity(drop("x")).needs is None
    assert outcome_text(comparison.needing_identity(fire(0))) == "fire rule #0, flow fix (own id unknown)"


def test_the_comparison_counts_and_its_json_shape() -> None:
    results = [row(stored("queued", trigger=1), fire(1, "docs"), drop("no-allowlisted-label")),
               row(stored("queued", trigger=0), fire(0), fire(0)),
               row(stored("dropped", "x"), drop("x"), comparison.needing_identity(fire(2)))]
    c = comparison.comparison(results, offline=True)
    assert (c.compared, c.unchanged, len(c.changed), c.needed_forge) == (3, 1, 2, 1)
    data = c.as_json()
    assert set(data) == {"compared", "unchanged", "changed", "neededForge"}
    first = data["changed"][0]
    assert set(first) == {"delivery", "forge", "event", "action", "target", "stored", "would"}
    assert first["stored"] == {"outcome": "queued", "trigger": 1, "flow": "docs", "reason": "",
                               "recorded": True}
    assert first["would"] == {"outcome": "drop", "trigger": None, "flow": None,
                              "reason": "no-allowlisted-label"}
    assert data["changed"][1]["would"]["needsForge"] == "identity"
    assert set(comparison.comparison(results[:2]).as_json()) == {"compared", "unchanged", "changed"}
    assert comparison.summary(c) == ("compared 3 deliveries: 1 unchanged, 2 would change; 1 needed a forge "
                                     "fact that was not asked (marked)")
    assert comparison.table_rows(c.changed)[0] == (
        "d", "github", "issues/labeled", "a/b#1", "queued rule #1, flow docs", "drop: no-allowlisted-label")


def test_outcome_words() -> None:
    assert outcome_text(Outcome(outcome="deduplicated", trigger=2)) == "deduplicated rule #2, flow -"
    assert outcome_text(Outcome(outcome="queued", trigger=2, flow_known=False)) == "queued rule #2"
    assert outcome_text(comparison.unanswered("status-502")) == "pending: lookup-failed:status-502"
    assert outcome_text(comparison.malformed()) == "dead: malformed-event"
