"""The comment phrase and flow override shared by every forge."""

from __future__ import annotations

from typing import Any

import pytest

from pidispatch.triggers.decision import Drop
from pidispatch.triggers.match.comment import resolve
from pidispatch.triggers.rules import CommentRule, RunSpec

KNOWN = frozenset({"fix", "review", "a.b"})


def rule(phrase: str = "@pi", **run: Any) -> CommentRule:
    return CommentRule(index=0, phrase=phrase, run=RunSpec(**run))


@pytest.mark.parametrize(
    ("body", "outcome"),
    [
        ("@pi review", "review"),
        ("@pi   review now", "review"),
        ("@pi\nreview", "review"),
        ("@pi reviewing", "triage"),  # the whole token must be a known flow
        ("@pireview", "triage"),  # whitespace is required after the phrase
        ("hey @pi", "triage"),
        ("@pi unknown", "triage"),
        ("no phrase", Drop("no-trigger-phrase")),
        # JavaScript's \s and \S: the BOM, U+00A0 and U+3000 separate, U+001C..U+001F are word text.
        ("@pi\ufeffreview", "review"),
        ("@pi\xa0review", "review"),
        ("@pi\u3000review", "review"),
        ("@pi\x1creview", "triage"),
        ("@pi\x1freview", "triage"),
        ("@pi review\x1d", "triage"),  # the separator is part of the word, which is no known flow
    ],
)
def test_a_known_flow_after_the_phrase_overrides_the_default(body: str, outcome: Any) -> None:
    assert resolve(rule(flow="triage"), body, KNOWN) == outcome


def test_the_phrase_is_literal_text_not_a_pattern() -> None:
    assert resolve(rule("a.b?", flow="triage"), "axb fix", KNOWN) == Drop("no-trigger-phrase")
    assert resolve(rule("a.b?", flow="triage"), "a.b? fix", KNOWN) == "fix"


def test_without_a_default_and_without_a_known_flow_it_is_no_flow() -> None:
    assert resolve(rule(), "@pi please", KNOWN) == Drop("no-flow")
    assert resolve(rule(flow=""), "@pi please", KNOWN) == Drop("no-flow")


def test_a_command_rule_fires_on_the_phrase_alone() -> None:
    assert resolve(rule(command="standup"), "@pi fix", KNOWN) is None
    assert resolve(rule(command="standup"), "@pi nonesuch", KNOWN) is None


@pytest.mark.parametrize("body", [None, 7, {"text": "@pi"}])
def test_a_body_that_is_not_text_has_no_phrase(body: Any) -> None:
    assert resolve(rule(flow="fix"), body, KNOWN) == Drop("no-trigger-phrase")


def test_no_rule_is_no_trigger_phrase() -> None:
    assert resolve(None, "@pi fix", KNOWN) == Drop("no-trigger-phrase")
