"""The chaos suite, short: four trials of the whole stack as real processes on a real Redis and Docker, each
killing one target with SIGKILL mid-batch (receiver, router, worker, redis-server) and restarting it.
Nothing answered 2xx may be lost, no job may run or be recorded twice, no job may be paid for twice.

The long run is ``benchmarks/chaos.py`` (100 trials by default); both run ``tests/support/chaos.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chaos import HEADER, format_details, format_row, format_totals, run_trials, summarize

# One trial per kill target, in this order. The seed fixes the kill moments, downtimes, post moments and
# job lengths; this one was picked so that each kill lands in the thick of it: the worker's while its
# containers run, the receiver's and redis-server's with deliveries arriving during the outage.
PLAN = ["worker", "receiver", "redis", "router"]
SEED = 20261258


@pytest.mark.docker
async def test_kill_9_of_any_one_part_loses_doubles_and_pays_twice_nothing(
    require_docker: None, test_image: str, tmp_path: Path
) -> None:
    results = await run_trials(tmp_path / "chaos", test_image, PLAN, seed=SEED)
    totals = summarize(results)
    report = "\n".join([
        HEADER,
        *(line for r in results for line in (format_row(r), *format_details(r))),
        *format_totals(totals),
    ])
    assert [r.target for r in results] == PLAN
    assert (totals.lost, totals.doubled, totals.paid_twice, totals.stored_twice) == (0, 0, 0, 0), report
    # The forge's side: every delivery was finally answered 2xx (redelivered after a 5xx or no answer).
    assert totals.answered_2xx == totals.posted == len(PLAN) * 6, report
    assert totals.completed == totals.posted, report
