"""Which forges this receiver serves, and the steps every arm runs on a delivery (docs/receiver.md).

An arm turns the pure checks of ``verify`` into three steps the HTTP layer runs in order:

1. ``head``: every row decidable from the method and headers, before a body byte is read;
2. ``authenticate``: the credential over the raw bytes (index of the secret that matched, or a refusal);
3. ``classify``: the minimal read of the verified body: stored event name, delivery id, and whether the
   router could ever act on it (the others answer 204 unstored).

Each forge's arm lives in its package (``pidispatch.forges.<name>.receive``); this module reaches it
through ``receive_of(Forge)`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple, Protocol

from multidict import istr

from pidispatch import forges
from pidispatch.forges.refusals import ReceiverRefusal, Table

# Paths with their own forge; every other path falls through to one forge, so "/" reaches it too.
FORGE_PATHS: Mapping[str, str] = {f.path: f.name for f in forges.FORGES if not f.fallthrough}
FALLTHROUGH_FORGE = forges.fallthrough().name
FORGES = forges.names()

CONTENT_TYPE = istr("Content-Type")  # every arm's preamble checks it


class RequestHead(NamedTuple):
    """What an arm read from the request line and headers."""

    event: str | None  # the event header as sent (not yet authenticated: logged only when name-shaped)
    delivery: str | None  # the header delivery id (None where a forge sends it in the body)
    credential: tuple[str | None, ...]  # what this arm's ``authenticate`` checks
    refusal: ReceiverRefusal | None  # the first failed check, in the arm's fixed order


class Classification(NamedTuple):
    """A verified delivery: the event name it is stored under, its delivery id, and whether to store it."""

    event: str | None
    delivery: str
    store: bool


class Arm(Protocol):
    name: str
    path: str
    table: Table

    def head(self, method: str, headers: Mapping[str, str], content_length: int | None) -> RequestHead: ...

    def authenticate(self, head: RequestHead, body: bytes, now_ms: int) -> int | ReceiverRefusal: ...

    def classify(self, head: RequestHead, body: bytes) -> Classification | ReceiverRefusal: ...


def forge_for_path(path: str) -> str:
    """The forge a normalised path belongs to (routing never looks at headers)."""
    return FORGE_PATHS.get(path, FALLTHROUGH_FORGE)


def normalise_path(path: str) -> str:
    """One trailing slash is removed from any path longer than ``/`` (the query is not part
    of the path aiohttp hands us)."""
    if len(path) > 1 and path[-1] == "/":
        return path[:-1]
    return path


