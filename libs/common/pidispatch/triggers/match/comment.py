"""The comment route's phrase and flow resolution, shared by every forge. Pure."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from pidispatch.triggers.decision import Drop
from pidispatch.triggers.explain import Trace
from pidispatch.triggers.jsvalues import JS_NON_SPACE, JS_SPACE
from pidispatch.triggers.rules import CommentRule


@lru_cache(maxsize=64)
def _override(phrase: str) -> re.Pattern[str]:
    # The phrase is configuration, never a pattern; \s and \S are JavaScript's (``jsvalues``).
    return re.compile(f"{re.escape(phrase)}{JS_SPACE}+({JS_NON_SPACE}+)")


def resolve(rule: CommentRule | None, body: Any, known_flows: frozenset[str]) -> Drop | str | None:
    """The flow to run (a string), None for a command rule (the phrase alone fires it), or a Drop.

    A flow rule's ``<phrase> <word>`` picks ``<word>`` when it is a flow the file knows (any forge),
    otherwise the rule's default. A command rule skips this step entirely: trailing words are data, so
    a commenter can neither retarget the command onto a flow nor veto it with an unknown word.
    """
    if rule is None or not isinstance(body, str) or rule.phrase not in body:
        return Drop("no-trigger-phrase")
    if rule.run.command is not None:
        return None
    flow = rule.run.flow
    named = _override(rule.phrase).search(body)
    if named and named.group(1) in known_flows:
        flow = named.group(1)
    if not flow:
        return Drop("no-flow")
    return flow


def resolve_traced(
    rule: CommentRule | None, body: Any, known_flows: frozenset[str], trace: Trace
) -> Drop | tuple[CommentRule, str | None]:
    """``resolve`` with the comment rule's verdict traced: the rule and its flow, or the Drop."""
    flow = resolve(rule, body, known_flows)
    if isinstance(flow, Drop):
        if rule is not None:
            trace.rule(rule.index, "comment", flow.reason)
        return flow
    assert rule is not None  # resolve() drops without a rule
    trace.rule(rule.index, "comment")
    return rule, flow
