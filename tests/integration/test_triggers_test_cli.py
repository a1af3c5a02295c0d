"""``pi-dispatch triggers test FILE`` lists exactly the stored deliveries whose outcome an edit changes, asks
the forge each fact once, and leaves Redis byte for byte as it found it.

Fifty real deliveries go through a real receiver process and a real router process (with a stand-in GitHub
answering the closer lookups); then both stop, and the verb runs as an operator runs it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from pidispatch.common.embedded import free_port
from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.triggers.comparison import FINAL
from tests.support.cli import run_cli
from tests.support.decisions import decision_fields
from tests.support.forges import ISSUE_REPO, GithubStandIn
from tests.support.payloads import load_fixture
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess
from tests.support.receiver import github_headers

BUG = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}
DOCS = {"on": {"type": "label", "any": ["docs"]}, "run": {"kind": "github", "flow": "docs"}}
ENHANCEMENT = {"on": {"type": "label", "any": ["enhancement"]}, "run": {"kind": "github", "flow": "triage"}}
COMMENT = {"on": {"type": "comment", "phrase": "@pi"}, "run": {"kind": "github", "flow": "answer"}}
CLOSE = {"on": {"type": "issue", "action": ["closed"]}, "run": {"kind": "github", "flow": "closed"}}
IN_FORCE = [BUG, DOCS, COMMENT, CLOSE]
# Drops the docs rule and adds the enhancement rule (in its place, so no other rule is renumbered).
CANDIDATE = [BUG, ENHANCEMENT, COMMENT, CLOSE]
WRITER, STRANGER = "Codertocat", "mona"  # the fixture's sender may close; the stand-in knows no "mona"


def _labeled(number: int, label: str) -> tuple[str, dict[str, Any]]:
    p = load_fixture("github/issues.labeled.json")
    p["issue"]["number"] = number
    p["label"] = {"name": label}
    p["issue"]["labels"] = [{"name": label}]
    return "issues", p


def _opened(number: int) -> tuple[str, dict[str, Any]]:
    p = load_fixture("github/issues.opened.json")
    p["issue"]["number"] = number
    p["issue"]["labels"] = []
    return "issues", p


def _comment(number: int, text: str) -> tuple[str, dict[str, Any]]:
    p = load_fixture("github/issue_comment.created.json")
    p["issue"]["number"] = number
    p["comment"]["body"] = text
    return "issue_comment", p


def _closed(number: int, closer: str) -> tuple[str, dict[str, Any]]:
    p = load_fixture("github/issues.labeled.json")
    p["action"] = "closed"
    p.pop("label")
    p["issue"].update(number=number, state="closed", labels=[])
    if closer != WRITER:
        p["sender"] = {**p["sender"], "login": closer, "id": 583231}
    return "issues", p


def fifty() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Fifty deliveries of five event types, grouped by what the candidate file does to them."""
    return {
        # fires rule #0 under both files; the last two repeat issues #1 and #2 (deduplicated by the router)
        "bug": [_labeled(n, "bug") for n in range(1, 14)] + [_labeled(1, "bug"), _labeled(2, "bug")],
        "docs": [_labeled(n, "docs") for n in range(101, 111)],  # queued by #1, dropped under the candidate
        "enhancement": [_labeled(n, "enhancement") for n in range(201, 209)],  # dropped, then fires #1
        "comments": [_comment(n, "@pi please look") for n in range(301, 305)]
        + [_comment(n, "thanks, looks good") for n in (305, 306)],
        "closes": [_closed(n, WRITER) for n in range(401, 405)] + [_closed(n, STRANGER) for n in (405, 406)],
        "opened": [_opened(n) for n in range(501, 506)],
    }


@asynccontextmanager
async def stack(env: dict[str, str], tmp_path: Path) -> AsyncIterator[str]:
    """A receiver and a router process; yields the receiver's base URL; both stopped on exit."""
    port = free_port()
    receiver = ServiceProcess("receiver", {**env, "RECEIVER_PORT": str(port), "RECEIVER_BIND": "127.0.0.1"},
                              tmp_path / "receiver.log")
    router = ServiceProcess("router", env, tmp_path / "router.log")
    receiver.start()
    router.start()
    try:
        await wait_for(lambda: receiver.logged("receiver_started"), timeout=15, what="receiver_started")
        yield f"http://127.0.0.1:{port}"
    finally:
        assert await asyncio.to_thread(router.stop) == 0
        assert await asyncio.to_thread(receiver.stop) == 0


async def deliver(url: str, groups: dict[str, list[tuple[str, dict[str, Any]]]]) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {}
    async with aiohttp.ClientSession() as http:
        for name, items in groups.items():
            for event, payload in items:
                body, delivery = json.dumps(payload).encode(), str(uuid.uuid4())
                async with http.post(f"{url}/github", data=body,
                                     headers=github_headers(body, event, delivery)) as r:
                    assert r.status == 202, await r.text()
                ids.setdefault(name, []).append(delivery)
    return ids


async def snapshot(redis: Redis, keys: Keys) -> dict[bytes, tuple[bytes | None, int]]:
    """Every key of the deployment, serialized (DUMP: a stream's groups, pending lists and counters too)
    with its absolute expiry. DEBUG DIGEST would do, but redis-server 7 refuses DEBUG by default."""
    found = {}
    async for key in redis.scan_iter(match=f"{keys.prefix}:*", count=1000):
        found[key] = (await redis.dump(key), await redis.pexpiretime(key))
    return found


