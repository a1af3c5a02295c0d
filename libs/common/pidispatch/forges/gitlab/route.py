"""GitLab to the router: ``ROUTE`` (a ``RouterForge``) joins its payload, filter, member lookup and
identity, and says what its rules may carry beyond the shared fields."""

from __future__ import annotations

from typing import Any

import aiohttp

from pidispatch.common.models import Event
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.gitlab import FORGE, identity
from pidispatch.forges.gitlab import match as gitlab_match
from pidispatch.forges.gitlab import payload as gitlab_payload
from pidispatch.forges.gitlab.authority import GitlabMember, is_developer
from pidispatch.forges.gitlab.config import block_of
from pidispatch.forges.route import AuthorityCalls, IdentityAsk, RouteDefaults, RouterForge, delivery_target
from pidispatch.triggers.decision import Decision
from pidispatch.triggers.explain import Trace
from pidispatch.triggers.jsvalues import js_int
from pidispatch.triggers.lookup import Question, SelfIds
from pidispatch.triggers.rules import Rules


class GitLabRoute(RouteDefaults):
    name: str = FORGE.name
    item_number_note: str | None = "the iid on GitLab"

    def project(self, body: str) -> gitlab_payload.GitLabSubset:
        return gitlab_payload.project(body)

    def decide(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any,
               trace: Trace) -> Decision:
        return gitlab_match.decide(subset, rules, self_ids.number(FORGE.name), event.delivery, authorized,
                                   trace)

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        return True  # labels are no approval on GitLab: every type needs the member verdict

    def question(self, event: Event, subset: Any) -> Question | None:
        project_id, user_id = js_int(subset.project_id), js_int(subset.user_id)
        if project_id is not None and user_id is not None:
            return GitlabMember(project_id=project_id, user_id=user_id)
        return None

    def action(self, event: Event, subset: Any) -> Any:
        return subset.action

    def target(self, subset: Any) -> str | None:
        merge = subset.object_kind == "merge_request" or subset.noteable_type == "MergeRequest"
        return delivery_target(self.name, subset.project_path, merge, subset.target.iid)

    async def authorize(self, question: Question, authority: AuthorityCalls) -> bool:
        assert isinstance(question, GitlabMember)
        return await is_developer(question, authority)

    def token_source(self, config: ForgeConfig, http: aiohttp.ClientSession) -> None:
        return None  # the token is in the config block

    def explicit_self(self, config: ForgeConfig) -> int | None:
        return block_of(config).self_id

    async def resolve_self(self, calls: IdentityAsk) -> int:
        return await identity.resolve(calls)

    def with_self(self, ids: SelfIds, value: object) -> SelfIds:
        assert isinstance(value, int)
        return ids.with_id(FORGE.name, value)


ROUTE: RouterForge = GitLabRoute()
