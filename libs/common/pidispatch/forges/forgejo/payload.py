"""The Forgejo/Gitea payload subset and the event names it arrives under.

GitHub's shape with three differences, each a wrong job if missed: no ``author_association`` anywhere
(authority comes from the API), ``is_pull`` at the top level instead of ``issue.pull_request``, and
``sender.login`` carried for the permission lookup only (never logged, never enqueued). Actions stay in
Forgejo's own words; ``pidispatch.forges.forgejo.match`` maps them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pidispatch.forges.forgejo import FORGE
from pidispatch.triggers.subsets import Base, PayloadSender, PullRequestHead, Repository, decode, label_names


class _ForgejoIssue(msgspec.Struct):
    number: Any = None
    title: str | None = None
    body: str | None = None
    labels: Any = None


class _ForgejoComment(msgspec.Struct):
    body: str | None = None


class _ForgejoPullRequest(msgspec.Struct):
    number: Any = None
    title: str | None = None
    body: str | None = None
    labels: Any = None
    head: PullRequestHead | None = None
    base: Base | None = None


class _ForgejoPayload(msgspec.Struct):
    action: Any = None
    sender: PayloadSender | None = None
    repository: Repository | None = None
    issue: _ForgejoIssue | None = None
    comment: _ForgejoComment | None = None
    is_pull: Any = None
    pull_request: _ForgejoPullRequest | None = None


_decoder = msgspec.json.Decoder(_ForgejoPayload)


class ForgejoIssueSubset(msgspec.Struct, frozen=True, kw_only=True):
    number: Any
    title: str | None
    body: str | None
    labels: tuple[str, ...]


class ForgejoPullRequestSubset(msgspec.Struct, frozen=True, kw_only=True):
    number: Any
    title: str | None
    body: str | None
    labels: tuple[str, ...]
    head_ref: str | None
    head_sha: str | None
    head_repo: str | None
    base_ref: str | None


class ForgejoSubset(msgspec.Struct, frozen=True, kw_only=True):
    action: Any = None  # the raw Forgejo word, judged by the filter
    sender_id: Any = None
    # Only for the permission lookup; never logged, never enqueued.
    sender_login: str | None = None
    repository: str | None = None
    issue: ForgejoIssueSubset | None = None
    comment_body: str | None = None
    # Whether an issue comment is on a pull request: only the literal ``true`` counts.
    is_pull: bool = False
    pull_request: ForgejoPullRequestSubset | None = None
    # Whether the body has a ``comment`` object: tells a PR comment from a review under one event name.
    has_comment: bool = False


def project(body: str | bytes) -> ForgejoSubset:
    """Decode the raw delivery text into the subset, or raise ``MalformedPayload``."""
    p = decode(_decoder, body, FORGE.name)
    issue = p.issue
    pr = p.pull_request
    return ForgejoSubset(
        action=p.action,
        sender_id=p.sender.id if p.sender else None,
        sender_login=p.sender.login if p.sender else None,
        repository=p.repository.full_name if p.repository else None,
        issue=ForgejoIssueSubset(number=issue.number, title=issue.title, body=issue.body,
                          labels=label_names(issue.labels)) if issue else None,
        comment_body=p.comment.body if p.comment else None,
        is_pull=p.is_pull is True,
        pull_request=_pull_request(pr) if pr else None,
        has_comment=p.comment is not None,
    )


def _pull_request(pr: _ForgejoPullRequest) -> ForgejoPullRequestSubset:
    head = pr.head or PullRequestHead()
    return ForgejoPullRequestSubset(
        number=pr.number, title=pr.title, body=pr.body, labels=label_names(pr.labels),
        head_ref=head.ref, head_sha=head.sha, head_repo=head.repo.full_name if head.repo else None,
        base_ref=pr.base.ref if pr.base else None,
    )
