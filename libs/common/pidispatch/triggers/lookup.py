"""What the router asks a forge before a decision, and what it can hear back.

The filters are pure: they say *which* question a delivery needs answered (or none); ``authority``
asks the forge; the answer goes back into the filter. A question holds the actor's login or email only
for the lookup itself; none of it is ever logged, stored or enqueued.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import msgspec


class SelfIds(msgspec.Struct, frozen=True, kw_only=True):
    """The harness's own identity on each forge (bot-loop guard), keyed by forge name; a forge absent
    here is not known or not needed.

    Each value is what that forge's ``resolve_self`` returns (a numeric id where the forge has one, a
    GUID and a lower-cased address on Azure DevOps), written and read by that forge's route alone
    (``RouterForge.with_self``), so a new forge needs no field here.
    """

    ids: Mapping[str, object] = msgspec.field(default_factory=dict)

    def of(self, forge: str) -> object | None:
        return self.ids.get(forge)

    def number(self, forge: str) -> int | None:
        """The forge's own id where it is a number, else None."""
        value = self.ids.get(forge)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def with_id(self, forge: str, value: object) -> SelfIds:
        return SelfIds(ids={**self.ids, forge: value})


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
