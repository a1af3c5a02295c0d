"""The GitLab filter. Pure.

Order: a numeric ``user.id``, not the harness (a project access token is a member and would clear the
access gate, so its own comments would loop), then the access verdict for *every* type: a label proves
nothing on GitLab (a Guest can label an issue at creation). Label rules match the labels *this event
added*, never the current set, or every later edit of a labelled issue would start another paid run.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec

from pidispatch.common.models import Matched, Sender, Target, Trigger
from pidispatch.forges.gitlab import FORGE
from pidispatch.forges.gitlab.payload import GitLabSubset
from pidispatch.triggers import jobs
from pidispatch.triggers.decision import Decision, Drop, Fire
from pidispatch.triggers.explain import NO_TRACE, Trace
from pidispatch.triggers.jsvalues import js_int
from pidispatch.triggers.match import comment
from pidispatch.triggers.match.close import close_route
from pidispatch.triggers.match.common import fire_label_rule, numeric_sender_gate
from pidispatch.triggers.match.predicate import matched_label, why_not
from pidispatch.triggers.rules import ForgeGroup, Rules, RunSpec

KIND = FORGE.name
CLOSE_WORD = "close"  # GitLab really says "close"
MR_ACTIONS = frozenset({"open", "update", "reopen", "approved"})


class GitLabMatchContext(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    action: Any
    subset: GitLabSubset
    sender: int
    group: ForgeGroup
    known_flows: frozenset[str]
    delivery: str
    authorized: Any
    trace: Trace


def decide(
    subset: GitLabSubset,
    rules: Rules,
    self_id: int | None,
    delivery: str,
    authorized: Any,
    trace: Trace = NO_TRACE,
) -> Decision:
    """``authorized`` is the member lookup's verdict (Developer or above); only ``True`` opens the gate."""
    sender = numeric_sender_gate(subset.user_id, self_id, authorized)
    if isinstance(sender, Drop):
        return sender
    kind = subset.object_kind if isinstance(subset.object_kind, str) else ""
    ctx = GitLabMatchContext(
        kind=kind, action=subset.action, subset=subset, sender=sender, group=rules.group(FORGE.name),
        known_flows=rules.known_flows, delivery=delivery, authorized=authorized, trace=trace,
    )
    if kind == "issue":
        if subset.action != CLOSE_WORD:
            return label_route(ctx)
        # Close first, labels only as a fallback: a close that also added a label fires the close rule
        # or the label rule, never both; a refused closer is never demoted into a label job.
        closed = issue_close(ctx)
        closer_refused = isinstance(closed, Drop) and closed.reason == "closer-not-allowed"
        if isinstance(closed, Drop) and not closer_refused and subset.label_changes is not None:
            return label_route(ctx)
        return closed
    if kind == "merge_request":
        return mr_close(ctx) if subset.action == CLOSE_WORD else merge_request(ctx)
    if kind == "note":
        return note(ctx)
    return Drop("unhandled-event")


def added_labels(subset: GitLabSubset) -> frozenset[str] | None:
    """The labels this event added, or None when it added none. ``open`` adds its whole set (the item
    did not exist before); any other action needs a ``changes.labels`` diff."""
    if subset.action == "open":
        return frozenset(subset.target.labels) or None
    changes = subset.label_changes
    if changes is None:
        return None
    return frozenset(changes.current).difference(changes.previous) or None


def _target(ctx: GitLabMatchContext, type_: str) -> Target | None:
    t = ctx.subset.target
    iid = js_int(t.iid)
    if iid is None:
        return None
    return Target(type=type_, number=iid, title=t.title, body=t.description)


