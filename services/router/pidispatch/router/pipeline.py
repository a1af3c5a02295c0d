"""One stored event in, one decision out: project the forge's subset, run its filter, and say whether a
forge lookup is needed first. Pure; the service does the I/O (the lookup, the enqueue, the record).

A lookup is asked for (``Ask``) only when the delivery would fire if the actor were authorised and the
forge gates it: GitHub for a close some close rule wants, GitLab/Forgejo/Azure for any delivery that
would fire. A delivery that cannot fire whatever the verdict returns the filter's own reason without a
lookup (a forge is asked only when its answer can change the outcome: so a guest's push reads
``unhandled-event``, not ``author-not-allowed``; fire/no-fire is the same either way). The
missing-sender and self guards run before any question, so neither ever costs a lookup.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from pidispatch.common.models import Event
from pidispatch.forges.azure import FORGE as AZURE
from pidispatch.forges.azure import match as azure_match
from pidispatch.forges.azure import payload as azure_subset
from pidispatch.forges.forgejo import FORGE as FORGEJO
from pidispatch.forges.forgejo import match as forgejo_match
from pidispatch.forges.forgejo import payload as forgejo_subset
from pidispatch.forges.github import FORGE as GITHUB
from pidispatch.forges.github import match as github_match
from pidispatch.forges.github import payload as github_subset
from pidispatch.forges.gitlab import FORGE as GITLAB
from pidispatch.forges.gitlab import match as gitlab_match
from pidispatch.forges.gitlab import payload as gitlab_subset
from pidispatch.router import jobs
from pidispatch.router.decision import Ask, Decision, Drop, Fire
from pidispatch.router.explain import NO_TRACE, Explanation, Trace, rule_listing, safe_word
from pidispatch.router.lookup import (
    AzureMembership,
    ForgejoPermission,
    GithubCloser,
    GitlabMember,
    Question,
    SelfIds,
)
from pidispatch.router.match.common import is_int
from pidispatch.router.rules import Rules
from pidispatch.router.subsets import MalformedPayload

__all__ = ["Ask", "Drop", "Fire", "MalformedPayload", "explain", "plan", "resume"]


class _Arm(Protocol):
    """One forge: its projection, its filter, and what to ask the forge about a delivery."""

    name: str

    def project(self, body: str) -> Any: ...

    def decide(
        self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any, trace: Trace
    ) -> Decision: ...

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        """Would the verdict change this (firing) delivery's outcome?"""
        ...

    def question(self, event: Event, subset: Any) -> Question | None:
        """None when the question cannot even be put (no login, no project id): refused, no call."""
        ...

    def action(self, event: Event, subset: Any) -> Any: ...


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class _GitHub:
    name = GITHUB.name

    def project(self, body: str) -> github_subset.GitHubSubset:
        return github_subset.project(body)

    def decide(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any,
               trace: Trace) -> Decision:
        return github_match.decide(event.event, subset, rules, self_ids.github, event.delivery, authorized,
                                   trace)

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        return github_match.wants_closer_authority(event.event, subset, rules.github, self_ids.github)

    def question(self, event: Event, subset: Any) -> Question | None:
        repo, login = _text(subset.repository), _text(subset.sender_login)
        return GithubCloser(repo=repo, login=login) if repo and login else None

    def action(self, event: Event, subset: Any) -> Any:
        return subset.action


class _GitLab:
    name = GITLAB.name

    def project(self, body: str) -> gitlab_subset.GitLabSubset:
        return gitlab_subset.project(body)

    def decide(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any,
               trace: Trace) -> Decision:
        return gitlab_match.decide(subset, rules, self_ids.gitlab, event.delivery, authorized, trace)

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        return True  # labels are no approval on GitLab: every type needs the member verdict

    def question(self, event: Event, subset: Any) -> Question | None:
        if is_int(subset.project_id) and is_int(subset.user_id):
            return GitlabMember(project_id=subset.project_id, user_id=subset.user_id)
        return None

    def action(self, event: Event, subset: Any) -> Any:
        return subset.action


class _Forgejo:
    name = FORGEJO.name

    def project(self, body: str) -> forgejo_subset.ForgejoSubset:
        return forgejo_subset.project(body)

    def decide(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any,
               trace: Trace) -> Decision:
        return forgejo_match.decide(event.event, subset, rules, self_ids.forgejo, event.delivery, authorized,
                                    trace)

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        return True

    def question(self, event: Event, subset: Any) -> Question | None:
        repo, login = _text(subset.repository), _text(subset.sender_login)
        return ForgejoPermission(repo=repo, login=login) if repo and login else None

    def action(self, event: Event, subset: Any) -> Any:
        return subset.action


class _Azure:
    name = AZURE.name

    def project(self, body: str) -> azure_subset.AzureSubset:
        return azure_subset.project(body)

    def decide(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any,
               trace: Trace) -> Decision:
        return azure_match.decide(subset, rules, self_ids, event.delivery, authorized, trace)

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        return True

    def question(self, event: Event, subset: Any) -> Question | None:
        project_id = _text(subset.project_id)
        guid, email = azure_match.actor(subset)
        if project_id is None:
            return None
        # By GUID when the delivery has one; the address only for an address-only actor.
        return AzureMembership(project_id=project_id, actor_id=guid, actor_email=None if guid else email)

    def action(self, event: Event, subset: Any) -> Any:
        if subset.event_type in ("workitem.commented", azure_subset.PR_COMMENT_EVENT):
            return "commented"
        return {"workitem.created": "created", "workitem.updated": "updated",
                **azure_match.PR_ACTION_FOR}.get(subset.event_type)


ARMS: dict[str, _Arm] = {arm.name: arm for arm in (_GitHub(), _GitLab(), _Forgejo(), _Azure())}


class _Settled(msgspec.Struct, frozen=True, kw_only=True):
    decision: Drop | Fire | Ask
    needs_authority: bool = False
    verdict: bool | None = None
    would_fire: Fire | None = None  # for an Ask: the job it would become


def _settle(
    arm: _Arm, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: bool | None,
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


def _arm(event: Event) -> tuple[_Arm, Any] | None:
    arm = ARMS.get(event.forge)
    if arm is None:
        return None
    return arm, arm.project(event.body)


def plan(event: Event, rules: Rules, self_ids: SelfIds) -> Drop | Fire | Ask:
    """Decide one stored event, or say what to ask the forge first. Raises ``MalformedPayload`` (a
    ``ValueError``) for a body no delivery of that forge can have."""
    found = _arm(event)
    if found is None:
        return Drop("unhandled-event")
    arm, subset = found
    return _settle(arm, event, subset, rules, self_ids, None, NO_TRACE).decision


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
