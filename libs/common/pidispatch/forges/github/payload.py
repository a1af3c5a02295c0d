"""The GitHub payload subset: the only fields the filter may read.

Decoding is tolerant of unknown fields and of odd values where the filter owns the verdict (a string
``sender.id`` must reach the filter as "not a number", not become a crash or a coercion). A body whose
shape is impossible (``issue`` is a string, the root is an array) raises ``MalformedPayload``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pidispatch.forges.github import FORGE
from pidispatch.triggers.subsets import (
    Base,
    MalformedPayload,
    PayloadSender,
    PullRequestHead,
    Repository,
    decode,
    label_names,
)

__all__ = ["GitHubSubset", "MalformedPayload", "label_names", "project"]

# Wire shapes: fields the filter judges are ``Any``; fields only copied into a job are typed, so a job
# never carries a value the worker could not decode.
class _GitHubIssue(msgspec.Struct):
    number: Any = None
    title: str | None = None
    body: str | None = None
    labels: Any = None
    pull_request: Any = None


class _GitHubComment(msgspec.Struct):
    body: str | None = None
    author_association: str | None = None


class _GitHubPullRequest(msgspec.Struct):
    number: Any = None
    title: str | None = None
    body: str | None = None
    author_association: str | None = None
    labels: Any = None
    head: PullRequestHead | None = None
    base: Base | None = None


class _Review(msgspec.Struct):
    id: Any = None
    body: str | None = None
    state: Any = None
    author_association: str | None = None


class _GitHubPayload(msgspec.Struct):
    action: str | None = None
    sender: PayloadSender | None = None
    repository: Repository | None = None
    issue: _GitHubIssue | None = None
    comment: _GitHubComment | None = None
    pull_request: _GitHubPullRequest | None = None
    review: _Review | None = None


_decoder = msgspec.json.Decoder(_GitHubPayload)


# The projected subset.
class GitHubIssueSubset(msgspec.Struct, frozen=True, kw_only=True):
    number: Any
    title: str | None
    body: str | None
    labels: tuple[str, ...]
    is_pull_request: bool


class CommentSubset(msgspec.Struct, frozen=True, kw_only=True):
    body: str | None
    author_association: str | None


class GitHubPullRequestSubset(msgspec.Struct, frozen=True, kw_only=True):
    number: Any
    title: str | None
    body: str | None
    author_association: str | None
    labels: tuple[str, ...]
    # Fork data for the job's event.json, never a clone ref. ``has_*``: the object was sent at all.
    has_head: bool
    head_ref: str | None
    head_sha: str | None
    head_repo: str | None
    has_base: bool
    base_ref: str | None


class ReviewSubset(msgspec.Struct, frozen=True, kw_only=True):
    id: Any
    body: str | None
    state: Any
    author_association: str | None


class GitHubSubset(msgspec.Struct, frozen=True, kw_only=True):
    action: str | None = None
    sender_id: Any = None
    # Only for the closer permission lookup (issue #4); never logged, never enqueued.
    sender_login: str | None = None
    repository: str | None = None
    issue: GitHubIssueSubset | None = None
    comment: CommentSubset | None = None
    pull_request: GitHubPullRequestSubset | None = None
    review: ReviewSubset | None = None


def project(body: str | bytes) -> GitHubSubset:
    """Decode the raw delivery text into the subset, or raise ``MalformedPayload``."""
    p = decode(_decoder, body, FORGE.name)
    return GitHubSubset(
        action=p.action,
        sender_id=p.sender.id if p.sender else None,
        sender_login=p.sender.login if p.sender else None,
        repository=p.repository.full_name if p.repository else None,
        issue=_issue(p.issue),
        comment=CommentSubset(body=p.comment.body, author_association=p.comment.author_association)
        if p.comment
        else None,
        pull_request=_pull_request(p.pull_request),
        review=_review(p.review),
    )


def _issue(i: _GitHubIssue | None) -> GitHubIssueSubset | None:
    if i is None:
        return None
    return GitHubIssueSubset(
        number=i.number, title=i.title, body=i.body, labels=label_names(i.labels),
        is_pull_request=i.pull_request is not None,
    )


def _pull_request(pr: _GitHubPullRequest | None) -> GitHubPullRequestSubset | None:
    if pr is None:
        return None
    head = pr.head or PullRequestHead()
    return GitHubPullRequestSubset(
        number=pr.number, title=pr.title, body=pr.body, author_association=pr.author_association,
        labels=label_names(pr.labels), has_head=pr.head is not None, head_ref=head.ref, head_sha=head.sha,
        head_repo=head.repo.full_name if head.repo else None, has_base=pr.base is not None,
        base_ref=pr.base.ref if pr.base else None,
    )


def _review(r: _Review | None) -> ReviewSubset | None:
    if r is None:
        return None
    state = r.state.lower() if isinstance(r.state, str) else r.state
    return ReviewSubset(id=r.id, body=r.body, state=state, author_association=r.author_association)
