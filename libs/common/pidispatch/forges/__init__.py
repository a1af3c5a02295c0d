"""The forges pi-dispatch speaks to: one package each, and this registry that lists them.

Everything a forge means to the system lives in its package (``github``, ``gitlab``, ``forgejo``,
``azure``): its constants in ``FORGE``, how the receiver authenticates a delivery (``receive``), how the
router projects, matches and asks who may fire (``route``), its API for the worker (``api``). Modules
outside this package iterate ``FORGES`` or look one up by name and never name a forge, so adding a forge
is one package and one line below.
"""

from __future__ import annotations

from collections.abc import Mapping

from pidispatch.forges import azure, forgejo, github, gitlab
from pidispatch.forges.base import Forge

# In this order everywhere forges are listed (help text, configured lists, log lines).
FORGES: tuple[Forge, ...] = (github.FORGE, gitlab.FORGE, forgejo.FORGE, azure.FORGE)
_BY_NAME: Mapping[str, Forge] = {f.name: f for f in FORGES}

__all__ = ["FORGES", "Forge", "by_name", "fallthrough", "find", "item_sep", "names"]


def names() -> tuple[str, ...]:
    return tuple(f.name for f in FORGES)


def by_name(name: str) -> Forge:
    """The forge called ``name``; KeyError for anything else (``local`` included)."""
    return _BY_NAME[name]


def find(name: str) -> Forge | None:
    """The forge called ``name``, or None: for callers that take any job kind."""
    return _BY_NAME.get(name)


def fallthrough() -> Forge:
    """The receiver's forge for a path no other forge claims."""
    return next(f for f in FORGES if f.fallthrough)


def item_sep(kind: str, pull: bool) -> str:
    """What stands between a repository and an item's number: ``!`` for a pull request on a forge that
    numbers them apart from issues (GitLab, Azure DevOps: ``bang_pr``), else ``#``."""
    forge = find(kind)
    return "!" if pull and forge is not None and forge.bang_pr else "#"
