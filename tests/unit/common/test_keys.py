from __future__ import annotations

import pytest

from pidispatch.common.keys import Keys


def test_names_follow_the_design_keyspace() -> None:
    k = Keys("pd")
    assert k.events == "pd:events"
    assert k.deliveries.table(513) == "pd:deliveries:513" and k.deliveries.legacy == "pd:seen:"
    assert k.decided(20423, 513) == "pd:decided:20423:513"
    assert k.jobs == "pd:jobs"
    assert k.host_jobs("mini1") == "pd:jobs:mini1"
    assert k.jobids.table(7) == "pd:jobids:7" and k.jobids.legacy == "pd:jobid:"
    assert k.deliveries.upgraded == k.jobids.upgraded == "pd:dedup-upgraded"
    assert k.dedup_layout == "pd:dedup-layout"
    assert k.events_trimmed == "pd:events-trimmed" and k.events_marks == "pd:events-marks"
    assert k.jobs_trimmed == "pd:jobs-trimmed"
    assert k.dedup("o/r#7:fix") == "pd:dedup:o/r#7:fix"
    assert k.job("gh-abc") == "pd:job:gh-abc"
    assert k.dead == "pd:dead"
    assert k.host("mini1") == "pd:host:mini1"
    assert k.runs_index == "pd:runs:index"
    assert k.run_rec("gh-abc") == "pd:runs:rec:gh-abc"
    assert k.cancel("x") == "pd:cancel:x"
    assert k.cancel_ack("x") == "pd:cancel-ack:x"


def test_prefix_isolates_deployments() -> None:
    assert Keys("t1").jobs != Keys("t2").jobs


@pytest.mark.parametrize("prefix", ["", "a b", "a:b", "x" * 33])
def test_bad_prefix_refused(prefix: str) -> None:
    with pytest.raises(ValueError):
        Keys(prefix)
