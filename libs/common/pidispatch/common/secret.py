"""A credential that never prints: configuration may be logged or repr'd by accident, a secret not."""

from __future__ import annotations

import hmac
from typing import Generic, TypeVar

T = TypeVar("T", str, bytes)


class Secret(Generic[T]):
    """Prints as ``Secret(***)``; ``reveal()`` is the one way to read the value."""

    __slots__ = ("_value",)
    _value: T

    def __init__(self, value: T) -> None:
        self._value = value

    def reveal(self) -> T:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(_bytes(self._value), _bytes(other._value))

    def __hash__(self) -> int:
        return hash(self._value)


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value
