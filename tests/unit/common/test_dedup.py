"""Where an identity is remembered: one shard's table, the same on every day, with today's day number."""

from __future__ import annotations

from pidispatch.common.dedup import DAY_MS, LEGACY_SHARDS, SHARDS, STORED_BYTES, digest, remembered
from pidispatch.common.keys import Keys

NOW_MS = 20_000 * DAY_MS + 5 * 3600 * 1000  # 05:00 UTC on day 20,000


def test_an_identity_is_looked_for_in_its_shards_table_and_the_old_buckets_only_when_asked() -> None:
    keys = Keys("pd")
    found = remembered(keys.deliveries, "github:abc", NOW_MS)
    shard, stored = digest("github:abc")
    assert found.keys == [f"pd:deliveries:{shard}"]
    assert found.args == [stored, 20_000, "", shard % LEGACY_SHARDS]  # the old buckets' shard
    assert remembered(keys.jobids, "gh-1", NOW_MS, before=True).args[2] == "pd:jobid:"
    assert 0 <= shard < SHARDS and len(stored) == STORED_BYTES


def test_the_same_identity_lands_in_the_same_place_every_day_and_others_spread() -> None:
    keys = Keys("pd")
    a = remembered(keys.jobids, "gh-1", NOW_MS)
    later = remembered(keys.jobids, "gh-1", NOW_MS + 40 * DAY_MS)
    assert later.keys == a.keys and later.args[0] == a.args[0] and later.args[1] == 20_040
    tables = {remembered(keys.jobids, f"gh-{i}", NOW_MS).keys[0] for i in range(1000)}
    assert len(tables) > 980  # 65,536 shards: a thousand ids rarely share one


def test_a_tables_name_is_built_once() -> None:
    space = Keys("pd").deliveries
    assert space.table(7) is space.table(7)
