"""Which close rule wants this close, and the close route itself. Pure.

One derivation shared by every forge's close route and by the question "is a lookup worth making", so
the two can never disagree about a delivery; one route, so the forges' closes cannot drift apart again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pidispatch.common.models import Matched, Target
from pidispatch.triggers.decision import Decision, Drop
from pidispatch.triggers.explain import NO_TRACE, Trace
from pidispatch.triggers.match.common import FireRule
from pidispatch.triggers.rules import CloseRule


def find_close_rule(
    rules: Iterable[CloseRule], word: str, number: int, type_: str, trace: Trace = NO_TRACE
) -> tuple[CloseRule | None, str]:
    """The first rule (file order) whose actions hold ``word`` and whose ``number``, if armed, is this
    item's; else the reason: ``close-number-not-matched`` when a rule was skipped only for its number
    (a one-shot armed for another item), ``no-matching-close-trigger`` when nothing is armed."""
    number_skipped = False
    for rule in rules:
        if word not in rule.actions:
            trace.rule(rule.index, type_, "action-not-in-rule")
            continue
        if rule.number is not None and rule.number != number:
            number_skipped = True
            trace.rule(rule.index, type_, "number-not-matched")
            continue
        return rule, ""
    return None, "close-number-not-matched" if number_skipped else "no-matching-close-trigger"


def close_route(
    rules: Iterable[CloseRule], word: str, type_: str, target: Target | None, authorized: Any,
    trace: Trace, fire: FireRule,
) -> Decision:
    """An issue or pull-request close on any forge: the item's number, the close rule that wants it, then
    the closer's verdict (only the literal ``True`` opens it). ``target`` is None when the payload has
    no usable number; ``word`` is the forge's close action, recorded in ``matched``."""
    if target is None:
        return Drop("missing-issue-number" if type_ == "issue" else "missing-pull-request")
    rule, reason = find_close_rule(rules, word, target.number, type_, trace)
    if rule is None:
        return Drop(reason)
    # After the match, so a close nobody wants never reports an authority decision nobody made.
    if authorized is not True:
        trace.rule(rule.index, type_, "closer-not-allowed")
        return Drop("closer-not-allowed")
    trace.rule(rule.index, type_)
    # Only an issue's number rides ``matched``: it is what a one-shot issue rule was armed on.
    matched = Matched(index=rule.index, type=type_, action=word, once=True if rule.once else None,
                      number=target.number if type_ == "issue" else None)
    return fire(rule.index, rule.run, target, matched)
