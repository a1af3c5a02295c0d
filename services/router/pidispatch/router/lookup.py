"""What the router asks a forge before a decision, and what it can hear back.

The filters are pure: they say *which* question a delivery needs answered (or none); ``authority``
asks the forge; the answer goes back into the filter. A question holds the actor's login or email only
for the lookup itself; none of it is ever logged, stored or enqueued.
"""

from __future__ import annotations

import msgspec


class SelfIds(msgspec.Struct, frozen=True, kw_only=True):
    """The harness's own identity per forge (bot-loop guard); None = not known / not needed."""

    github: int | None = None
    gitlab: int | None = None
    forgejo: int | None = None
    azure_id: str | None = None
    azure_email: str | None = None  # lower-cased


class GithubCloser(msgspec.Struct, frozen=True, kw_only=True):
    """May this login close items in this repo? (only asked for a close a close rule wants)"""

    repo: str
    login: str


class GitlabMember(msgspec.Struct, frozen=True, kw_only=True):
    project_id: int
    user_id: int


class ForgejoPermission(msgspec.Struct, frozen=True, kw_only=True):
    repo: str
    login: str


class AzureMembership(msgspec.Struct, frozen=True, kw_only=True):
    """Actor by GUID or, failing that, email; project by id."""

    project_id: str | None
    actor_id: str | None = None
    actor_email: str | None = None


Question = GithubCloser | GitlabMember | ForgejoPermission | AzureMembership


class Authorized(msgspec.Struct, frozen=True):
    """A determinate answer; only the literal ``True`` opens a gate."""

    value: bool


class Indeterminate(msgspec.Struct, frozen=True):
    """The forge could not answer (network, 5xx, bad JSON, mint failure): retry, never drop.

    ``reason`` is a short token such as ``status-502`` or ``network``; never a login, email or URL path.
    """

    reason: str


Verdict = Authorized | Indeterminate
