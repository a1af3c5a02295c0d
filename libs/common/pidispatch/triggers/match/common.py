"""Small pieces every forge's filter shares. Pure."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from pidispatch.common.models import Matched, Target
from pidispatch.triggers.decision import Decision, Drop
from pidispatch.triggers.explain import Trace
from pidispatch.triggers.jsvalues import js_int
from pidispatch.triggers.match.predicate import matched_label, why_not
from pidispatch.triggers.rules import LabelIndex, LabelRule, RunSpec

# A forge's own job builder, bound to its delivery: (rule index, run, target, matched) → decision.
FireRule = Callable[[int, RunSpec, Target, Matched], Decision]


def filled(value: Any) -> str | None:
    """A non-empty string, else None: what a lookup question may carry."""
    return value if isinstance(value, str) and value else None


def sender_gate(sender_id: Any, self_id: int | None) -> Drop | int:
    """Steps 0-1 of every numeric-id filter: no usable numeric sender, then the harness itself; else the
    sender's id as an int (``7.0`` reads as 7, as it did in JavaScript). A string "999" must not read as
    self, and a missing id must not fall through to a job."""
    sender = js_int(sender_id)
    if sender is None:
        return Drop("missing-sender-id")
    if self_id is not None and sender == self_id:
        return Drop("self")
    return sender


def numeric_sender_gate(sender_id: Any, self_id: int | None, authorized: Any) -> Drop | int:
    """Steps 0-2 of the GitLab and Forgejo filters, in their load-bearing order: ``sender_gate``, then
    the authority verdict (only the literal ``True`` opens it); else the sender's id."""
    sender = sender_gate(sender_id, self_id)
    if isinstance(sender, Drop):
        return sender
    if authorized is not True:
        return Drop("author-not-allowed")
    return sender


def first_label_rule(rules: LabelIndex, labels: Collection[str], trace: Trace) -> LabelRule | None:
    """The first label rule (file order) whose predicate holds over ``labels``. Only the rules the index
    says may hold are tried, unless ``explain`` is recording every rule's verdict."""
    for rule in rules.rules if trace.recording else rules.candidates(labels):
        why = why_not(rule.predicate, labels)
        trace.rule(rule.index, "label", why)
        if why is None:
            return rule
    return None


def fire_label_rule(
    rules: LabelIndex, labels: Collection[str], target: Target | None, trace: Trace, fire: FireRule
) -> Decision:
    """An issue's label route on any forge, once the forge has said which labels count (the current set
    or the ones this event added): the first label rule, then the item's number, then the job."""
    rule = first_label_rule(rules, labels, trace)
    if rule is None:
        return Drop("no-allowlisted-label")
    if target is None:
        return Drop("missing-issue-number")
    matched = Matched(index=rule.index, type="label", label=matched_label(rule.predicate, labels))
    return fire(rule.index, rule.run, target, matched)


def present(**values: Any) -> dict[str, Any]:
    """The keys whose value is not None: a job's data keeps absent fields absent, never null."""
    return {k: v for k, v in values.items() if v is not None}
