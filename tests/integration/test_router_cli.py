"""``pi-dispatch events``, ``explain`` and ``replay`` against a real Redis and a real router process."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from pidispatch.common.keys import Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis
from pidispatch.common.runtime import now_ms
from pidispatch.triggers import decisions
from pidispatch.triggers.decision import Subject
from pidispatch.triggers.decisions import RouteOutcome
from tests.support.decisions import decision_fields
from tests.support.payloads import FIXTURES
from tests.support.polling import wait_for
from tests.support.processes import ServiceProcess

LABELED = (FIXTURES / "github" / "issues.labeled.json").read_text()  # label "bug", issue #1
BUG_RULE = {"on": {"type": "label", "any": ["bug"]}, "run": {"kind": "github", "flow": "fix"}}
OTHER_RULE = {"on": {"type": "label", "any": ["pi:fix"]}, "run": {"kind": "github", "flow": "fix"}}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pidispatch.common.cli", *args], env=env, capture_output=True, text=True,
        timeout=30, check=False,
    )


async def append(redis: Redis, keys: Keys) -> str:
    delivery = str(uuid.uuid4())
    event = Event(forge="github", event="issues", delivery=delivery, received_at=now_ms(), body=LABELED)
    await redis.xadd(keys.events, event.to_fields())  # type: ignore[arg-type]
    return delivery


async def outcome(redis: Redis, keys: Keys, delivery: str) -> str | None:
    return (await decision_fields(redis, keys, "github", delivery)).get("outcome")


async def test_events_explain_and_replay_after_fixing_the_triggers_file(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    triggers = Path(base_env["PI_TRIGGERS_FILE"])
    triggers.write_text(json.dumps({"triggers": [OTHER_RULE]}))
    router = ServiceProcess("router", {**base_env, "PD_LOG_LEVEL": "debug"}, tmp_path / "router.log")
    router.start()
    try:
        delivery = await append(redis, keys)
        await wait_for(lambda: outcome(redis, keys, delivery), timeout=15, what="the first decision")
        assert await outcome(redis, keys, delivery) == "dropped"

        listing = cli(base_env, "events", "--json")
        assert listing.returncode == 0, listing.stderr
        [row] = json.loads(listing.stdout)
        assert (row["delivery"], row["outcome"]) == (delivery, "dropped")
        assert row["reason"] == "no-allowlisted-label"
        # Ids, tokens and the item reference only: no title, and the sender's login (here also the repository
        # owner's) only inside the target.
        assert row["target"] == "Codertocat/Hello-World#1" and listing.stdout.count("Codertocat") == 1
        assert "Spelling" not in listing.stdout

        why = cli(base_env, "explain", delivery)
        assert why.returncode == 0, why.stderr
        stored, today = why.stdout.splitlines()[1:3]
        assert stored.startswith("stored decision (")
        assert stored.endswith("): dropped, reason no-allowlisted-label")
        assert today == "today's rules would: drop it, reason no-allowlisted-label"
        assert "Spelling error" not in why.stdout  # the title stays out

        # The operator fixes the file; the running router hot-reloads it; replay re-decides the event.
        triggers.write_text(json.dumps({"triggers": [BUG_RULE]}))
        await wait_for(lambda: router.logged("triggers_reloaded"), timeout=10, what="the reload")
        # What was stored still comes first: today's rules are labelled as such.
        stored_then_today = cli(base_env, "explain", delivery).stdout.splitlines()[1:3]
        assert stored_then_today == [stored, f"today's rules would: fire rule #0, job(s) gh-{delivery}"]
        replayed = cli(base_env, "replay", delivery)
        assert replayed.returncode == 0, replayed.stderr

        async def queued() -> bool:
            return await outcome(redis, keys, delivery) == "queued"

        await wait_for(queued, timeout=15, what="the replayed decision")
        assert await redis.xlen(keys.jobs) == 1

        # A second replay cannot make a second job: the job id is the delivery's.
        assert cli(base_env, "replay", delivery).returncode == 0
        await wait_for(lambda: router.logged("deduplicated"), timeout=15, what="the second replay")
        assert await redis.xlen(keys.jobs) == 1 and len(router.logged("enqueued")) == 1
        found = await decision_fields(redis, keys, "github", delivery)
        assert (found["outcome"], found["reason"]) == ("deduplicated", "job-id")
        assert found["jobs"] == f"gh-{delivery}"
    finally:
        assert router.stop() == 0


def test_explain_of_an_unknown_delivery_says_so_and_exits_1(base_env: dict[str, str]) -> None:
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE]}))
    result = cli(base_env, "explain", "no-such-delivery")
    assert result.returncode == 1
    assert "no-such-delivery" in result.stderr and "not in the stored events" in result.stderr


async def test_explain_says_the_stored_deduplicated_decision_before_what_todays_rules_would_do(
    base_env: dict[str, str], redis: Redis, keys: Keys
) -> None:
    """Today's rules fire for this delivery, but the router found its work already carried by another
    delivery's job: explain must not let the re-run read as what happened."""
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE]}))
    delivery = await append(redis, keys)
    [(entry, _)] = await redis.xrange(keys.events, count=1)
    survivor = f"gh-{uuid.uuid4()}"
    page = decisions.Page()
    decided = RouteOutcome("deduplicated", jobs=(survivor,), trigger=0)
    log = decisions.Logging(Subject("issues", "labeled"), replay=False)
    decisions.record(page, keys, "github", delivery, entry.decode(), decided, 1_767_323_045_000, log)
    await decisions.write(redis, keys, page, 10_000)

    why = cli(base_env, "explain", delivery)
    assert why.returncode == 0, why.stderr
    assert why.stdout.splitlines()[:3] == [
        f"delivery {delivery}: forge github, event issues, action labeled",
        f"stored decision (2026-01-02 03:04:05 UTC): deduplicated by rule #0: no job of its own, the "
        f"surviving job(s) {survivor} carry it",
        f"today's rules would: fire rule #0, job(s) gh-{delivery}",
    ]
    as_json = json.loads(cli(base_env, "explain", delivery, "--json").stdout)
    assert as_json["stored"]["outcome"] == "deduplicated" and as_json["stored"]["jobs"] == [survivor]
    assert as_json["outcome"] == "fire"  # the re-run, beside the stored decision

    # A delivery the router has not decided shows only the re-run, labelled.
    undecided = await append(redis, keys)
    lines = cli(base_env, "explain", undecided).stdout.splitlines()
    assert lines[1] == f"today's rules would: fire rule #0, job(s) gh-{undecided}"
    assert not any(line.startswith("stored") for line in lines)


