"""The Azure DevOps filter. Pure.

Azure identifies an actor two ways (a GUID on pull-request events, an address on work items), so the
identity step compares both and an empty side never matches: a deployment that resolved only its GUID
must not match every address-only actor. Then the membership verdict for every type, then the route.
Tags match on the diff of an update, never the current set (a paid run per later edit otherwise).
A job carries ``"azid-" + sha256(address)[:16]`` for an address-only actor, never the address.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from functools import partial
from typing import Any

import msgspec

from pidispatch.common.models import Matched, Sender, Target, Trigger
from pidispatch.forges.azure import FORGE
from pidispatch.forges.azure.payload import PR_COMMENT_EVENT, AzureSubset
from pidispatch.triggers import jobs
from pidispatch.triggers.decision import Decision, Drop, Fire
from pidispatch.triggers.explain import NO_TRACE, Trace
from pidispatch.triggers.jsvalues import js_int
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.match import comment
from pidispatch.triggers.match.common import fire_label_rule, present
from pidispatch.triggers.rules import ForgeGroup, Rules, RunSpec

KIND = FORGE.name
PR_ACTION_FOR = {"git.pullrequest.created": "created", "git.pullrequest.updated": "updated"}


def stable_actor_id(email: str) -> str:
    """An opaque, stable id for an address-only actor: "same person twice" stays answerable without
    an address in event.json or a run record."""
    return "azid-" + hashlib.sha256(email.encode()).hexdigest()[:16]


def actor(subset: AzureSubset) -> tuple[str | None, str | None]:
    """(GUID, address), each None unless a non-empty string."""
    guid = subset.actor_id if isinstance(subset.actor_id, str) and subset.actor_id else None
    email = subset.actor_email if isinstance(subset.actor_email, str) and subset.actor_email else None
    return guid, email


def is_self(subset: AzureSubset, self_ids: SelfIds) -> bool:
    guid, email = actor(subset)
    own = self_ids.of(FORGE.name)  # (GUID, address), as resolve_self returned them
    own_guid, own_email = own if isinstance(own, tuple) else (None, None)
    self_guid = own_guid or None
    self_email = own_email.lower() if own_email else None
    return (guid is not None and guid == self_guid) or (email is not None and email == self_email)


class AzureMatchContext(msgspec.Struct, frozen=True, kw_only=True):
    subset: AzureSubset
    group: ForgeGroup
    known_flows: frozenset[str]
    delivery: str
    sender: str
    trace: Trace


def decide(
    subset: AzureSubset,
    rules: Rules,
    self_ids: SelfIds,
    delivery: str,
    authorized: Any,
    trace: Trace = NO_TRACE,
) -> Decision:
    """``authorized`` is the project-membership verdict; only ``True`` opens the gate."""
    guid, email = actor(subset)
    if guid is None and email is None:
        return Drop("missing-sender-id")
    if is_self(subset, self_ids):
        return Drop("self")
    if authorized is not True:
        return Drop("author-not-allowed")
    sender = guid if guid is not None else stable_actor_id(email or "")
    ctx = AzureMatchContext(
        subset=subset, group=rules.group(FORGE.name), known_flows=rules.known_flows, delivery=delivery,
        sender=sender, trace=trace,
    )
    event = subset.event_type if isinstance(subset.event_type, str) else ""
    if event == "workitem.commented":
        return comment_route(ctx, "issue")
    if event in ("workitem.created", "workitem.updated"):
        return tag_route(ctx, event)
    if event == PR_COMMENT_EVENT:
        return comment_route(ctx, "pull_request")
    if event in PR_ACTION_FOR:
        return pull_request(ctx, PR_ACTION_FOR[event])
    return Drop("unhandled-event")


def _fire(
    ctx: AzureMatchContext, index: int, run: RunSpec, target: Target, matched: Matched, action: str, *,
    flow: str | None = None, comment_data: dict[str, Any] | None = None,
) -> Decision:
    """The scope is ``<project>/<repository>`` without the organisation (one per deployment): the
    project from the payload, the repository from a pull-request payload or else the matched rule."""
    s = ctx.subset
    project = s.project_name
    repository = s.repository_name if s.repository_name is not None else run.repository
    if not isinstance(project, str) or not project or not isinstance(repository, str) or not repository:
        return Drop("no-repository")
    azure = {
        "project": project,
        **({"projectId": s.project_id} if isinstance(s.project_id, str) and s.project_id else {}),
        "repository": repository,
        **({"repositoryId": s.repository_id} if isinstance(s.repository_id, str) and s.repository_id else {}),
    }
    trigger = Trigger(event=s.event_type, action=action, delivery_id=ctx.delivery,
                      sender=Sender(id=ctx.sender), matched=matched, comment=comment_data)
    job = jobs.build_job(kind=KIND, delivery=ctx.delivery, repo=f"{project}/{repository}", target=target,
                         trigger=trigger, run=run, flow=flow, azure=azure)
    return Fire(job, index)


def _target(ctx: AzureMatchContext, type_: str) -> Target | None:
    s = ctx.subset
    number = js_int(s.number)
    if number is None:
        return None
    if type_ == "pull_request":
        return Target(type=type_, number=number, title=s.title, body=s.body,
                      head=present(ref=s.head_ref), base=present(ref=s.base_ref))
    return Target(type=type_, number=number, title=s.title, body=s.body)


def tag_route(ctx: AzureMatchContext, event: str) -> Decision:
    ctx.trace.route("work-item-tags", "label")
    s = ctx.subset
    if event == "workitem.updated":
        if s.tag_changes is None:
            return Drop("no-label-change")  # an update that moved no tag
        previous = frozenset(s.tag_changes.previous)
        added: Collection[str] = frozenset(t for t in s.tag_changes.current if t not in previous)
        if not added:
            return Drop("no-label-change")  # removal only: removing a tag never starts a run
        action = "updated"
    else:
        added, action = frozenset(s.tags), "created"
    return fire_label_rule(ctx.group.labels(), added, _target(ctx, "issue"), ctx.trace,
                           partial(_fire, ctx, action=action))


def comment_route(ctx: AzureMatchContext, type_: str) -> Decision:
    ctx.trace.route("comment", "comment")
    body = ctx.subset.comment
    resolved = comment.resolve_traced(ctx.group.comment, body, ctx.known_flows, ctx.trace)
    if isinstance(resolved, Drop):
        return resolved
    rule, flow = resolved
    target = _target(ctx, type_)
    if target is None:
        return Drop("missing-pull-request" if type_ == "pull_request" else "missing-issue-number")
    matched = Matched(index=rule.index, type="comment", phrase=rule.phrase)
    return _fire(ctx, rule.index, rule.run, target, matched, "commented", flow=flow,
                 comment_data={"body": body})


def pull_request(ctx: AzureMatchContext, action: str) -> Decision:
    """Azure puts no labels on a pull request (a predicate is refused at load): the action selects."""
    ctx.trace.route("pull-request", "pull_request")
    for rule in ctx.group.pull_requests(action, every=ctx.trace.recording):
        if action not in rule.actions:
            ctx.trace.rule(rule.index, "pull_request", "action-not-in-rule")
            continue
        ctx.trace.rule(rule.index, "pull_request")
        target = _target(ctx, "pull_request")
        if target is None:
            return Drop("missing-pull-request")
        matched = Matched(index=rule.index, type="pull_request", action=action)
        return _fire(ctx, rule.index, rule.run, target, matched, action)
    return Drop("no-matching-pr-trigger")
