"""One stored event in, one decision out: project the forge's subset, run its filter, and say whether a
forge lookup is needed first. Pure; the service does the I/O (the lookup, the enqueue, the record).

A lookup is asked for (``Ask``) only when the delivery would fire if the actor were authorised and the
forge's route says its verdict could change the outcome (``RouterForge.gated``: on GitHub only a close
some close rule wants, elsewhere any delivery that would fire). A delivery that cannot fire whatever
the verdict returns the filter's own reason without a lookup (a forge is asked only when its answer can
change the outcome: so a guest's push reads ``unhandled-event``, not ``author-not-allowed``;
fire/no-fire is the same either way). The missing-sender and self guards run before any question, so
neither ever costs a lookup.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from pidispatch import forges
from pidispatch.common.models import Event
from pidispatch.forges.route import RouterForge, route_of
from pidispatch.triggers import jobs
from pidispatch.triggers.decision import Ask, Drop, Fire, Subject
from pidispatch.triggers.explain import NO_TRACE, Explanation, Trace, rule_listing, safe_word
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.rules import Rules
from pidispatch.triggers.subsets import MalformedPayload

__all__ = ["Ask", "Drop", "Fire", "MalformedPayload", "Subject", "explain", "plan", "planned", "resume"]


class _Routes(Mapping[str, RouterForge]):
    """Every forge's route by name, each loaded on first use (so importing this module loads none)."""

    def __getitem__(self, name: str) -> RouterForge:
        forge = forges.find(name)
        if forge is None:
            raise KeyError(name)
        return route_of(forge)

    def __iter__(self) -> Iterator[str]:
        return iter(forges.names())

    def __len__(self) -> int:
        return len(forges.FORGES)


ARMS: Mapping[str, RouterForge] = _Routes()


class _Settled(msgspec.Struct, frozen=True, kw_only=True):
    decision: Drop | Fire | Ask
    needs_authority: bool = False
    verdict: bool | None = None
    would_fire: Fire | None = None  # for an Ask: the job it would become


def _settle(
    arm: RouterForge, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: bool | None,
    trace: Trace,
) -> _Settled:
    """The one derivation behind ``plan``, ``resume`` and ``explain``: decide as if authorised; when
    that fires and the forge gates it, the verdict decides (or, unknown, becomes the question)."""
    if_allowed = arm.decide(event, subset, rules, self_ids, True, trace)
    if isinstance(if_allowed, Drop) or not arm.gated(event, subset, rules, self_ids):
        return _Settled(decision=if_allowed)
    question = arm.question(event, subset)
    if question is None:
        authorized = False  # nothing to ask about: fail closed, as the lookup itself would
    if authorized is None:
        assert question is not None
        return _Settled(decision=Ask(question), needs_authority=True, would_fire=if_allowed)
    trace.reset()
    decision = arm.decide(event, subset, rules, self_ids, authorized, trace)
    return _Settled(decision=decision, needs_authority=True, verdict=authorized is True)


def _arm(event: Event) -> tuple[RouterForge, Any] | None:
    arm = ARMS.get(event.forge)
    if arm is None:
        return None
    return arm, arm.project(event.body)


def plan(event: Event, rules: Rules, self_ids: SelfIds) -> Drop | Fire | Ask:
    """Decide one stored event, or say what to ask the forge first. Raises ``MalformedPayload`` (a
    ``ValueError``) for a body no delivery of that forge can have."""
    return planned(event, rules, self_ids)[0]


def subject_of(event: str | None) -> Subject:
    """What an entry is about when its body is not read: its event type, when that is a forge word."""
    return Subject(safe_word(event) or "?")


def planned(event: Event, rules: Rules, self_ids: SelfIds) -> tuple[Drop | Fire | Ask, Subject]:
    """``plan``, and what the delivery is about, from one projection of its body."""
    about = subject_of(event.event)
    found = _arm(event)
    if found is None:
        return Drop("unhandled-event"), about
    arm, subset = found
    about = Subject(about.event, safe_word(arm.action(event, subset)), arm.target(subset))
    return _settle(arm, event, subset, rules, self_ids, None, NO_TRACE).decision, about


def resume(event: Event, rules: Rules, self_ids: SelfIds, authorized: bool) -> Drop | Fire:
    """Finish a decision once the forge has answered ``plan``'s question; only ``True`` opens a gate
    (``resume(False)`` drops with the gate's own reason)."""
    found = _arm(event)
    if found is None:
        return Drop("unhandled-event")
    arm, subset = found
    decision = _settle(arm, event, subset, rules, self_ids, authorized is True, NO_TRACE).decision
    assert not isinstance(decision, Ask)  # a known verdict never asks
    return decision


def explain(event: Event, rules: Rules, self_ids: SelfIds, authorized: bool | None = None) -> Explanation:
    """Re-decide ``event`` against ``rules`` and say why, rule by rule. Changes nothing and asks no
    forge: with ``authorized`` None a gated delivery reads as "would fire if allowed"."""
    trace = Trace()
    found = _arm(event)
    if found is None:
        settled, action = _Settled(decision=Drop("unhandled-event")), None
    else:
        arm, subset = found
        settled = _settle(arm, event, subset, rules, self_ids, authorized, trace)
        action = arm.action(event, subset)
    decision = settled.decision
    fired = decision if isinstance(decision, Fire) else settled.would_fire
    return Explanation(
        forge=safe_word(event.forge) or "?",
        event=safe_word(event.event) or "?",
        action=safe_word(action),
        delivery=event.delivery,
        needs_authority=settled.needs_authority,
        verdict=settled.verdict,
        outcome="fire" if isinstance(decision, Fire) else "ask" if isinstance(decision, Ask) else "drop",
        reason=decision.reason if isinstance(decision, Drop) else "",
        trigger=fired.index if fired is not None else None,
        jobs=tuple(j.id for j in jobs.fan_out(decision.job)) if isinstance(decision, Fire) else (),
        routes=tuple(trace.routes),
        rules=rule_listing(rules, event.forge, trace),
    )
