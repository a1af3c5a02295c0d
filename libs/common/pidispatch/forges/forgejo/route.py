"""Forgejo to the router: ``ROUTE`` (a ``RouterForge``) joins its payload, filter, permission lookup
and identity, and says what its rules may carry beyond the shared fields."""

from __future__ import annotations

from typing import Any

import aiohttp

from pidispatch.common.models import Event
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.forgejo import FORGE, identity
from pidispatch.forges.forgejo import match as forgejo_match
from pidispatch.forges.forgejo import payload as forgejo_payload
from pidispatch.forges.forgejo.authority import ForgejoPermission, may_write
from pidispatch.forges.forgejo.config import block_of
from pidispatch.forges.route import AuthorityCalls, IdentityAsk, RouteDefaults, RouterForge, delivery_target
from pidispatch.triggers.decision import Decision
from pidispatch.triggers.explain import Trace
from pidispatch.triggers.lookup import Question, SelfIds
from pidispatch.triggers.match.common import filled
from pidispatch.triggers.rules import Rules


class ForgejoRoute(RouteDefaults):
    name: str = FORGE.name

    def project(self, body: str) -> forgejo_payload.ForgejoSubset:
        return forgejo_payload.project(body)

    def decide(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any,
               trace: Trace) -> Decision:
        return forgejo_match.decide(event.event, subset, rules, self_ids.number(FORGE.name), event.delivery,
                                    authorized, trace)

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        return True

    def question(self, event: Event, subset: Any) -> Question | None:
        repo, login = filled(subset.repository), filled(subset.sender_login)
        return ForgejoPermission(repo=repo, login=login) if repo and login else None

    def action(self, event: Event, subset: Any) -> Any:
        return subset.action

    def target(self, subset: Any) -> str | None:
        item = subset.issue or subset.pull_request
        pull = subset.pull_request is not None or subset.is_pull
        return delivery_target(self.name, subset.repository, pull, item.number if item else None)

    async def authorize(self, question: Question, authority: AuthorityCalls) -> bool:
        assert isinstance(question, ForgejoPermission)
        return await may_write(question, authority)

    def token_source(self, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        return None  # the token is in the config block

    def explicit_self(self, config: ForgeConfig) -> int | None:
        return block_of(config).bot_id

    async def resolve_self(self, calls: IdentityAsk) -> int:
        return await identity.resolve(calls)

    def with_self(self, ids: SelfIds, value: object) -> SelfIds:
        assert isinstance(value, int)
        return ids.with_id(FORGE.name, value)


ROUTE: RouterForge = ForgejoRoute()
