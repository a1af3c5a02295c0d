"""The GitHub filter. Pure: a projected subset and the rules in, a decision out.

Order is load-bearing and fail-closed: no usable sender → drop; the harness itself → drop (before any
author or label logic: under a PAT the harness is OWNER and its own comments and pushes would pass);
only then route on event + action. Anything not routed is ``unhandled-event``.

Three gates, and which field each reads is the point: ``labeled`` is gated by the label (only
collaborators can label, so the label is the approval); auto actions by the PR author's association;
a submitted review by the *reviewer's*. Close routes are gated by the closer's write access, which the
router looks up only for a close some rule wants (``wants_closer_authority``) and passes in.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from pidispatch.common.models import Matched, Sender, Target, Trigger
from pidispatch.forges.github import FORGE
from pidispatch.forges.github.payload import (
    GitHubIssueSubset,
    GitHubPullRequestSubset,
    GitHubSubset,
    ReviewSubset,
)
from pidispatch.triggers import jobs
from pidispatch.triggers.decision import Decision, Drop, Fire
from pidispatch.triggers.explain import NO_TRACE, Trace
from pidispatch.triggers.jsvalues import js_int, js_trim
from pidispatch.triggers.match import comment
from pidispatch.triggers.match.close import close_route, find_close_rule
from pidispatch.triggers.match.common import fire_label_rule, present, sender_gate
from pidispatch.triggers.match.predicate import why_not
from pidispatch.triggers.rules import ForgeGroup, Rules, RunSpec

__all__ = ["Decision", "Drop", "Fire", "decide", "wants_closer_authority"]

KIND = FORGE.name
AUTHOR_ALLOWLIST = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
PR_AUTO_ACTIONS = frozenset({"opened", "synchronize", "reopened"})
# triggers.json's word for a submitted review; the wire says `submitted` on `pull_request_review`.
REVIEW_ACTION = "review_submitted"
CLOSE_WORD = "closed"


class GitHubMatchContext(msgspec.Struct, frozen=True, kw_only=True):
    event: str
    action: str
    subset: GitHubSubset
    sender: int
    group: ForgeGroup
    known_flows: frozenset[str]
    delivery: str
    closer_authorized: Any
    trace: Trace


Route = Callable[[GitHubMatchContext], Decision]


def decide(
    event_name: str,
    subset: GitHubSubset,
    rules: Rules,
    self_id: int | None,
    delivery: str,
    closer_authorized: Any = None,
    trace: Trace = NO_TRACE,
) -> Decision:
    """``closer_authorized`` is the closer lookup's verdict; only the literal ``True`` opens a close."""
    # GitHub gates authority per route (label, association, closer), not up front.
    sender = sender_gate(subset.sender_id, self_id)
    if isinstance(sender, Drop):
        return sender
    action = subset.action if isinstance(subset.action, str) else ""
    route = ROUTES.get((event_name, action))
    if route is None:
        return Drop("unhandled-event")
    ctx = GitHubMatchContext(
        event=event_name, action=action, subset=subset, sender=sender, group=rules.group(FORGE.name),
        known_flows=rules.known_flows, delivery=delivery, closer_authorized=closer_authorized, trace=trace,
    )
    return route(ctx)


def wants_closer_authority(
    event_name: str, subset: GitHubSubset, group: ForgeGroup, self_id: int | None
) -> bool:
    """Is a closer lookup worth making? Only for a close some close rule wants, never for the harness's
    own close (the filter drops it as ``self``) nor for a shape the route would refuse: the same guards
    and the same ``find_close_rule`` as the routes, so a lookup is never spent on a delivery then
    dropped for another reason, and no close routes without one."""
    if isinstance(sender_gate(subset.sender_id, self_id), Drop):
        return False
    if subset.action != CLOSE_WORD:
        return False
    if event_name == "issues":
        number = js_int(subset.issue.number) if subset.issue else None
        rules, type_ = group.issue, "issue"
    elif event_name == "pull_request":
        number = js_int(subset.pull_request.number) if subset.pull_request else None
        rules, type_ = group.pr_close, "pull_request"
    else:
        return False
    return number is not None and find_close_rule(rules, CLOSE_WORD, number, type_)[0] is not None


