"""Forge lookups inside the router loop: a determinate verdict decides, an indeterminate one never drops
the event — it stays pending, is retried with backoff, and is parked as ``lookup-failed`` at the cap."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pidispatch.common.keys import ROUTER_GROUP, Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.forges.gitlab.authority import GitlabMember
from pidispatch.router.service import run_router
from pidispatch.triggers.loader import parse_triggers
from pidispatch.triggers.lookup import Authorized, Indeterminate, Question, SelfIds, Verdict
from pidispatch.triggers.rules import RulesRef
from tests.support.decisions import decision_fields
from tests.support.payloads import load_fixture
from tests.support.polling import wait_for

NOTE_RULE = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "gitlab", "flow": "fix"}}


def gitlab_note(body: str = "@pi please look") -> str:
    p = load_fixture("gitlab/comment-issue-event.json")
    p["user"] = {"id": 7, "username": "someone"}
    p["project"].update(id=42, path_with_namespace="group/proj")
    p["object_attributes"].update(note=body, action="create")
    return json.dumps(p)


async def append(redis: Redis, keys: Keys, body: str) -> str:
    delivery = str(uuid.uuid4())
    event = Event(forge="gitlab", event="note", delivery=delivery, received_at=now_ms(), body=body)
    await redis.xadd(keys.events, event.to_fields())  # type: ignore[arg-type]
    return delivery


async def decision(redis: Redis, keys: Keys, delivery: str) -> dict[str, str]:
    return await decision_fields(redis, keys, "gitlab", delivery)


@asynccontextmanager
async def router(base_env: dict[str, str], redis: Redis, keys: Keys, answers: list[Verdict],
                 asked: list[Question], **env: str) -> AsyncIterator[None]:
    async def ask(question: Question, delivery: str) -> Verdict:
        asked.append(question)
        return answers[min(len(asked), len(answers)) - 1]

    settings = load_settings({**base_env, **env})
    stop = asyncio.Event()
    rules = parse_triggers(json.dumps({"triggers": [NOTE_RULE]}))
    task = asyncio.create_task(run_router(
        settings, redis, keys, RulesRef(rules), stop, now_ms, self_ids=SelfIds(
            ids={
                "gitlab": 999,
            },
        ), ask=ask,
        consumer="router-a",
    ))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_an_authorised_gitlab_member_fires_and_the_question_names_project_and_user(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    asked: list[Question] = []
    async with router(base_env, redis, keys, [Authorized(True)], asked):
        delivery = await append(redis, keys, gitlab_note())
        d = await wait_for(lambda: decision(redis, keys, delivery), what="the decision")
    assert d["outcome"] == "queued" and d["jobs"] == f"gl-{delivery}"
    assert asked == [GitlabMember(project_id=42, user_id=7)]


async def test_a_refused_member_is_dropped_by_the_gate(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    async with router(base_env, redis, keys, [Authorized(False)], []):
        delivery = await append(redis, keys, gitlab_note())
        d = await wait_for(lambda: decision(redis, keys, delivery), what="the decision")
    assert (d["outcome"], d["reason"]) == ("dropped", "author-not-allowed")
    assert await redis.xlen(keys.jobs) == 0


async def test_an_indeterminate_lookup_is_retried_then_fires_when_the_forge_answers(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    asked: list[Question] = []
    answers: list[Verdict] = [Indeterminate("status-502"), Authorized(True)]
    async with router(base_env, redis, keys, answers, asked):
        delivery = await append(redis, keys, gitlab_note())
        first = await wait_for(lambda: decision(redis, keys, delivery), what="the pending decision")
        assert (first["outcome"], first["reason"]) == ("pending", "lookup-failed:status-502")
        pending = await redis.xpending(keys.events, ROUTER_GROUP)
        assert pending["pending"] == 1  # never dropped, never acked while undecided

        async def queued() -> Any:
            d = await decision(redis, keys, delivery)
            return d if d.get("outcome") == "queued" else None

        await wait_for(queued, timeout=15, what="the retried decision")
    assert len(asked) == 2
    assert (await redis.xpending(keys.events, ROUTER_GROUP))["pending"] == 0
    assert await redis.xlen(keys.jobs) == 1


async def test_a_lookup_that_never_answers_is_parked_as_lookup_failed_at_the_cap(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    asked: list[Question] = []
    async with router(base_env, redis, keys, [Indeterminate("network")], asked, PD_MAX_DELIVERIES="2"):
        delivery = await append(redis, keys, gitlab_note())
        [(_, parked)] = await wait_for(lambda: redis.xrange(keys.dead), timeout=20, what="the parked entry")
    assert parked[b"reason"] == b"lookup-failed" and parked[b"delivery"] == delivery.encode()
    assert (await decision(redis, keys, delivery))["outcome"] == "dead"
    assert (await redis.xpending(keys.events, ROUTER_GROUP))["pending"] == 0
    assert len(asked) == 2 and await redis.xlen(keys.jobs) == 0
