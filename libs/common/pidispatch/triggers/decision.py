"""What a filter can conclude about one delivery. Pure values.

``Ask`` is the one non-final answer: the delivery would fire if the actor is authorised, so the router
asks the forge (``authority``) and feeds the verdict back (``pipeline.resume``). Deliveries that cannot
fire whatever the verdict never cost a forge API call.
"""

from __future__ import annotations

import msgspec

from pidispatch.common.models import Job
from pidispatch.triggers.lookup import Question


class Drop(msgspec.Struct, frozen=True):
    """Not run; ``reason`` is a fixed token (``self``, ``no-allowlisted-label``, ...), never payload text."""

    reason: str


class Fire(msgspec.Struct, frozen=True):
    """A job draft (forge id ``<prefix><delivery>``, before replica fan-out) and the rule's raw index."""

    job: Job
    index: int


class Ask(msgspec.Struct, frozen=True):
    """Needs the forge's answer to ``question`` before it is final."""

    question: Question


Decision = Drop | Fire


class Subject(msgspec.Struct, frozen=True):
    """What a delivery is about, for its decision record: forge vocabulary words and an item reference
    (``RouterForge.target``) only, never payload text; None where the body does not say."""

    event: str
    action: str | None = None
    target: str | None = None
