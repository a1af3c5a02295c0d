"""The fleet gate on schedules: which peers diverge (shared ids only), and with a real Redis registry, that a
divergent host neither installs nor prunes, re-checks until the fleet agrees, and that two hosts taking one
edit in turn converge instead of waiting on each other."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo

from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.redis import Redis
from pidispatch.common.registry import HostRow
from pidispatch.triggers.rules import CronRule
from pidispatch.worker.cron.gate import Gate, conflicts, divergent_ids
from pidispatch.worker.cron.schedules import Loaded, Scheduler, definitions, fleet_fingerprint

NOW = 1_767_225_601_000  # 2026-01-01T00:00:01Z


def rule(sid: str = "nightly", pattern: str = "0 3 * * *", **run: Any) -> CronRule:
    return CronRule(index=0, id=sid, pattern=pattern,
                    run={"kind": "local", "folder": "/srv/app", "flow": "tidy", "task": "tidy up", **run})


def host(name: str, *rules: CronRule, tz: str = "UTC") -> HostRow:
    defs = definitions(rules, tz)
    return HostRow(name=name, cron_sigs=defs, fp_cron=fleet_fingerprint(defs), cron_count=len(defs))


# --- pure ------------------------------------------------------------------------------------------


def test_a_definition_covers_pattern_run_and_zone_and_the_fingerprint_not_the_order() -> None:
    a, b = rule("a", "* * * * *"), rule("b")
    base = definitions((a, b), "UTC")
    assert base == definitions((b, a), "UTC")
    assert base["a"] != definitions((rule("a", "*/2 * * * *"),), "UTC")["a"]
    assert base["a"] != definitions((rule("a", "* * * * *", task="other"),), "UTC")["a"]
    assert base["a"] != definitions((a,), "Europe/Amsterdam")["a"]
    assert fleet_fingerprint(base) == fleet_fingerprint(dict(reversed(base.items())))
    assert fleet_fingerprint(base) != fleet_fingerprint(definitions((a,), "UTC"))
    assert fleet_fingerprint({}) == ""


def test_only_a_peer_defining_a_shared_id_differently_diverges() -> None:
    a, b = rule("a", "* * * * *"), rule("b")
    mine = definitions((a,), "UTC")
    same, other_set = host("same", a, b), host("other-set", b)
    other_zone, other_pattern = host("zone", a, tz="Asia/Tokyo"), host("pattern", rule("a", "0 * * * *"))
    me = host("me", rule("a", "0 0 1 1 *"))  # my own (stale) row is never a peer
    peers = [same, other_set, other_zone, other_pattern, me, HostRow(name="none")]
    assert [p.name for p in conflicts(mine, peers, "me")] == ["zone", "pattern"]
    assert divergent_ids([same, other_set]) == set()
    assert divergent_ids([same, other_set, other_zone]) == {"a"}


# --- with the registry in Redis ----------------------------------------------------------------------


def make(redis: Redis, keys: Keys, tz: str = "UTC") -> Scheduler:
    return Scheduler(redis=redis, keys=keys, stream="s", clock=lambda: NOW, zone=ZoneInfo(tz), tz=tz)


async def publish(redis: Redis, keys: Keys, name: str, s: Scheduler) -> None:
    await redis.hset(keys.host(name), mapping={"name": name, "beatAt": str(NOW), **s.row_fields()})
    await redis.sadd(keys.hosts, name)


async def test_a_divergent_host_neither_installs_nor_prunes_until_the_peer_agrees(
    redis: Redis, keys: Keys
) -> None:
    a, b, c = rule("a", "*/3 * * * * *"), rule("b", "0 3 * * *"), rule("c", "0 4 * * *")
    me, peer = make(redis, keys), make(redis, keys)
    gate = Gate(me, "me", 1.0)
    me.swap(Loaded(rules=(a, b), mine=(a, b)))
    await gate.reconcile()  # nobody else registered: install
    assert sorted(me.active) == ["a", "b"]
    peer.swap(Loaded(rules=(a, b), mine=(a, b)))
    await publish(redis, keys, "peer", peer)
    # My edit re-times a, drops b and adds c; the peer still wants the old a.
    new_a = rule("a", "*/5 * * * * *")
    me.swap(Loaded(rules=(new_a, c), mine=(new_a, c)))
    with capture_logs() as logs:
        await gate.reconcile()
        await gate.reconcile()  # a re-check with the same disagreement logs nothing new
    assert sorted(me.active) == ["a", "b"] and me.active["a"] == a  # nothing installed, nothing pruned
    (refused,) = [e for e in logs if e["event"] == "cron_divergence_refused"]
    assert refused["mine"] == fleet_fingerprint(definitions((new_a, c), "UTC")) and refused["cronCount"] == 2
    assert refused["peers"] == [{"host": "peer", "fpCron": peer.row_fields()["fpCron"], "cronCount": 0}]
    # The peer takes the same edit: its row now wants what I want, so my next re-check installs.
    peer.swap(Loaded(rules=(new_a, c), mine=(new_a, c)))
    await publish(redis, keys, "peer", peer)
    with capture_logs() as logs:
        await gate.reconcile()
    assert sorted(me.active) == ["a", "c"] and me.active["a"] == new_a
    assert [(e["event"], e.get("id")) for e in logs] == [("cron_divergence_cleared", None),
                                                          ("scheduler_removed_orphan", "b")]


async def test_two_hosts_taking_one_edit_in_turn_both_install_it(redis: Redis, keys: Keys) -> None:
    a, new_a = rule("a", "*/3 * * * * *"), rule("a", "*/5 * * * * *")
    one, two = make(redis, keys), make(redis, keys)
    gates = Gate(one, "one", 1.0), Gate(two, "two", 1.0)
    for s, name, gate in ((one, "one", gates[0]), (two, "two", gates[1])):
        s.swap(Loaded(rules=(a,), mine=(a,)))
        await gate.reconcile()
        await publish(redis, keys, name, s)
    one.swap(Loaded(rules=(new_a,), mine=(new_a,)))  # the edit reaches host one first
    await gates[0].reconcile()
    await publish(redis, keys, "one", one)
    assert one.active["a"] == a  # two still wants the old definition
    two.swap(Loaded(rules=(new_a,), mine=(new_a,)))
    await gates[1].reconcile()  # one already publishes the new definition: two installs at once
    await publish(redis, keys, "two", two)
    await gates[0].reconcile()  # and one's next re-check installs too
    assert one.active["a"] == new_a and two.active["a"] == new_a


async def test_a_zone_disagreement_on_a_shared_schedule_refuses_the_install(redis: Redis, keys: Keys) -> None:
    a = rule("a", "0 9 * * *")
    tokyo = make(redis, keys, "Asia/Tokyo")
    tokyo.swap(Loaded(rules=(a,), mine=(a,)))
    await publish(redis, keys, "tokyo", tokyo)
    utc = make(redis, keys)
    utc.swap(Loaded(rules=(a,), mine=(a,)))
    with capture_logs() as logs:
        await Gate(utc, "utc", 1.0).reconcile()
    assert utc.active == {} and [e["peers"][0]["host"] for e in logs] == ["tokyo"]