def _fire(
    ctx: GitHubMatchContext, index: int, run: RunSpec, target: Target, matched: Matched, *,
    flow: str | None = None, comment_data: dict[str, Any] | None = None, review: dict[str, Any] | None = None,
) -> Decision:
    repo = ctx.subset.repository
    if not repo:
        return Drop("no-repository")
    trigger = Trigger(
        event=ctx.event, action=ctx.action, delivery_id=ctx.delivery, sender=Sender(id=ctx.sender),
        matched=matched, comment=comment_data, review=review,
    )
    job = jobs.build_job(kind=KIND, delivery=ctx.delivery, repo=repo, target=target, trigger=trigger,
                         run=run, flow=flow)
    return Fire(job, index)


def issue_label(ctx: GitHubMatchContext) -> Decision:
    """The issue's current labels against the label rules, first match in file order. No author check:
    on GitHub only collaborators can label, so the label is the approval."""
    ctx.trace.route("issue-label", "label")
    issue = ctx.subset.issue
    labels = frozenset(issue.labels) if issue else frozenset()
    return fire_label_rule(ctx.group.labels(), labels, _issue_target(issue), ctx.trace, partial(_fire, ctx))


def issue_comment(ctx: GitHubMatchContext) -> Decision:
    """Author association is the approval here (no label carries it), checked before the phrase."""
    ctx.trace.route("comment", "comment")
    rule = ctx.group.comment
    said = ctx.subset.comment
    association = said.author_association if said else None
    if association not in AUTHOR_ALLOWLIST:
        if rule is not None:
            ctx.trace.rule(rule.index, "comment", "author-not-allowed")
        return Drop("author-not-allowed")
    body = said.body if said else None
    resolved = comment.resolve_traced(rule, body, ctx.known_flows, ctx.trace)
    if isinstance(resolved, Drop):
        return resolved
    rule, flow = resolved
    issue = ctx.subset.issue
    # A comment on a PR is an issue_comment whose issue is the PR: route it as one, with no head/base.
    target = _issue_target(issue, "pull_request" if issue is not None and issue.is_pull_request else "issue")
    if target is None:
        return Drop("missing-issue-number")
    matched = Matched(index=rule.index, type="comment", phrase=rule.phrase)
    return _fire(ctx, rule.index, rule.run, target, matched, flow=flow,
                 comment_data={"body": body, "author_association": association})


def _issue_target(issue: GitHubIssueSubset | None, type_: str = "issue") -> Target | None:
    """The issue as a job's target, or None without a usable number."""
    number = js_int(issue.number) if issue is not None else None
    if issue is None or number is None:
        return None
    return Target(type=type_, number=number, title=issue.title, body=issue.body)


def _pr_target(pr: GitHubPullRequestSubset | None) -> Target | None:
    """head/base are fork data for event.json, never a clone ref; head.repo is the full name string. None
    without a usable number."""
    number = js_int(pr.number) if pr is not None else None
    if pr is None or number is None:
        return None
    return Target(
        type="pull_request", number=number, title=pr.title, body=pr.body,
        head=present(ref=pr.head_ref, sha=pr.head_sha, repo=pr.head_repo) if pr.has_head else None,
        base=present(ref=pr.base_ref) if pr.has_base else None,
    )


def _empty_commented(review: ReviewSubset) -> bool:
    """A `commented` review with no body has nothing to act on (inline comments ride another event);
    `approved` / `changes_requested` are the signal themselves and fire with an empty body."""
    state = review.state if isinstance(review.state, str) else ""
    return state.lower() == "commented" and not js_trim(review.body or "")


