"""Per-forge payload projections: only the fields the filters read ever leave the raw
body. Each forge decodes through msgspec Structs that ignore unknown fields, so a forge adding fields
changes nothing; a body whose shape is impossible raises ``MalformedPayload``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


class MalformedPayload(ValueError):
    """The body cannot be a delivery of this forge's shape; the entry is parked, never retried."""


def decode(decoder: msgspec.json.Decoder[T], body: str | bytes, forge: str) -> T:
    """Decode with ``decoder`` or raise ``MalformedPayload``. The message names a JSON path and an
    expected type (msgspec's wording), never a payload value."""
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise MalformedPayload(f"{forge} payload does not decode: {exc}") from None


def label_names(raw: Any, key: str = "name") -> tuple[str, ...]:
    """Names of ``[{<key>}]`` in order; a non-array is no labels, and only string names count."""
    if not isinstance(raw, list):
        return ()
    return tuple(item[key] for item in raw if isinstance(item, dict) and isinstance(item.get(key), str))


def text(value: Any) -> str | None:
    """A string field copied into a job, or None: a job never carries a value the worker cannot read."""
    return value if isinstance(value, str) else None


# Shapes GitHub sends and Gitea/Forgejo mirror. ``login`` is read only for the permission lookup.
class PayloadSender(msgspec.Struct):
    id: Any = None
    login: str | None = None


class Repository(msgspec.Struct):
    full_name: str | None = None


class HeadRepo(msgspec.Struct):
    full_name: str | None = None


class PullRequestHead(msgspec.Struct):
    ref: str | None = None
    sha: str | None = None
    repo: HeadRepo | None = None


class Base(msgspec.Struct):
    ref: str | None = None
