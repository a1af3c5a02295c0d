"""Where an identity is remembered: one shard, the window's days newest first, kept to the window's end."""

from __future__ import annotations

from pidispatch.common.dedup import DAY_MS, SHARDS, STORED_BYTES, WINDOW_DAYS, remembered
from pidispatch.common.keys import Keys

NOW_MS = 20_000 * DAY_MS + 5 * 3600 * 1000  # 05:00 UTC on day 20,000


def test_the_window_is_today_and_the_31_days_before_in_one_shard() -> None:
    found = remembered(Keys("pd").seen_window, "github:abc", NOW_MS)
    days = [int(name.split(":")[2]) for name in found.buckets]
    shards = {name.split(":")[3] for name in found.buckets}
    assert days == list(range(20_000, 20_000 - WINDOW_DAYS - 1, -1))
    assert len(shards) == 1 and 0 <= int(shards.pop()) < SHARDS
    assert len(found.digest) == STORED_BYTES


def test_a_bucket_lives_until_its_day_leaves_every_window() -> None:
    found = remembered(Keys("pd").seen_window, "github:abc", NOW_MS)
    assert found.expire_at_s * 1000 == (20_000 + WINDOW_DAYS + 1) * DAY_MS
    # The last check that still looks at day 20,000 is made on day 20,031.
    last = remembered(Keys("pd").seen_window, "github:abc", (20_000 + WINDOW_DAYS) * DAY_MS + DAY_MS - 1)
    assert last.buckets[-1] == found.buckets[0]


def test_the_same_identity_lands_in_the_same_place_and_others_spread() -> None:
    a = remembered(Keys("pd").jobid_window, "gh-1", NOW_MS)
    assert remembered(Keys("pd").jobid_window, "gh-1", NOW_MS + 3600_000) == a  # same day: same buckets
    shards = {remembered(Keys("pd").jobid_window, f"gh-{i}", NOW_MS).buckets[0] for i in range(1000)}
    assert len(shards) > 950  # 65,536 shards: a thousand ids barely ever share one


def test_a_window_names_exactly_the_buckets_of_each_day() -> None:
    keys = Keys("pd")
    window = keys.seen_window(20_000, WINDOW_DAYS + 1)
    assert window[0] + "7" == keys.seen(20_000, 7) and window[-1] + "7" == keys.seen(20_000 - WINDOW_DAYS, 7)
    assert keys.jobid_window(20_000, 2) == (keys.jobid(20_000, 0)[:-1], keys.jobid(19_999, 0)[:-1])
