"""Which close rule wants this close. Pure.

One derivation shared by every forge's close route and by the question "is a lookup worth making", so
the two can never disagree about a delivery.
"""

from __future__ import annotations

from collections.abc import Iterable

from pidispatch.router.explain import NO_TRACE, Trace
from pidispatch.router.rules import CloseRule


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