def _fire(
    ctx: GitLabMatchContext, index: int, run: RunSpec, target: Target, matched: Matched, *,
    flow: str | None = None, comment_data: dict[str, Any] | None = None,
) -> Decision:
    repo = ctx.subset.project_path
    if not repo:
        return Drop("no-repository")
    project_id = js_int(ctx.subset.project_id)
    trigger = Trigger(
        event=ctx.kind, action=ctx.action if isinstance(ctx.action, str) else None, delivery_id=ctx.delivery,
        sender=Sender(id=ctx.sender), matched=matched, comment=comment_data,
    )
    # The numeric project id rides the job: a nested `group/sub/proj` path cannot be split safely.
    job = jobs.build_job(kind=KIND, delivery=ctx.delivery, repo=repo, target=target, trigger=trigger,
                         run=run, flow=flow, project_id=project_id)
    return Fire(job, index)


def label_route(ctx: GitLabMatchContext) -> Decision:
    ctx.trace.route("issue-label", "label")
    added = added_labels(ctx.subset)
    if added is None:
        return Drop("no-label-change")
    return fire_label_rule(ctx.group.labels(), added, _target(ctx, "issue"), ctx.trace, partial(_fire, ctx))


def merge_request(ctx: GitLabMatchContext) -> Decision:
    """A rule with a positive selector needs added labels matching it; one without fires on its
    actions alone (safe only because the access gate already ran). ``update`` covers pushes and every
    other edit alike."""
    ctx.trace.route("merge-request", "pull_request")
    action = ctx.action
    if not isinstance(action, str) or action not in MR_ACTIONS:
        return Drop("unhandled-event")
    added = added_labels(ctx.subset)
    for rule in ctx.group.pull_requests(action, every=ctx.trace.recording):
        if action not in rule.actions:
            ctx.trace.rule(rule.index, "pull_request", "action-not-in-rule")
            continue
        if rule.predicate.has_positive:
            why = "no-label-change" if added is None else why_not(rule.predicate, added)
            if why is not None:
                ctx.trace.rule(rule.index, "pull_request", why)
                continue
            assert added is not None
            matched = Matched(index=rule.index, type="label", label=matched_label(rule.predicate, added))
        else:
            # No ``any``/``all``: the action alone fires, and a ``none`` list is not checked here.
            matched = Matched(index=rule.index, type="pull_request", action=action)
        ctx.trace.rule(rule.index, "pull_request")
        target = _target(ctx, "pull_request")
        if target is None:
            return Drop("missing-pull-request")
        return _fire(ctx, rule.index, rule.run, target, matched)
    return Drop("no-matching-pr-trigger")


def note(ctx: GitLabMatchContext) -> Decision:
    ctx.trace.route("note", "comment")
    if ctx.action != "create":
        return Drop("unhandled-event")
    body = ctx.subset.note
    resolved = comment.resolve_traced(ctx.group.comment, body, ctx.known_flows, ctx.trace)
    if isinstance(resolved, Drop):
        return resolved
    rule, flow = resolved
    type_ = "pull_request" if ctx.subset.noteable_type == "MergeRequest" else "issue"
    target = _target(ctx, type_)
    if target is None:
        return Drop("missing-pull-request" if type_ == "pull_request" else "missing-issue-number")
    matched = Matched(index=rule.index, type="comment", phrase=rule.phrase)
    return _fire(ctx, rule.index, rule.run, target, matched, flow=flow, comment_data={"body": body})


def issue_close(ctx: GitLabMatchContext) -> Decision:
    ctx.trace.route("issue-close", "issue")
    # The closer verdict is unreachable behind the access gate today; kept so a close fails closed under
    # its own token.
    return close_route(ctx.group.issue, CLOSE_WORD, "issue", _target(ctx, "issue"), ctx.authorized,
                       ctx.trace, partial(_fire, ctx))


def mr_close(ctx: GitLabMatchContext) -> Decision:
    """Only an explicit close fires; GitLab's own ``merge`` action never does."""
    ctx.trace.route("merge-request-close", "pr_close")
    return close_route(ctx.group.pr_close, CLOSE_WORD, "pull_request", _target(ctx, "pull_request"),
                       ctx.authorized, ctx.trace, partial(_fire, ctx))
