"""Azure DevOps to the router: ``ROUTE`` (a ``RouterForge``) joins its payload, filter, membership
lookup and identity, and says what its rules may carry beyond the shared fields."""

from __future__ import annotations

from typing import Any

import aiohttp

from pidispatch.common.models import Event
from pidispatch.forges.azure import FORGE, identity
from pidispatch.forges.azure import match as azure_match
from pidispatch.forges.azure import payload as azure_payload
from pidispatch.forges.azure.authority import AzureMembership, is_member
from pidispatch.forges.azure.config import block_of
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.route import AuthorityCalls, IdentityAsk, RouteDefaults, RouterForge, delivery_target
from pidispatch.triggers.decision import Decision
from pidispatch.triggers.explain import Trace
from pidispatch.triggers.lookup import Question, SelfIds
from pidispatch.triggers.match.common import filled
from pidispatch.triggers.rules import Rules

# The rule word for each work-item event.
_WORK_ITEM_ACTION = {"workitem.created": "created", "workitem.updated": "updated"}


class AzureRoute(RouteDefaults):
    name: str = FORGE.name
    pr_selectors_refused: str | None = (f"an {FORGE.name} pull_request trigger "
                            "(Azure tags work items, never pull requests)")
    # A work item names no repository, so its label and comment rules say which one a job clones.
    repository_on: tuple[str, ...] = ("label", "comment")

    def project(self, body: str) -> azure_payload.AzureSubset:
        return azure_payload.project(body)

    def decide(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any,
               trace: Trace) -> Decision:
        return azure_match.decide(subset, rules, self_ids, event.delivery, authorized, trace)

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        return True

    def question(self, event: Event, subset: Any) -> Question | None:
        project_id = filled(subset.project_id)
        guid, email = azure_match.actor(subset)
        if project_id is None:
            return None
        # By GUID when the delivery has one; the address only for an address-only actor.
        return AzureMembership(project_id=project_id, actor_id=guid, actor_email=None if guid else email)

    def action(self, event: Event, subset: Any) -> Any:
        if subset.event_type in ("workitem.commented", azure_payload.PR_COMMENT_EVENT):
            return "commented"
        return {**_WORK_ITEM_ACTION, **azure_match.PR_ACTION_FOR}.get(subset.event_type)

    def target(self, subset: Any) -> str | None:
        # A pull request is on its project's repository; a work item on its project.
        if isinstance(subset.repository_name, str):
            project = subset.project_name if isinstance(subset.project_name, str) else None
            repo = f"{project}/{subset.repository_name}" if project else subset.repository_name
            return delivery_target(self.name, repo, True, subset.number)
        return delivery_target(self.name, subset.project_name, False, subset.number)

    async def authorize(self, question: Question, authority: AuthorityCalls) -> bool:
        assert isinstance(question, AzureMembership)
        return await is_member(question, authority)

    def token_source(self, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        return None  # the token is in the config block

    def explicit_self(self, config: ForgeConfig) -> tuple[str | None, str | None] | None:
        az = block_of(config)
        return (az.self_id, az.self_email) if az.self_id or az.self_email else None

    async def resolve_self(self, calls: IdentityAsk) -> tuple[str | None, str | None]:
        return await identity.resolve(calls)

    def with_self(self, ids: SelfIds, value: object) -> SelfIds:
        assert isinstance(value, tuple)
        guid, email = value
        return ids.with_id(FORGE.name, (guid, email))


ROUTE: RouterForge = AzureRoute()
