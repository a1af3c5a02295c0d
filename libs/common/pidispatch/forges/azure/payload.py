"""The Azure DevOps payload subset: the only fields the filter may read.

The least GitHub-like forge: no delivery header (the body's top-level ``id`` is the delivery), two actor
forms on one forge (a GUID on pull-request events, ``"Display Name <email>"`` on work items), tags as one
``;``-separated string that arrives as an ``{oldValue, newValue}`` diff on an update, and a scope of
project plus repository. ``message``/``detailedMessage`` (pre-rendered prose with titles in it) are never
read. The resource is decoded by event family, so an event we never act on cannot fail on a field we
never read.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from pidispatch.forges.azure import FORGE
from pidispatch.triggers.jsvalues import JS_WHITESPACE, js_trim
from pidispatch.triggers.subsets import MalformedPayload, decode, text

WORK_ITEM_EVENTS = frozenset({"workitem.created", "workitem.updated", "workitem.commented"})
PR_EVENTS = frozenset({"git.pullrequest.created", "git.pullrequest.updated"})
PR_COMMENT_EVENT = "ms.vss-code.git-pullrequest-comment-event"

# Anchored at the very end: the display-name half is attacker-settable, so a substring test would let
# "pi-bot@example.com is not me <mallory@evil.test>" read as the harness.
_TRAILING_ADDRESS = re.compile(r"<([^<>]+)>\Z")
_BARE_ADDRESS = re.compile(f"[^{re.escape(JS_WHITESPACE)}<>@]+@[^{re.escape(JS_WHITESPACE)}<>@]+")


class _Container(msgspec.Struct):
    id: Any = None


class _Containers(msgspec.Struct):
    project: _Container | None = None


class _Envelope(msgspec.Struct, rename="camel"):
    id: Any = None
    event_type: Any = None
    resource: msgspec.Raw = msgspec.Raw(b"null")
    resource_containers: _Containers | None = None


class _ActorProbe(msgspec.Struct, rename="camel"):
    """Every place an actor can sit, loosely typed: identity is judged, never trusted to a shape."""

    created_by: Any = None
    comment: Any = None
    pull_request: Any = None
    fields: Any = None


class _Revision(msgspec.Struct):
    fields: dict[str, Any] | None = None


class _WorkItem(msgspec.Struct, rename="camel"):
    id: Any = None
    work_item_id: Any = None
    fields: dict[str, Any] | None = None
    revision: _Revision | None = None


class _RepoProject(msgspec.Struct):
    id: Any = None
    name: Any = None


class _Repository(msgspec.Struct):
    id: Any = None
    name: Any = None
    project: _RepoProject | None = None


class _AzurePullRequest(msgspec.Struct, rename="camel"):
    pull_request_id: Any = None
    title: str | None = None
    description: str | None = None
    source_ref_name: Any = None
    target_ref_name: Any = None
    repository: _Repository | None = None


class _PrComment(msgspec.Struct):
    content: Any = None


class _PrCommentResource(msgspec.Struct, rename="camel"):
    pull_request: _AzurePullRequest | None = None
    comment: _PrComment | None = None
    repository: _Repository | None = None


_envelope = msgspec.json.Decoder(_Envelope)
_probe = msgspec.json.Decoder(_ActorProbe | None)
_work_item = msgspec.json.Decoder(_WorkItem | None)
_pull_request = msgspec.json.Decoder(_AzurePullRequest | None)
_pr_comment = msgspec.json.Decoder(_PrCommentResource | None)


class TagChanges(msgspec.Struct, frozen=True, kw_only=True):
    previous: tuple[str, ...]
    current: tuple[str, ...]


class AzureSubset(msgspec.Struct, frozen=True, kw_only=True):
    event_type: Any = None
    # The actor: a GUID, else an address (lower-cased). The address is for the self guard and the
    # membership lookup only; a job carries a hash of it, never the address.
    actor_id: Any = None
    actor_email: str | None = None
    project_id: Any = None
    project_name: Any = None
    repository_id: Any = None  # pull-request events only
    repository_name: Any = None
    number: Any = None
    title: str | None = None
    body: str | None = None
    head_ref: str | None = None
    base_ref: str | None = None
    tags: tuple[str, ...] = ()
    # Work-item updates only, and only when System.Tags changed: the diff is the trigger.
    tag_changes: TagChanges | None = None
    comment: Any = None


def project(body: str | bytes) -> AzureSubset:
    """Decode the raw delivery text into the subset, or raise ``MalformedPayload``."""
    env = decode(_envelope, body, FORGE.name)
    event = env.event_type if isinstance(env.event_type, str) else None
    raw = env.resource
    probe = _resource(_probe, raw)
    actor_id, actor_email = actor_of(probe or _ActorProbe())
    containers = env.resource_containers
    container = containers.project.id if containers and containers.project else None
    base = AzureSubset(event_type=event, actor_id=actor_id, actor_email=actor_email, project_id=container)
    if event in WORK_ITEM_EVENTS:
        return _work_item_subset(base, _resource(_work_item, raw) or _WorkItem())
    if event in PR_EVENTS or event == PR_COMMENT_EVENT:
        return _pull_request_subset(base, raw, container)
    return base


def _resource(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise MalformedPayload(f"{FORGE.name} payload does not decode: {exc} (in `$.resource`)") from None


def _work_item_subset(base: AzureSubset, wi: _WorkItem) -> AzureSubset:
    fields = wi.fields or {}
    # The revision holds the full post-change state; ``fields`` holds only the diff on an update.
    full = wi.revision.fields if wi.revision and wi.revision.fields is not None else fields
    tags_entry = fields.get("System.Tags")
    project_name = field_value(fields, "System.TeamProject")
    return msgspec.structs.replace(
        base,
        project_name=project_name if project_name is not None else field_value(full, "System.TeamProject"),
        number=wi.work_item_id if wi.work_item_id is not None else wi.id,
        title=text(field_value(full, "System.Title")),
        body=text(field_value(full, "System.Description")),
        tags=parse_tags(field_value(full, "System.Tags")),
        tag_changes=TagChanges(
            previous=parse_tags(tags_entry.get("oldValue")), current=parse_tags(tags_entry.get("newValue"))
        ) if isinstance(tags_entry, dict) else None,
        comment=field_value(fields, "System.History") if base.event_type == "workitem.commented" else None,
    )


def _pull_request_subset(base: AzureSubset, raw: msgspec.Raw, container: Any) -> AzureSubset:
    comment: Any = None
    if base.event_type == PR_COMMENT_EVENT:
        res = _resource(_pr_comment, raw) or _PrCommentResource()
        pr = res.pull_request or _AzurePullRequest()
        repo = pr.repository or res.repository or _Repository()
        comment = res.comment.content if res.comment else None
    else:
        pr = _resource(_pull_request, raw) or _AzurePullRequest()
        repo = pr.repository or _Repository()
    repo_project = repo.project or _RepoProject()
    return msgspec.structs.replace(
        base,
        project_id=container if container is not None else repo_project.id,
        project_name=repo_project.name,
        repository_id=repo.id,
        repository_name=repo.name,
        number=pr.pull_request_id,
        title=pr.title,
        body=pr.description,
        head_ref=strip_refs_heads(pr.source_ref_name),
        base_ref=strip_refs_heads(pr.target_ref_name),
        comment=comment,
    )


def actor_of(probe: _ActorProbe) -> tuple[Any, str | None]:
    """(GUID, None) from the first identity object present, else (None, address) from the work item's
    ChangedBy/CreatedBy, else (None, None). A non-string GUID falls through to the address."""
    guid = _first(_dig(probe.created_by, "id"), _dig(probe.comment, "author", "id"),
                  _dig(probe.pull_request, "createdBy", "id"))
    if isinstance(guid, str) and guid:
        return guid, None
    fields = probe.fields if isinstance(probe.fields, dict) else {}
    changed_by = fields.get("System.ChangedBy")
    # On an update ChangedBy is an {oldValue, newValue} pair; the person who acted is the new value.
    if isinstance(changed_by, dict):
        raw = changed_by.get("newValue")
    else:
        raw = changed_by if changed_by is not None else fields.get("System.CreatedBy")
    return None, extract_email(raw)


def extract_email(raw: Any) -> str | None:
    """The address in a trailing ``<...>``, or a whole-string bare address; lower-cased; else None."""
    if not isinstance(raw, str):
        return None
    trimmed = js_trim(raw)
    match = _TRAILING_ADDRESS.search(trimmed)
    if match:
        return js_trim(match.group(1)).lower()
    return trimmed.lower() if _BARE_ADDRESS.fullmatch(trimmed) else None


def parse_tags(raw: Any) -> tuple[str, ...]:
    """``"a; b ;"`` → ``("a", "b")``: separator spacing varies across Azure versions."""
    if not isinstance(raw, str):
        return ()
    return tuple(part for part in (js_trim(p) for p in raw.split(";")) if part)


def field_value(fields: dict[str, Any], name: str) -> Any:
    """A work-item field, unwrapping the ``{oldValue, newValue}`` pair an update carries."""
    value = fields.get(name)
    return value.get("newValue") if isinstance(value, dict) else value


def strip_refs_heads(ref: Any) -> str | None:
    return ref.removeprefix("refs/heads/") if isinstance(ref, str) else None


def _dig(value: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)
