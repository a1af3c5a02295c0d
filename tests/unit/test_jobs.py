from __future__ import annotations

import msgspec
import pytest

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger, encode_job
from pidispatch.router.jobs import JobIdError, build_job, fan_out, job_id, planned, semantic_key
from pidispatch.router.triggers import RunSpec

D = "0f1e2d3c-aaaa-bbbb-cccc-000000000001"


def job(
    *, kind: str = "github", repo: str = "octo/repo", target_type: str = "issue", number: int = 7,
    flow: str | None = "fix", command: str | None = None, matched: Matched | None = None,
    replicas: int | None = None,
) -> Job:
    return Job(
        id=job_id(kind, D), kind=kind, repo=repo, target=Target(type=target_type, number=number),
        flow=flow, command=command, replicas=replicas,
        trigger=Trigger(event="issues", action="labeled", delivery_id=D, sender=Sender(id=1),
                        matched=matched or Matched(index=0, type="label", label="x")),
    )


@pytest.mark.parametrize(("kind", "prefix"), [("github", "gh-"), ("gitlab", "gl-"), ("forgejo", "fj-"),
                                              ("azure", "az-")])
def test_job_id_is_the_forge_prefix_and_the_delivery(kind: str, prefix: str) -> None:
    assert job_id(kind, D) == prefix + D


@pytest.mark.parametrize(("kind", "delivery"), [("github", ""), ("local", D), ("bitbucket", D)])
def test_job_id_refuses_rather_than_invents(kind: str, delivery: str) -> None:
    with pytest.raises(JobIdError):
        job_id(kind, delivery)


@pytest.mark.parametrize(
    ("j", "key"),
    [
        (job(), "octo/repo#7:fix"),
        (job(flow=None, command="check", number=12), "octo/repo#12:cmd:check"),
        (job(number=40, flow="deploy", matched=Matched(index=3, type="issue", action="closed", number=40,
                                                       once=True)), "octo/repo#40:closed:deploy"),
        (job(target_type="pull_request", number=9, flow="deploy",
             matched=Matched(index=1, type="pull_request", action="closed")), "octo/repo#9:closed:deploy"),
        (job(target_type="pull_request", number=9, matched=Matched(index=1, type="pull_request",
                                                                   action="opened")), "octo/repo#9:fix"),
        (job(kind="gitlab", repo="group/sub/proj", target_type="pull_request", number=5, flow="review"),
         "group/sub/proj!5:review"),
        (job(kind="gitlab", repo="group/sub/proj", number=5, flow="frontend-fix"),
         "group/sub/proj#5:frontend-fix"),
        (msgspec.structs.replace(job(kind="azure", repo="Fabrikam/widgets"), replica=2),
         "Fabrikam/widgets#7:fix:r2"),
    ],
)
def test_semantic_key(j: Job, key: str) -> None:
    assert semantic_key(j) == key


def test_replicas_fan_out_to_suffixed_ids_and_distinct_dedup_keys() -> None:
    """Spec §7 case 35."""
    pairs = planned(job(replicas=2), enqueued_at=1_700_000_000_000)
    assert [j.id for j, _ in pairs] == [f"gh-{D}-r1", f"gh-{D}-r2"]
    assert [(j.replica, j.replicas) for j, _ in pairs] == [(1, 2), (2, 2)]
    assert [k for _, k in pairs] == ["octo/repo#7:fix:r1", "octo/repo#7:fix:r2"]
    assert all(j.enqueued_at == 1_700_000_000_000 for j, _ in pairs)


def test_an_unflagged_job_is_not_touched_by_fan_out() -> None:
    j = job()
    [only] = fan_out(j)
    assert encode_job(only) == encode_job(j)
    decoded = msgspec.json.decode(encode_job(only))
    assert "replica" not in decoded and "replicas" not in decoded and decoded["id"] == f"gh-{D}"


def test_build_job_copies_an_allow_list_of_run_fields() -> None:
    run = RunSpec(flow="fix", packages=False, image="img:1", skills_dir="/s", instructions="be brief",
                  resume=False, secrets={"K": "ref"}, secrets_profile="prod", replicas=3,
                  repository="widgets")
    trigger = Trigger(event="issues", action="labeled", delivery_id=D, sender=Sender(id=1))
    j = build_job(kind="github", delivery=D, repo="octo/repo", target=Target(type="issue", number=1),
                  trigger=trigger, run=run)
    decoded = msgspec.json.decode(encode_job(j))
    assert decoded == {
        "id": f"gh-{D}", "kind": "github", "repo": "octo/repo", "target": {"type": "issue", "number": 1},
        "flow": "fix",
        "trigger": {"event": "issues", "action": "labeled", "deliveryId": D, "sender": {"id": 1}},
        "packages": False, "image": "img:1", "skillsDir": "/s", "instructions": "be brief", "resume": False,
        "secrets": {"K": "ref"}, "secretsProfile": "prod", "replicas": 3,
    }
    # The rule's secrets mapping is not shared with the job.
    assert j.secrets is not run.secrets
