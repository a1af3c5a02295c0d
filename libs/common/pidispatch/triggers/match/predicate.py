"""The label predicate (``any``, ``all``, ``none``) shared by every forge. Pure."""

from __future__ import annotations

from collections.abc import Collection

import msgspec


class Predicate(msgspec.Struct, frozen=True, kw_only=True):
    """``any``/``all``/``none`` label selectors; a missing selector is empty."""

    any: tuple[str, ...] = ()
    all: tuple[str, ...] = ()
    none: tuple[str, ...] = ()

    @property
    def has_positive(self) -> bool:
        return bool(self.any or self.all)


def matches(predicate: Predicate, labels: Collection[str]) -> bool:
    """(``any`` empty or one present) and every ``all`` present and no ``none`` present.

    An all-empty predicate is vacuously true; callers that need a positive selector check it at load.
    """
    return why_not(predicate, labels) is None


def why_not(predicate: Predicate, labels: Collection[str]) -> str | None:
    """None when the predicate holds, else which clause failed (for ``explain``; no label text)."""
    present = labels if isinstance(labels, (set, frozenset)) else set(labels)
    if predicate.any and present.isdisjoint(predicate.any):
        return "no-any-label"
    if not present.issuperset(predicate.all):
        return "missing-all-label"
    if not present.isdisjoint(predicate.none):
        return "has-none-label"
    return None


def matched_label(predicate: Predicate, labels: Collection[str]) -> str | None:
    """The label reported as ``matched.label``: the first of the rule's ``any`` (rule order) that is
    present, else ``all[0]``, else none."""
    present = labels if isinstance(labels, (set, frozenset)) else set(labels)
    for name in predicate.any:
        if name in present:
            return name
    return predicate.all[0] if predicate.all else None
