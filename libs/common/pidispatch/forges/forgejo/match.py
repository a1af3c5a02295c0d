"""The Forgejo/Gitea filter. Pure.

Same fail-closed order as GitLab: a numeric sender, not the harness, then the resolved permission for
*every* rule type (whether a Forgejo label is self-gating is not verified across versions, and being
wrong would let a stranger start paid jobs). Actions arrive in Forgejo's own words and are mapped
explicitly; a word that is recognised but deliberately ignored (``label_cleared``: removing a label
must never start a run) drops as ``action-not-actionable``, an unknown one as ``unhandled-event``.
Rules are matched against the raw word, which is what the operator wrote and the loader validated.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec

from pidispatch.common.models import Matched, Sender, Target, Trigger
from pidispatch.forges.forgejo import FORGE
from pidispatch.forges.forgejo.payload import ForgejoPullRequestSubset, ForgejoSubset
from pidispatch.triggers import jobs
from pidispatch.triggers.decision import Decision, Drop, Fire
from pidispatch.triggers.explain import NO_TRACE, Trace
from pidispatch.triggers.jsvalues import js_int
from pidispatch.triggers.match import comment
from pidispatch.triggers.match.close import close_route
from pidispatch.triggers.match.common import fire_label_rule, numeric_sender_gate, present
from pidispatch.triggers.match.predicate import why_not
from pidispatch.triggers.rules import ForgeGroup, Rules, RunSpec

KIND = FORGE.name
CLOSE_WORD = "closed"
ISSUE_ACTIONS = {"opened": "opened", "reopened": "reopened", "label_updated": "labeled", "closed": "closed"}
PR_ACTIONS = {**ISSUE_ACTIONS, "synchronized": "synchronize"}
# Recognised and deliberately not actionable; disjoint from both tables.
IGNORED_ACTIONS = frozenset({
    "label_cleared", "edited", "assigned", "unassigned", "milestoned", "demilestoned", "reviewed",
    "review_requested", "review_request_removed",
})
LABEL_ROUTE_ACTIONS = frozenset({"opened", "labeled", "reopened"})
PR_ROUTE_ACTIONS = frozenset({"labeled", "opened", "synchronize", "reopened"})
# Gitea/Forgejo name the event header after the hook family ("issues" for a label change), but versions
# and the Forgejo/Gitea header pair may carry the hook type itself: fold those onto their family.
EVENT_FAMILY = {
    "issue_assign": "issues", "issue_label": "issues", "issue_milestone": "issues",
    "pull_request_assign": "pull_request", "pull_request_label": "pull_request",
    "pull_request_milestone": "pull_request", "pull_request_sync": "pull_request",
    "pull_request_review_request": "pull_request",
}


def canonical_event(event_name: str, subset: ForgejoSubset) -> str:
    """The event family a stored Forgejo event name belongs to.

    ``pull_request_comment`` names two hooks: a comment on a pull request (the hook type, whose body is
    an issue-comment payload) and a review comment (the family name, a pull-request payload whose action
    is ``reviewed``). The body tells them apart; reviews stay under their own name and drop as not
    actionable."""
    if event_name == "pull_request_comment" and subset.has_comment:
        return "issue_comment"
    return EVENT_FAMILY.get(event_name, event_name)


def map_action(event: str, raw: str) -> str | None:
    table = PR_ACTIONS if event == "pull_request" else ISSUE_ACTIONS
    return table.get(raw)


def is_recognized(raw: str) -> bool:
    return raw in IGNORED_ACTIONS or raw in PR_ACTIONS


class ForgejoMatchContext(msgspec.Struct, frozen=True, kw_only=True):
    event: str
    raw: str
    subset: ForgejoSubset
    sender: int
    group: ForgeGroup
    known_flows: frozenset[str]
    delivery: str
    authorized: Any
    trace: Trace


def decide(
    event_name: str,
    subset: ForgejoSubset,
    rules: Rules,
    self_id: int | None,
    delivery: str,
    authorized: Any,
    trace: Trace = NO_TRACE,
) -> Decision:
    """``authorized`` is the permission lookup's verdict for the sender; only ``True`` opens the gate."""
    sender = numeric_sender_gate(subset.sender_id, self_id, authorized)
    if isinstance(sender, Drop):
        return sender
    raw = subset.action if isinstance(subset.action, str) else ""
    event = canonical_event(event_name, subset)
    ctx = ForgejoMatchContext(
        event=event, raw=raw, subset=subset, sender=sender, group=rules.group(FORGE.name),
        known_flows=rules.known_flows, delivery=delivery, authorized=authorized, trace=trace,
    )
    unactionable = Drop("action-not-actionable" if is_recognized(raw) else "unhandled-event")
    if event == "issue_comment":
        # Outside the tables: a comment's `created` is the same word everywhere.
        return issue_comment(ctx) if raw == "created" else unactionable
    action = map_action(event, raw)
    if action is None:
        return unactionable
    if event == "issues" and action in LABEL_ROUTE_ACTIONS:
        return issue_label(ctx)
    if event == "issues" and action == "closed":
        return issue_close(ctx)
    if event == "pull_request" and raw == CLOSE_WORD:
        return pr_close(ctx)
    if event == "pull_request" and action in PR_ROUTE_ACTIONS:
        return pull_request(ctx)
    return Drop("unhandled-event")


