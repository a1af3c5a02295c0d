"""``set_state``: the job's live state with its TTL, in one MULTI/EXEC; with ``held``, the replicas must
hold it too (a real redis-server with no replica: a shortfall, counted, and the state written anyway)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from pidispatch.common.health import Health
from pidispatch.common.keys import JOB_STATE_TTL_S, Keys
from pidispatch.common.redis import Redis
from pidispatch.common.replication import Replicas
from pidispatch.common.runtime import now_ms
from pidispatch.common.settings import load_settings
from pidispatch.worker.context import WorkerContext, set_state
from pidispatch.worker.metrics import WorkerMetrics


def _ctx(redis: Redis, keys: Keys, registry: CollectorRegistry) -> WorkerContext:
    return WorkerContext(
        load_settings({}), redis, keys, None, now_ms, {}, Health("down", "up"),  # type: ignore[arg-type]
        metrics=WorkerMetrics(registry), replicas=Replicas(1, 20),
    )


async def test_state_is_written_with_its_ttl(redis: Redis, keys: Keys) -> None:
    registry = CollectorRegistry()
    await set_state(_ctx(redis, keys, registry), "j1", state="starting", container="")
    assert await redis.hgetall(keys.job("j1")) == {b"state": b"starting", b"container": b""}
    assert 0 < await redis.ttl(keys.job("j1")) <= JOB_STATE_TTL_S
    assert registry.get_sample_value("pd_worker_replica_shortfall_total") == 0  # not held: no WAIT


async def test_held_state_no_replica_holds_is_written_and_counted(redis: Redis, keys: Keys) -> None:
    registry = CollectorRegistry()
    await set_state(_ctx(redis, keys, registry), "j2", held=True, state="launching")
    assert await redis.hget(keys.job("j2"), "state") == b"launching"
    assert 0 < await redis.ttl(keys.job("j2")) <= JOB_STATE_TTL_S
    assert registry.get_sample_value("pd_worker_replica_shortfall_total") == 1
