"""The GitHub filter (spec ingest §4.2). Pure: a projected subset and the rules in, a decision out.

Order is load-bearing and fail-closed: no usable sender → drop; the harness itself → drop; only then
route on event + action. Anything not routed is ``unhandled-event``.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.router import jobs
from pidispatch.router.match.predicate import matched_label, matches
from pidispatch.router.subsets.github import GitHubSubset
from pidispatch.router.triggers import ForgeGroup, Rules

KIND = "github"


class Drop(msgspec.Struct, frozen=True):
    reason: str


class Fire(msgspec.Struct, frozen=True):
    """A job draft (id ``gh-<delivery>``, before replica fan-out) and the raw index of the rule."""

    job: Job
    index: int


Decision = Drop | Fire


class Context(msgspec.Struct, frozen=True, kw_only=True):
    event: str
    action: str
    subset: GitHubSubset
    group: ForgeGroup
    known_flows: frozenset[str]
    delivery: str


Route = Callable[[Context], Decision]


def decide(
    event_name: str, subset: GitHubSubset, rules: Rules, self_id: int | None, delivery: str
) -> Decision:
    sender_id = subset.sender_id
    # A bool is an int in Python but never an id; a string "999" must not read as self either.
    if type(sender_id) is not int:
        return Drop("missing-sender-id")
    if self_id is not None and sender_id == self_id:
        return Drop("self")
    action = subset.action if isinstance(subset.action, str) else ""
    route = ROUTES.get((event_name, action))
    if route is None:
        return Drop("unhandled-event")
    ctx = Context(
        event=event_name, action=action, subset=subset, group=rules.github, known_flows=rules.known_flows,
        delivery=delivery,
    )
    return route(ctx)


def _trigger(ctx: Context, matched: Matched) -> Trigger:
    return Trigger(
        event=ctx.event,
        action=ctx.action,
        delivery_id=ctx.delivery,
        sender=Sender(id=ctx.subset.sender_id),
        matched=matched,
    )


def issue_label(ctx: Context) -> Decision:
    """The issue's current labels against the label rules, first match in file order. No author check:
    on GitHub only collaborators can label, so the label is the approval."""
    issue = ctx.subset.issue
    if issue is None or type(issue.number) is not int:
        return Drop("missing-issue-number")
    for rule in ctx.group.label:
        if matches(rule.predicate, issue.labels):
            if not ctx.subset.repository:
                return Drop("no-repository")
            label = matched_label(rule.predicate, issue.labels)
            matched = Matched(index=rule.index, type="label", label=label)
            job = jobs.build_job(
                kind=KIND,
                delivery=ctx.delivery,
                repo=ctx.subset.repository,
                target=Target(type="issue", number=issue.number, title=issue.title, body=issue.body),
                trigger=_trigger(ctx, matched),
                run=rule.run,
            )
            return Fire(job, rule.index)
    return Drop("no-allowlisted-label")


# (event, action) → route. Issue #4 adds: ("issue_comment", "created") comment; ("pull_request",
# labeled|opened|synchronize|reopened) pull-request; ("pull_request_review", "submitted") review;
# ("issues", "closed") issue-close; ("pull_request", "closed") PR-close.
ROUTES: dict[tuple[str, str], Route] = {
    ("issues", "opened"): issue_label,
    ("issues", "labeled"): issue_label,
    ("issues", "reopened"): issue_label,
}
