"""The GitLab payload subset: the only fields the filter may read.

Three fields have no GitHub counterpart: ``changes.labels`` (adding a label is an ``update`` carrying a
before/after diff, and the diff is the trigger), ``noteable_type`` (whether a comment is on an issue or
a merge request), and ``user.username`` (carried for the member lookup only; never logged or enqueued).
``iid`` is the per-project number a person sees; the global ``id`` is never used.
"""

from __future__ import annotations

from typing import Any

import msgspec

from pidispatch.forges.gitlab import FORGE
from pidispatch.triggers.subsets import decode, label_names


class _User(msgspec.Struct):
    id: Any = None
    username: Any = None


class _Project(msgspec.Struct):
    id: Any = None
    path_with_namespace: str | None = None
    default_branch: Any = None


class _Item(msgspec.Struct):
    """``object_attributes``, or a note's noteable (``issue`` / ``merge_request``)."""

    action: Any = None
    iid: Any = None
    title: str | None = None
    description: str | None = None
    labels: Any = None
    note: str | None = None
    noteable_type: Any = None
    oldrev: Any = None


class _LabelChanges(msgspec.Struct):
    previous: Any = None
    current: Any = None


class _Changes(msgspec.Struct):
    labels: _LabelChanges | None = None


class _GitLabPayload(msgspec.Struct):
    object_kind: Any = None
    user: _User | None = None
    project: _Project | None = None
    object_attributes: _Item | None = None
    issue: _Item | None = None
    merge_request: _Item | None = None
    changes: _Changes | None = None


_decoder = msgspec.json.Decoder(_GitLabPayload)


class GitLabTarget(msgspec.Struct, frozen=True, kw_only=True):
    iid: Any
    title: str | None
    description: str | None
    labels: tuple[str, ...]


class LabelChanges(msgspec.Struct, frozen=True, kw_only=True):
    previous: tuple[str, ...]
    current: tuple[str, ...]


class GitLabSubset(msgspec.Struct, frozen=True, kw_only=True):
    object_kind: Any = None
    action: Any = None
    user_id: Any = None
    # Only for the access lookup; never logged, never enqueued.
    username: Any = None
    project_id: Any = None
    project_path: str | None = None
    default_branch: Any = None
    target: GitLabTarget
    note: str | None = None
    noteable_type: Any = None
    labels: tuple[str, ...] = ()
    # Present only when this event moved labels; absence says "no label changed".
    label_changes: LabelChanges | None = None
    oldrev: Any = None  # a merge-request push; projected, not used by the gate


def project(body: str | bytes) -> GitLabSubset:
    """Decode the raw delivery text into the subset, or raise ``MalformedPayload``."""
    p = decode(_decoder, body, FORGE.name)
    oa = p.object_attributes or _Item()
    user = p.user or _User()
    proj = p.project or _Project()
    changes = p.changes.labels if p.changes else None
    return GitLabSubset(
        object_kind=p.object_kind,
        action=oa.action,
        user_id=user.id,
        username=user.username,
        project_id=proj.id,
        project_path=proj.path_with_namespace,
        default_branch=proj.default_branch,
        target=_target(p, oa),
        note=oa.note,
        noteable_type=oa.noteable_type,
        labels=label_names(oa.labels, "title"),
        label_changes=LabelChanges(
            previous=label_names(changes.previous, "title"), current=label_names(changes.current, "title")
        ) if changes is not None else None,
        oldrev=oa.oldrev,
    )


def _target(p: _GitLabPayload, oa: _Item) -> GitLabTarget:
    """A note's target is its noteable (the merge request or the issue); otherwise the object itself."""
    item = oa
    if p.object_kind == "note":
        item = (p.merge_request if oa.noteable_type == "MergeRequest" else p.issue) or _Item()
    return GitLabTarget(
        iid=item.iid, title=item.title, description=item.description, labels=label_names(item.labels, "title")
    )