def _pull_request(ctx: GitHubMatchContext, action: str) -> Decision:
    ctx.trace.route("pull-request", "pull_request")
    pr = ctx.subset.pull_request
    if pr is None:
        return Drop("missing-pull-request")
    labels = frozenset(pr.labels)
    review = ctx.subset.review
    is_review = action == REVIEW_ACTION
    # One expression for "which actor": the reviewer for a review, else the PR author.
    if is_review:
        author_ok = review is not None and review.author_association in AUTHOR_ALLOWLIST
        if not author_ok:
            return Drop("review-author-not-allowed")
        assert review is not None
        if _empty_commented(review):
            return Drop("no-review-body")
    else:
        author_ok = pr.author_association in AUTHOR_ALLOWLIST
    state_skipped = False
    for rule in ctx.group.pull_requests(action, every=ctx.trace.recording):
        if action not in rule.actions:
            ctx.trace.rule(rule.index, "pull_request", "action-not-in-rule")
            continue
        if action != "labeled" and not author_ok:
            ctx.trace.rule(rule.index, "pull_request", "pr-author-not-allowed")
            continue
        why = why_not(rule.predicate, labels)
        if why is not None:
            ctx.trace.rule(rule.index, "pull_request", why)
            continue
        # Checked last, so "state skipped" means the verdict was the only thing that failed.
        if is_review and rule.review_states is not None:
            state = review.state if review else None
            if not isinstance(state, str) or state not in rule.review_states:
                state_skipped = True
                ctx.trace.rule(rule.index, "pull_request", "review-state-not-matched")
                continue
        ctx.trace.rule(rule.index, "pull_request")
        target = _pr_target(pr)
        if target is None:
            return Drop("missing-pull-request")
        matched = Matched(index=rule.index, type="pull_request", action=action)
        review_data = {"id": review.id, "body": review.body, "state": review.state,
                       "author_association": review.author_association} if is_review and review else None
        return _fire(ctx, rule.index, rule.run, target, matched, review=review_data)
    if state_skipped:
        return Drop("review-state-not-matched")
    if action in PR_AUTO_ACTIONS and not author_ok:
        return Drop("pr-author-not-allowed")
    return Drop("no-matching-pr-trigger")


def pull_request(ctx: GitHubMatchContext) -> Decision:
    return _pull_request(ctx, ctx.action)


def pull_request_review(ctx: GitHubMatchContext) -> Decision:
    """A second event on the same route, under the canonical word triggers.json spells."""
    return _pull_request(ctx, REVIEW_ACTION)


def issue_close(ctx: GitHubMatchContext) -> Decision:
    ctx.trace.route("issue-close", "issue")
    target = _issue_target(ctx.subset.issue)
    return close_route(ctx.group.issue, CLOSE_WORD, "issue", target, ctx.closer_authorized, ctx.trace,
                       partial(_fire, ctx))


def pr_close(ctx: GitHubMatchContext) -> Decision:
    """Merged pull requests arrive as `closed`, so they fire close rules too."""
    ctx.trace.route("pr-close", "pr_close")
    target = _pr_target(ctx.subset.pull_request)
    return close_route(ctx.group.pr_close, CLOSE_WORD, "pull_request", target, ctx.closer_authorized,
                       ctx.trace, partial(_fire, ctx))


# (event, wire action) → route. Everything else (unlabeled, edited, dismissed, push, ping, a wire action
# literally `review_submitted` …) is unhandled.
ROUTES: dict[tuple[str, str], Route] = {
    ("issues", "opened"): issue_label,
    ("issues", "labeled"): issue_label,
    ("issues", "reopened"): issue_label,
    ("issue_comment", "created"): issue_comment,
    ("pull_request", "labeled"): pull_request,
    ("pull_request", "opened"): pull_request,
    ("pull_request", "synchronize"): pull_request,
    ("pull_request", "reopened"): pull_request,
    ("pull_request_review", "submitted"): pull_request_review,
    ("issues", CLOSE_WORD): issue_close,
    ("pull_request", CLOSE_WORD): pr_close,
}
