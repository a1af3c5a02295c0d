"""The label predicate shared by every forge (spec ingest §4.1). Pure."""

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
    present = set(labels)
    return (
        (not predicate.any or not present.isdisjoint(predicate.any))
        and present.issuperset(predicate.all)
        and present.isdisjoint(predicate.none)
    )


def matched_label(predicate: Predicate, labels: Collection[str]) -> str | None:
    """The label reported as ``matched.label``: the first of the rule's ``any`` (rule order) that is
    present, else ``all[0]``, else none."""
    present = set(labels)
    for name in predicate.any:
        if name in present:
            return name
    return predicate.all[0] if predicate.all else None
