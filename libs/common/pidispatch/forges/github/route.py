"""GitHub to the router: ``ROUTE`` (a ``RouterForge``) joins its payload, filter, closer lookup and
identity, and says what its rules may carry beyond the shared fields."""

from __future__ import annotations

from typing import Any

import aiohttp

from pidispatch.common.models import Event
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.github import FORGE, identity
from pidispatch.forges.github import match as github_match
from pidispatch.forges.github import payload as github_payload
from pidispatch.forges.github.auth import GithubAuth
from pidispatch.forges.github.authority import GithubCloser, may_close
from pidispatch.forges.github.config import block_of
from pidispatch.forges.route import AuthorityCalls, IdentityAsk, RouteDefaults, RouterForge, delivery_target
from pidispatch.triggers.decision import Decision
from pidispatch.triggers.explain import Trace
from pidispatch.triggers.lookup import Question, SelfIds
from pidispatch.triggers.match.common import filled
from pidispatch.triggers.refusal import TriggerEntry
from pidispatch.triggers.rules import ForgeGroup, Rules
from pidispatch.triggers.runfields import strict_bool


class GitHubRoute(RouteDefaults):
    name: str = FORGE.name
    review_states: bool = True
    cron_keys: tuple[str, ...] = (FORGE.name,)

    def cron_fields(self, entry: TriggerEntry) -> dict[str, Any]:
        # run.github on a cron entry: the local job is given GitHub credentials.
        return {self.name: strict_bool(entry, self.name)}

    def needs_lookup(self, group: ForgeGroup) -> bool:
        return bool(group.issue or group.pr_close)  # only a close asks who closed

    def project(self, body: str) -> github_payload.GitHubSubset:
        return github_payload.project(body)

    def decide(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds, authorized: Any,
               trace: Trace) -> Decision:
        return github_match.decide(event.event, subset, rules, self_ids.number(FORGE.name), event.delivery,
                                   authorized, trace)

    def gated(self, event: Event, subset: Any, rules: Rules, self_ids: SelfIds) -> bool:
        return github_match.wants_closer_authority(
            event.event, subset, rules.group(FORGE.name), self_ids.number(FORGE.name)
        )

    def question(self, event: Event, subset: Any) -> Question | None:
        repo, login = filled(subset.repository), filled(subset.sender_login)
        return GithubCloser(repo=repo, login=login) if repo and login else None

    def action(self, event: Event, subset: Any) -> Any:
        return subset.action

    def target(self, subset: Any) -> str | None:
        item = subset.issue or subset.pull_request
        pull = subset.pull_request is not None or (subset.issue is not None and subset.issue.is_pull_request)
        return delivery_target(self.name, subset.repository, pull, item.number if item else None)

    async def authorize(self, question: Question, authority: AuthorityCalls) -> bool:
        assert isinstance(question, GithubCloser)
        return await may_close(question, authority)

    def token_source(self, config: ForgeConfig, http: aiohttp.ClientSession) -> GithubAuth | None:
        return GithubAuth(config, http) if block_of(config).configured else None

    def explicit_self(self, config: ForgeConfig) -> int | None:
        return block_of(config).self_id

    async def resolve_self(self, calls: IdentityAsk) -> int:
        return await identity.resolve(calls)

    def with_self(self, ids: SelfIds, value: object) -> SelfIds:
        assert isinstance(value, int)
        return ids.with_id(FORGE.name, value)


ROUTE: RouterForge = GitHubRoute()
