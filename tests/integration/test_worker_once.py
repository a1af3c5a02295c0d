"""The triggers file as the worker reads it before spend, end to end with a real worker, Redis and Docker:
a one-shot rule's first job runs and its entry gets ``on.disarmed`` with that job's id (every other byte
kept); a second job of the same rule is refused ``once-already-spent`` before any container starts; a rule
narrowed after its job was queued refuses that job ``trigger-skew``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiodocker
import msgspec
from structlog.testing import capture_logs

from pidispatch.common.keys import Keys
from pidispatch.common.models import Job, Matched
from pidispatch.common.redis import Redis
from tests.support.polling import wait_for
from tests.support.worker import enqueue, issue_job, record, running_worker

# Hand-formatted, as an operator writes it: the mark must not reformat anything.
TRIGGERS = """{
  "triggers": [
    { "on": { "type": "label", "any": ["bug"] }, "run": { "kind": "github", "flow": "fix" } },
    {
      "on": { "type": "issue", "action": ["closed"], "number": 1, "once": true },
      "run": { "kind": "github", "flow": "triage" }
    }
  ]
}
"""


def once_job(steer: str) -> Job:
    job = issue_job(steer)
    assert job.trigger is not None
    matched = Matched(index=1, type="issue", action="closed", number=1, once=True)
    return msgspec.structs.replace(job, trigger=msgspec.structs.replace(job.trigger, matched=matched))


def started(logs: list[Any], job: Job) -> list[Any]:
    return [e for e in logs if e["event"] == "job_started" and e.get("job") == job.id]


async def test_a_once_rule_runs_one_job_then_disarms_and_refuses_the_next(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    path = tmp_path / "config" / "triggers.json"
    path.parent.mkdir()
    path.write_text(TRIGGERS)
    path.chmod(0o644)
    first, second = once_job("exit=0"), once_job("exit=0")
    with capture_logs() as logs:
        async with running_worker({**env, "PI_TRIGGERS_FILE": str(path)}, redis, keys, docker) as (s, _, _):
            await enqueue(redis, keys, first)
            assert (await record(s, first))["outcome"] == "completed"
            await wait_for(lambda: path.read_text() != TRIGGERS, 30, what="the disarm mark")
            marked = path.read_text()
            await enqueue(redis, keys, second)
            refused = await record(s, second)
    at = next(e for e in logs if e["event"] == "trigger_disarmed")
    assert at["job"] == first.id and at["index"] == 1
    head, tail = marked.split(', "disarmed": ', 1)
    assert head + tail[tail.index("}") + 1:] == TRIGGERS
    assert f'"jobId": "{first.id}"' in tail and tail.startswith('{"at": "')
    assert (path.stat().st_mode & 0o777) == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["triggers.json"]
    assert started(logs, first) and not started(logs, second)
    assert (refused["outcome"], refused["reason"]) == ("policy", "once-already-spent")
    assert refused["exitCode"] is None
    assert path.read_text() == marked  # the refused job spends nothing and writes nothing
    # Its refusal spends nothing of the rule, so it does not even try to write.
    assert not [e for e in logs if e["event"] in ("trigger_disarm_skipped", "disarm_failed")]


async def test_a_rule_narrowed_after_its_job_was_queued_refuses_it_trigger_skew(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path
) -> None:
    path = tmp_path / "triggers.json"
    narrowed = {"on": {"type": "label", "any": ["bug"]},
                "run": {"kind": "github", "flow": "triage", "models": ["anthropic/claude-sonnet-4"]}}
    path.write_text(json.dumps({"triggers": [narrowed]}))
    job = issue_job("exit=0")  # queued from triggers[0] before run.models was added
    with capture_logs() as logs:
        async with running_worker({**env, "PI_TRIGGERS_FILE": str(path)}, redis, keys, docker) as (s, _, _):
            await enqueue(redis, keys, job)
            rec = await record(s, job)
    assert (rec["outcome"], rec["reason"], rec["budgetReserved"]) == ("policy", "trigger-skew", False)
    assert not started(logs, job)
