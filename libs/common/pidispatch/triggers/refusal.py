"""One raw ``triggers.json`` entry under validation, and the refusal it raises.

Shared by the file-level loader (``triggers``), the run-field rules (``runfields``) and the two value
grammars (``modelref``, ``waitfor``), so every refusal reads ``triggers[<index>].<field> <problem>``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Sequence
from typing import Any, NamedTuple, NoReturn, TypeGuard

from pidispatch.triggers.jsvalues import js_int, js_trim

# A name that is safe in a comma-separated env list and in a Redis key: cron ids, profiles, backends.
ID_RE = re.compile(r"[A-Za-z0-9._-]+")
JS_MAX_SAFE_INTEGER = 2**53 - 1
# The problem text of a field this build parses but does not act on: it is refused, never dropped.
NOT_SUPPORTED = "is not supported by pi-dispatch yet"


class TriggerRefusal(Exception):
    """One line naming the entry, the field and what is accepted; ``triggers`` adds the file name."""


class Unsupported(NamedTuple):
    """A valid field this build does not act on: ``path`` (``triggers[0].run.resume true``), why, and
    what to do. Collected over the whole file, so one start names every one of them."""

    path: str
    why: str
    remedy: str


def unsupported_line(found: Sequence[Unsupported]) -> str:
    """One refusal as it always read; several in one line (a migrated file needs one edit, not N restarts)."""
    if len(found) == 1:
        path, why, remedy = found[0]
        return f"{path} {NOT_SUPPORTED} ({why}); {remedy}"
    items = ", ".join(f"{path} ({why}; {remedy})" for path, why, remedy in found)
    return f"{len(found)} fields are {NOT_SUPPORTED.removeprefix('is ')}: {items}"


class TriggerEntry:
    """A raw entry being validated: ``on`` and ``run`` as decoded, ``kind`` the run kind."""

    __slots__ = ("index", "kind", "on", "run")

    def __init__(self, index: int, on: dict[str, Any], run: dict[str, Any]) -> None:
        self.index, self.on, self.run = index, on, run
        self.kind: str = run.get("kind", "")

    @property
    def on_type(self) -> str:
        return self.on.get("type", "")  # type: ignore[no-any-return]

    @property
    def is_cron(self) -> bool:
        return self.on_type == "cron"

    def fail(self, field: str, problem: str) -> NoReturn:
        raise TriggerRefusal(f"triggers[{self.index}].{field} {problem}")

    def refuse_unknown(self, where: str, known: Collection[str], accepted: Sequence[str]) -> None:
        """Refuse the first key of ``on`` or ``run`` (``where``) outside ``known``, naming ``accepted``."""
        for key in self.on if where == "on" else self.run:
            if key not in known:
                self.fail(f"{where}.{key}", unknown_key(key, accepted, f"{where}.",
                                                        f"in {where} of {self.on_type} triggers"))

    def unsupported(self, field: str, why: str, remedy: str) -> Unsupported:
        return Unsupported(f"triggers[{self.index}].{field}", why, remedy)

    def listed(self, where: str, refused: dict[str, str]) -> list[Unsupported]:
        """Every key of ``on`` or ``run`` that ``refused`` lists, whatever its value, with its reason."""
        source = self.on if where == "on" else self.run
        return [self.unsupported(f"{where}.{key}", refused[key], "remove it")
                for key in source if key in refused]


# "blank", "padded" and whole numbers as the original read them: the helpers the filters use too.
trim = js_trim
integer = js_int


def nonblank(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and trim(value) != ""


def unpadded(value: Any) -> TypeGuard[str]:
    """Non-blank with nothing to trim: the reviewed file must not disagree with what runs."""
    return nonblank(value) and value == trim(value)


def js_length(text: str) -> int:
    """Length in UTF-16 code units (JavaScript's ``.length``): a cap counts what it always counted."""
    return len(text.encode("utf-16-le")) // 2


def nearest(key: str, accepted: Sequence[str]) -> str | None:
    """The accepted key ``key`` most likely misspells (compared ignoring case), or None."""
    lowered = {a.lower(): a for a in accepted}
    found = difflib.get_close_matches(key.lower(), list(lowered), n=1)
    return lowered[found[0]] if found else None


def unknown_key(key: str, accepted: Sequence[str], prefix: str, where: str) -> str:
    """The problem text for a key nothing implements: the nearest accepted one when close, then the list.
    ``prefix`` leads the suggestion (``on.``), ``where`` names the level (``in a trigger``).
    """
    close = nearest(key, accepted)
    hint = f"did you mean {prefix}{close}? " if close else ""
    return f"is not a field; {hint}accepted {where}: {', '.join(accepted)}"
