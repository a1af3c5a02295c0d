from __future__ import annotations

import msgspec
import pytest

from pidispatch.common.models import Job, Matched, Sender, Target, Trigger, encode_job
from pidispatch.triggers.jobs import JobIdError, build_job, fan_out, job_id, planned, semantic_key
from pidispatch.triggers.rules import RunSpec

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
    """Each replica gets its own suffixed id and dedup key; all share one enqueue time."""
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


def test_build_job_copies_an_allow_list_of_run_fields_and_leaves_unset_ones_absent() -> None:
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


def test_build_job_carries_every_execution_field_of_the_run_rule() -> None:
    run = RunSpec(flow="fix", backend="local", exclude_tools=("bash",), provider="openai", model="gpt-x",
                  max_turns=10, models=("openai/gpt-x",), max_cost_usd="0.50",
                  wait_for=({"after": "2026-09-01T09:00:00Z"}, {"profile": "jira"}))
    trigger = Trigger(event="issue", action="open", delivery_id=D, sender=Sender(id=1))
    j = build_job(kind="gitlab", delivery=D, repo="g/s/p", target=Target(type="issue", number=5),
                  trigger=trigger, run=run, project_id=42)
    decoded = msgspec.json.decode(encode_job(j))
    assert {k: decoded[k] for k in ("id", "projectId", "backend", "excludeTools", "provider", "model",
                                    "maxTurns", "models", "maxCostUsd", "waitFor")} == {
        "id": f"gl-{D}", "projectId": 42, "backend": "local", "excludeTools": ["bash"], "provider": "openai",
        "model": "gpt-x", "maxTurns": 10, "models": ["openai/gpt-x"], "maxCostUsd": "0.50",
        "waitFor": [{"after": "2026-09-01T09:00:00Z"}, {"profile": "jira"}],
    }
    assert "azure" not in decoded and "secrets" not in decoded


def test_a_resolved_flow_replaces_the_default_and_a_command_rule_has_no_flow() -> None:
    trigger = Trigger(event="issue_comment", action="created", delivery_id=D, sender=Sender(id=1))
    target = Target(type="issue", number=1)
    j = build_job(kind="github", delivery=D, repo="o/r", target=target, trigger=trigger,
                  run=RunSpec(flow="triage"), flow="frontend-fix")
    assert j.flow == "frontend-fix"
    cmd = build_job(kind="github", delivery=D, repo="o/r", target=target, trigger=trigger,
                    run=RunSpec(command="standup"), flow="ignored")
    assert (cmd.flow, cmd.command) == (None, "standup")
    assert "flow" not in msgspec.json.decode(encode_job(cmd))


def test_an_azure_job_carries_its_scope_triple() -> None:
    trigger = Trigger(event="workitem.updated", action="updated", delivery_id=D, sender=Sender(id="azid-0"))
    azure = {"project": "Fabrikam", "repository": "widgets"}
    j = build_job(kind="azure", delivery=D, repo="Fabrikam/widgets", target=Target(type="issue", number=7),
                  trigger=trigger, run=RunSpec(flow="fix"), azure=azure)
    assert msgspec.json.decode(encode_job(j))["azure"] == azure
    assert j.id == f"az-{D}" and semantic_key(j) == "Fabrikam/widgets#7:fix"


@pytest.mark.parametrize(("kind", "sep"),
                         [("github", "#"), ("forgejo", "#"), ("gitlab", "!"), ("azure", "!")])
def test_pull_request_keys_use_the_forge_separator_and_issues_always_hash(kind: str, sep: str) -> None:
    assert semantic_key(job(kind=kind, target_type="pull_request", number=3)) == f"octo/repo{sep}3:fix"
    assert semantic_key(job(kind=kind, target_type="issue", number=3)) == "octo/repo#3:fix"


def test_two_deliveries_about_one_item_and_flow_share_a_semantic_key() -> None:
    """A second delivery in the dedup window finds the first one's key."""
    first = job()
    second = msgspec.structs.replace(job(), id=job_id("github", "another-delivery"))
    assert first.id != second.id and semantic_key(first) == semantic_key(second)


@pytest.mark.parametrize(("kind", "prefix"), [("gitlab", "gl-"), ("forgejo", "fj-"), ("azure", "az-")])
def test_every_forge_fans_out_replicas_the_same_way(kind: str, prefix: str) -> None:
    ids = [j.id for j in fan_out(job(kind=kind, replicas=3))]
    assert ids == [f"{prefix}{D}-r1", f"{prefix}{D}-r2", f"{prefix}{D}-r3"]


def test_a_fan_out_that_failed_part_way_converges_on_exactly_n_jobs() -> None:
    """Replica 2 of 3 fails; the redelivery re-plans the same ids and keys, so the exact-id layer absorbs
    replica 1 and only 2 and 3 are created: three jobs, never four."""
    store: dict[str, str] = {}

    def enqueue(pairs: list[tuple[Job, str]], fail_at: int | None = None) -> list[str]:
        created = []
        for j, key in pairs:
            if j.replica == fail_at:
                raise ConnectionError("redis went away")
            if j.id not in store:  # the ENQUEUE script's exact-id check
                store[j.id] = key
                created.append(j.id)
        return created

    with pytest.raises(ConnectionError):
        enqueue(planned(job(replicas=3), enqueued_at=1), fail_at=2)
    assert list(store) == [f"gh-{D}-r1"]
    assert enqueue(planned(job(replicas=3), enqueued_at=2)) == [f"gh-{D}-r2", f"gh-{D}-r3"]
    assert sorted(store) == [f"gh-{D}-r1", f"gh-{D}-r2", f"gh-{D}-r3"]
    assert sorted(store.values()) == ["octo/repo#7:fix:r1", "octo/repo#7:fix:r2", "octo/repo#7:fix:r3"]