def _fire(
    ctx: ForgejoMatchContext, index: int, run: RunSpec, target: Target, matched: Matched, *,
    flow: str | None = None, comment_data: dict[str, Any] | None = None,
) -> Decision:
    repo = ctx.subset.repository
    if not repo:
        return Drop("no-repository")
    # The raw Forgejo word: the record says what the forge said, not our translation.
    trigger = Trigger(event=ctx.event, action=ctx.raw, delivery_id=ctx.delivery,
                      sender=Sender(id=ctx.sender), matched=matched, comment=comment_data)
    job = jobs.build_job(kind=KIND, delivery=ctx.delivery, repo=repo, target=target, trigger=trigger,
                         run=run, flow=flow)
    return Fire(job, index)


def _issue_target(ctx: ForgejoMatchContext, type_: str = "issue") -> Target | None:
    issue = ctx.subset.issue
    number = js_int(issue.number) if issue is not None else None
    if issue is None or number is None:
        return None
    return Target(type=type_, number=number, title=issue.title, body=issue.body)


def _pr_target(pr: ForgejoPullRequestSubset | None) -> Target | None:
    """Unlike GitHub, head.repo stays an object ``{full_name}``. None without a usable number."""
    number = js_int(pr.number) if pr is not None else None
    if pr is None or number is None:
        return None
    return Target(
        type="pull_request", number=number, title=pr.title, body=pr.body,
        head={**present(ref=pr.head_ref, sha=pr.head_sha), "repo": present(full_name=pr.head_repo)},
        base=present(ref=pr.base_ref),
    )


def issue_comment(ctx: ForgejoMatchContext) -> Decision:
    """No association check: the resolved permission already gated the commenter."""
    ctx.trace.route("comment", "comment")
    body = ctx.subset.comment_body
    resolved = comment.resolve_traced(ctx.group.comment, body, ctx.known_flows, ctx.trace)
    if isinstance(resolved, Drop):
        return resolved
    rule, flow = resolved
    # `is_pull` is top-level on Forgejo; reading the wrong marker would route PR comments as issues.
    target = _issue_target(ctx, "pull_request" if ctx.subset.is_pull else "issue")
    if target is None:
        return Drop("missing-issue-number")
    matched = Matched(index=rule.index, type="comment", phrase=rule.phrase)
    return _fire(ctx, rule.index, rule.run, target, matched, flow=flow, comment_data={"body": body})


def issue_label(ctx: ForgejoMatchContext) -> Decision:
    """The current label set, GitHub's semantics (re-fires on reopen or on an unrelated label)."""
    ctx.trace.route("issue-label", "label")
    labels = frozenset(ctx.subset.issue.labels) if ctx.subset.issue else frozenset()
    return fire_label_rule(ctx.group.labels(), labels, _issue_target(ctx), ctx.trace, partial(_fire, ctx))


def pull_request(ctx: ForgejoMatchContext) -> Decision:
    ctx.trace.route("pull-request", "pull_request")
    pr = ctx.subset.pull_request
    if pr is None:
        return Drop("missing-pull-request")
    labels = frozenset(pr.labels)
    for rule in ctx.group.pull_requests(ctx.raw, every=ctx.trace.recording):
        if ctx.raw not in rule.actions:
            ctx.trace.rule(rule.index, "pull_request", "action-not-in-rule")
            continue
        why = why_not(rule.predicate, labels)
        if why is not None:
            ctx.trace.rule(rule.index, "pull_request", why)
            continue
        ctx.trace.rule(rule.index, "pull_request")
        target = _pr_target(pr)
        if target is None:
            return Drop("missing-pull-request")
        matched = Matched(index=rule.index, type="pull_request", action=ctx.raw)
        return _fire(ctx, rule.index, rule.run, target, matched)
    return Drop("no-matching-pr-trigger")


def issue_close(ctx: ForgejoMatchContext) -> Decision:
    ctx.trace.route("issue-close", "issue")
    # The closer verdict is unreachable behind the global gate today; kept so a close fails closed under
    # its own token.
    return close_route(ctx.group.issue, CLOSE_WORD, "issue", _issue_target(ctx), ctx.authorized, ctx.trace,
                       partial(_fire, ctx))


def pr_close(ctx: ForgejoMatchContext) -> Decision:
    ctx.trace.route("pr-close", "pr_close")
    target = _pr_target(ctx.subset.pull_request)
    return close_route(ctx.group.pr_close, CLOSE_WORD, "pull_request", target, ctx.authorized, ctx.trace,
                       partial(_fire, ctx))
