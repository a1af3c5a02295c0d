"""What a forge package gives the router: ``pidispatch.forges.<name>.route.ROUTE``.

The generic modules (pipeline, authority, identity, triggers, runfields, commands) iterate
``pidispatch.forges.FORGES`` and call ``route_of(forge)`` for everything that differs between forges;
none of them names a forge. The route modules import router modules freely (they load lazily, on the
first ``router()`` call), so this module only names their types.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from pidispatch.forges import FORGES, item_sep
from pidispatch.forges.base import Forge
from pidispatch.triggers.jsvalues import js_int

if TYPE_CHECKING:
    import aiohttp
    import yarl

    from pidispatch.common.models import Event
    from pidispatch.forges.config import ForgeConfig
    from pidispatch.forges.http import Reply
    from pidispatch.triggers.decision import Decision
    from pidispatch.triggers.explain import Trace
    from pidispatch.triggers.lookup import Question, SelfIds
    from pidispatch.triggers.refusal import TriggerEntry
    from pidispatch.triggers.rules import ForgeGroup, Rules

# Each forge's own credential object (a token source), keyed by forge name: opaque here, read only by
# that forge's identity and authority code. Forges whose config holds a plain token have none.
TokenSources = Mapping[str, object]


class AuthorityCalls(Protocol):
    """What a forge's ``authorize`` asks with: ``forges.authority.Authority`` (typed here, so this
    protocol module imports neither that module nor ``identity``, which both dispatch through it)."""

    config: ForgeConfig
    sources: TokenSources

    async def get(self, url: str | yarl.URL, headers: dict[str, str]) -> Reply: ...

    def json(self, reply: Reply) -> object: ...

    def permission(self, reply: Reply) -> bool: ...


class IdentityAsk(Protocol):
    """What a forge's ``resolve_self`` asks with: ``forges.identity.IdentityCalls``."""

    config: ForgeConfig
    sources: TokenSources
    headers: dict[str, Mapping[str, str]]

    async def json(self, forge: str, what: str, url: str | yarl.URL, headers: Mapping[str, str], *,
                   denied: str | None = None) -> Any: ...

    def id(self, forge: str, what: str, body: Any) -> int: ...


# A repository path as forges spell it; Azure DevOps project names may hold spaces (kept as %20).
_REPO_RE = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._/ -]{0,199}")


def delivery_target(kind: str, repo: object, pull: bool, number: object) -> str | None:
    """Pure: the item a delivery is about, spelt as jobs and run records spell theirs (``owner/repo#7``,
    ``group/proj!3``: ``models.item_sep``), the repository alone when it names no item, or None. Only a
    path-shaped name and an integer pass: this text reaches decision records, never a title or body."""
    if not isinstance(repo, str) or not _REPO_RE.fullmatch(repo):
        return None
    repo = repo.replace(" ", "%20")
    item = js_int(number)  # the filter's reading: 7.0 is #7, never #7.0
    if item is not None and item >= 0:
        return f"{repo}{item_sep(kind, pull)}{item}"
    return repo


class RouteDefaults:
    """What most forges' routes share: no review states, no refused selectors or cron fields, and a
    lookup for every firing delivery. A forge's route overrides only where it differs."""

    review_states: bool = False
    pr_selectors_refused: str | None = None
    repository_on: tuple[str, ...] = ()
    item_number_note: str | None = None
    cron_keys: tuple[str, ...] = ()

    def cron_fields(self, entry: TriggerEntry) -> dict[str, Any]:
        return {}

    def needs_lookup(self, group: ForgeGroup) -> bool:
        return group.has_rules()  # every firing delivery asks


class RouterForge(Protocol):
    """One forge to the router: its projection and filter, the question it asks and how it asks it, who
    the harness is there, and what its rules may say beyond the shared fields."""

    name: str
    # triggers.json: on.reviewState is accepted on this forge's pull_request rules.
    review_states: bool
    # Why any/all/none are refused on its pull_request rules (it has no pull-request labels), or None.
    pr_selectors_refused: str | None
    # The on types whose run needs run.repository (the item names none); every other rule refuses it.
    repository_on: tuple[str, ...]
    # Added to the on.number refusal where the forge's item number is not the obvious one, or None.
    item_number_note: str | None
    # The cron run keys only this forge defines (validated by ``cron_fields``).
    cron_keys: tuple[str, ...]

    def cron_fields(self, entry: TriggerEntry) -> dict[str, Any]:
        """Validated cron ``run`` fields that only this forge defines, in the scheduler's names."""
        ...

    def needs_lookup(self, group: ForgeGroup) -> bool:
        """Can some of these rules fire only after an authority lookup (so credentials are required)?"""
        ...

    def project(self, body: str) -> Any: ...

    def decide(
        self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any, trace: Trace
    ) -> Decision: ...

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        """Would the verdict change this (firing) delivery's outcome?"""
        ...

    def question(self, event: Event, subset: Any) -> Question | None:
        """None when the question cannot even be put (no login, no project id): refused, no call."""
        ...

    def action(self, event: Event, subset: Any) -> Any: ...

    def target(self, subset: Any) -> str | None:
        """The item the delivery is about, as ``delivery_target`` spells it, or None."""
        ...

    async def authorize(self, question: Question, authority: AuthorityCalls) -> bool:
        """Answer this forge's question through ``authority``'s HTTP helpers; ``CannotAnswer`` when the
        forge cannot say."""
        ...

    def token_source(self, config: ForgeConfig, http: aiohttp.ClientSession) -> object | None:
        """The credential object its lookups need beyond its config block, or None."""
        ...

    def explicit_self(self, config: ForgeConfig) -> object | None:
        """The harness's identity as the operator set it (no lookup), or None."""
        ...

    async def resolve_self(self, calls: IdentityAsk) -> object:
        """Ask the forge who the harness is; ``IdentityTransient`` or ``ConfigError`` when it cannot."""
        ...

    def with_self(self, ids: SelfIds, value: object) -> SelfIds:
        """``ids`` with this forge's identity set to ``value`` (what the two methods above return)."""
        ...


def token_sources(config: ForgeConfig, http: aiohttp.ClientSession) -> TokenSources:
    """Every forge's token source, built once at start and shared by identity and authority."""
    found = ((f.name, route_of(f).token_source(config, http)) for f in FORGES)
    return {name: source for name, source in found if source is not None}


def route_of(forge: Forge) -> RouterForge:
    """The forge's ``route`` part, typed."""
    return cast(RouterForge, forge.part("route", "ROUTE"))