def test_the_router_refuses_at_start_a_file_with_a_field_no_worker_acts_on(base_env: dict[str, str]) -> None:
    rule = {**BUG_RULE, "run": {**BUG_RULE["run"], "skillsDir": "/srv/skills"}}
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE, rule]}))
    result = subprocess.run([sys.executable, "-m", "pidispatch.router"], env=base_env, capture_output=True,
                            text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert result.stderr == (
        "pi-dispatch: configuration error: PI_TRIGGERS_FILE triggers.json: triggers[1].run.skillsDir is not "
        "supported by pi-dispatch yet (no worker mounts a skills folder into a job); remove it\n"
    )


async def test_the_router_starts_on_an_empty_list_and_warns_once(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": []}))
    router = ServiceProcess("router", {**base_env, "PD_LOG_LEVEL": "debug"}, tmp_path / "router.log")
    router.start()
    try:
        await wait_for(lambda: router.logged("triggers_watching"), timeout=15, what="the router to start")
        [line] = router.logged("triggers_empty")
        assert (line["level"], line["file"]) == ("warning", "triggers.json")
    finally:
        assert router.stop() == 0


async def test_events_shows_a_replay_as_a_replay_and_a_cancelled_job_as_cancelled(
    base_env: dict[str, str], redis: Redis, keys: Keys, tmp_path: Path
) -> None:
    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [BUG_RULE]}))
    router = ServiceProcess("router", {**base_env, "PD_LOG_LEVEL": "debug"}, tmp_path / "router.log")
    router.start()
    try:
        delivery = await append(redis, keys)
        await wait_for(lambda: router.logged("enqueued"), timeout=15, what="the first decision")
        replayed = cli(base_env, "replay", "--json", delivery)
        assert replayed.returncode == 0, replayed.stderr
        answer = json.loads(replayed.stdout)  # one JSON object, nothing else on stdout
        assert (answer["replayed"], answer["delivery"], answer["forge"]) == (True, delivery, "github")
        await wait_for(lambda: router.logged("deduplicated"), timeout=15, what="the replay's decision")
    finally:
        assert router.stop() == 0

    # The replay made no second job: its job id exists from the original entry.
    replay, original = json.loads(cli(base_env, "events", "--json").stdout)
    assert (replay["replay"], replay["outcome"], replay["reason"]) == (True, "deduplicated", "job-id")
    assert replay["jobs"] == [f"gh-{delivery}"] and replay["entry"] == answer["entry"]
    assert (original["replay"], original["outcome"]) == (False, "queued")
    assert (original["jobs"], original["streams"]) == ([f"gh-{delivery}"], [keys.jobs])
    assert (original["target"], original["action"]) == ("Codertocat/Hello-World#1", "labeled")

    assert cli(base_env, "cancel", f"gh-{delivery}").returncode == 0
    replay, original = json.loads(cli(base_env, "events", "--json").stdout)
    assert original["cancelled"] and not replay["cancelled"]
    table = cli(base_env, "events").stdout.splitlines()
    assert [line.split()[5:7] for line in table[1:]] == [
        ["replay:", "deduplicated"], ["cancelled", f"gh-{delivery}"]
    ]
    assert sum(" queued " in line for line in table) == 0


def test_events_reads_the_reason_cancel_writes() -> None:
    from pidispatch.console.control import CANCEL_REASON as WRITTEN
    from pidispatch.console.events import CANCEL_REASON

    assert CANCEL_REASON == WRITTEN


async def test_a_real_router_logs_self_identity_once_per_forge(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    from pidispatch import forges

    Path(base_env["PI_TRIGGERS_FILE"]).write_text(json.dumps({"triggers": [OTHER_RULE]}))
    router = ServiceProcess("router", {**base_env, "GITHUB_SELF_ID": "7"}, tmp_path / "router.log")
    router.start()
    try:
        await wait_for(lambda: router.logged("router_started"), timeout=15, what="the router to start")
    finally:
        assert router.stop() == 0
    logged = sorted(line["forge"] for line in router.logged("self_identity"))
    assert logged == sorted(forges.names())
