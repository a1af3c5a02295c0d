"""What the router asks a forge before a decision, and what it can hear back.

The filters are pure: they say *which* question a delivery needs answered (or none); ``authority``
asks the forge; the answer goes back into the filter. A question holds the actor's login or email only
for the lookup itself; none of it is ever logged, stored or enqueued.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec


class SelfIds(msgspec.Struct, frozen=True, kw_only=True):
    """The harness's own identity per forge (bot-loop guard); None = not known / not needed.

    Typed per forge on purpose: a numeric id where the forge has one, a GUID and an address on Azure;
    each forge's route reads and writes its own fields (``RouterForge.with_self``).
    """

    github: int | None = None
    gitlab: int | None = None
    forgejo: int | None = None
    azure_id: str | None = None
    azure_email: str | None = None  # lower-cased


class Question(msgspec.Struct, frozen=True, kw_only=True):
    """What a filter needs a forge to answer; each forge's question type subclasses it in its own
    package (``pidispatch.forges.<name>.authority``) and ``forge`` says whose route answers it."""

    forge: ClassVar[str]


class Authorized(msgspec.Struct, frozen=True):
    """A determinate answer; only the literal ``True`` opens a gate."""

    value: bool


class Indeterminate(msgspec.Struct, frozen=True):
    """The forge could not answer (network, 5xx, bad JSON, mint failure): retry, never drop.

    ``reason`` is a short token such as ``status-502`` or ``network``; never a login, email or URL path.
    """

    reason: str


Verdict = Authorized | Indeterminate