async def trial(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = await asyncio.to_thread(run_cli, env, "triggers", "test", *args, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


async def test_an_edit_lists_exactly_the_deliveries_it_changes_and_redis_is_untouched(
    base_env: dict[str, str], redis: Redis, keys: Keys, github: GithubStandIn, tmp_path: Path
) -> None:
    github.forge.state["permissions"][(ISSUE_REPO, WRITER)] = "write"
    env = {**base_env, **github.env()}
    Path(env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": IN_FORCE}))
    candidate = tmp_path / "candidate.json"
    candidate.write_text(json.dumps({"triggers": CANDIDATE}))
    groups = fifty()
    assert sum(len(items) for items in groups.values()) == 50

    async with stack(env, tmp_path) as url:
        ids = await deliver(url, groups)
        every = [d for group in ids.values() for d in group]

        async def all_decided() -> bool:
            found = [await decision_fields(redis, keys, "github", d) for d in every]
            return all(f.get("outcome") in FINAL for f in found)

        await wait_for(all_decided, timeout=60, what="the router's decision on all 50 deliveries")
    stored = {d: await decision_fields(redis, keys, "github", d) for d in every}
    assert {stored[d]["outcome"] for d in ids["bug"][-2:]} == {"deduplicated"}
    assert [stored[d]["reason"] for d in ids["closes"]] == [""] * 4 + ["closer-not-allowed"] * 2
    router_asked = len(github.forge.calls("permission"))

    before = await snapshot(redis, keys)
    assert len(before) > 5
    result = await trial(env, str(candidate))
    assert await snapshot(redis, keys) == before
    # Two closers, asked once each, although six closes ask under both files.
    assert len(github.forge.calls("permission")) - router_asked == 2

    assert (result["compared"], result["unchanged"]) == (50, 32)
    changed = {row["delivery"]: row for row in result["changed"]}
    assert set(changed) == set(ids["docs"]) | set(ids["enhancement"])
    docs, enhancement = changed[ids["docs"][0]], changed[ids["enhancement"][0]]
    assert docs["stored"] == {"outcome": "queued", "trigger": 1, "flow": "docs", "reason": "",
                              "recorded": True}
    assert docs["would"] == {"outcome": "drop", "trigger": None, "flow": None,
                             "reason": "no-allowlisted-label"}
    assert enhancement["stored"]["outcome"] == "dropped"
    assert enhancement["stored"]["reason"] == "no-allowlisted-label"
    assert enhancement["would"] == {"outcome": "fire", "trigger": 1, "flow": "triage", "reason": ""}
    assert (docs["forge"], docs["event"], docs["action"]) == ("github", "issues", "labeled")
    assert docs["target"] == f"{ISSUE_REPO}#101"

    # The file in force changes nothing, and --offline asks no forge: the closes ask the same question
    # under both files, so the verdict that made their stored decision still holds.
    asked = len(github.forge.calls("permission"))
    same = await trial(env, env["PI_TRIGGERS_FILE"])
    assert (same["compared"], same["unchanged"], same["changed"]) == (50, 50, [])
    offline = await trial(env, str(candidate), "--offline")
    assert {row["delivery"] for row in offline["changed"]} == set(changed)
    assert offline["neededForge"] == 6
    assert len(github.forge.calls("permission")) - asked == 2  # the in-force run only
    # Without GITHUB_SELF_ID the harness's account is asked once, as the router asks it at start.
    unset = {k: v for k, v in env.items() if k != "GITHUB_SELF_ID"}
    users = len(github.forge.calls("user"))
    asked_self = await trial(unset, str(candidate))
    assert len(github.forge.calls("user")) - users == 1
    assert (asked_self["unchanged"], {r["delivery"] for r in asked_self["changed"]}) == (32, set(changed))
    last = await trial(env, str(candidate), "--last", "5")
    assert last["compared"] == 5 and last["changed"] == []  # the five newest: opened issues
    assert await snapshot(redis, keys) == before

    table = await asyncio.to_thread(run_cli, env, "triggers", "test", str(candidate))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "compared 50 deliveries: 32 unchanged, 18 would change"
    assert lines[1].split() == ["DELIVERY", "FORGE", "EVENT", "TARGET", "STORED", "->", "UNDER",
                                "candidate.json"]
    row = next(line for line in lines if ids["docs"][0] in line)
    assert "queued rule #1, flow docs -> drop: no-allowlisted-label" in row
    assert "Spelling error" not in table.stdout  # the issue's title stays out


async def test_a_refused_file_exits_2_with_the_loaders_line(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG]}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"triggers": [{"on": {"type": "label", "any": ["x"]},
                                             "run": {"kind": "github", "flow": "fix", "nope": 1}}]}))
    done = await asyncio.to_thread(run_cli, base_env, "triggers", "test", str(bad))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("pi-dispatch: configuration error: PI_TRIGGERS_FILE bad.json: triggers[0]")
    # A close rule needs the forge's lookup: without GitHub credentials the router would not start.
    bad.write_text(json.dumps({"triggers": [CLOSE]}))
    done = await asyncio.to_thread(run_cli, base_env, "triggers", "test", str(bad))
    assert done.returncode == 2 and "github has no credentials" in done.stderr
    missing = await asyncio.to_thread(run_cli, base_env, "triggers", "test", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and "none.json: file not found" in missing.stderr
