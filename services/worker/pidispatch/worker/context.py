"""What every job of one worker shares (its resources, passed in once) and what the worker holds per job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import aiodocker
import aiohttp
from redis.exceptions import RedisError

from pidispatch.common.health import Health
from pidispatch.common.keys import JOB_STATE_TTL_S, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Fields
from pidispatch.common.redis import Redis
from pidispatch.common.replication import Replicas, ReplicaShortfall
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.settings import Settings
from pidispatch.forges.api import MakeClient
from pidispatch.forges.config import ForgeConfig, load_forge_config
from pidispatch.worker.egress.proxy import EgressProxy
from pidispatch.worker.engine.runner import Abort
from pidispatch.worker.history.mirror import Mirror
from pidispatch.worker.hook import FailureHook
from pidispatch.worker.limits.pausewindows import PauseWindow
from pidispatch.worker.limits.scoped import ScopedLimit
from pidispatch.worker.metrics import WorkerMetrics
from pidispatch.worker.waits.gate import WaitGate


@dataclass
class WorkerContext:
    settings: Settings
    redis: Redis
    keys: Keys
    docker: aiodocker.Docker
    clock: EpochMsClock
    env: Mapping[str, str]  # the worker's environment: provider keys, PI_FORWARD_ENV values, resolvers
    redis_health: Health
    busy_folders: set[str] = field(default_factory=set)
    # This host's capability tokens (``s:<secret profile>``, ``w:<wait profile>``), in its liveness row.
    caps: frozenset[str] = frozenset()
    # The fleet's run history: only hosts with a declared name mirror their records.
    mirror: Mirror | None = None
    # Forge access for forge jobs (tokens, tips, protection, comments); None in a worker without HTTP.
    forges: ForgeConfig = field(default_factory=lambda: load_forge_config({}))
    http: aiohttp.ClientSession | None = None
    # Each forge's client maker, by forge name: built once with ``http`` (a forge's token source lives here).
    forge_clients: Mapping[str, MakeClient] = field(default_factory=dict)
    # The operator's failure hook (PI_ON_FAILURE); None when not configured.
    hook: FailureHook | None = None
    # Quiet hours (PI_PAUSE_WINDOWS_FILE), swapped whole by the file's watcher.
    pause_windows: tuple[PauseWindow, ...] = ()
    # Scoped limits (PI_SCOPED_LIMITS_FILE), swapped whole by the file's watcher.
    scoped_limits: tuple[ScopedLimit, ...] = ()
    # The wait-for gate (run.waitFor); None only in a context built without one (tests of other parts).
    wait_gate: WaitGate | None = None
    # The series /metrics serves (PD_METRICS_PORT); kept in memory even when nothing serves them.
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    # The egress proxy each job's network joins (PI_EGRESS); None when egress is off.
    egress: EgressProxy | None = None
    # This deployment's id (common.instance), read at start: every container and network carries it.
    instance: str = ""
    # PD_REPLICA_ACKS: the replicas that must hold a job's launching mark before its container starts.
    replicas: Replicas = field(default_factory=Replicas)

    @property
    def host(self) -> str:
        return self.settings.worker_name


@dataclass
class Held:
    """One stream entry this worker holds. ``origin``: new (read now), own (this host's pending entry
    from before a restart or a hold), peer (taken over from a dead host)."""

    stream: str
    entry_id: str
    fields: Fields
    origin: str
    abort: Abort = field(default_factory=Abort)
    job_id: str | None = None


# For state no failover may lose less than the replicas' copy of: written, not waited for.
_UNHELD = Replicas()


async def set_state(ctx: WorkerContext, job_id: str, *, held: bool = False, **fields: str) -> None:
    """Live state in ``pd:job:<id>``: best effort, a Redis outage must not fail a paid run.

    ``held``: the replicas (``PD_REPLICA_ACKS``) hold it before this returns, for ``state=launching`` just
    before a container starts: a failover that lost it (and this worker's hold on the entry with it) would
    let the job be read and run again. Past ``PD_REPLICA_ACK_TIMEOUT_MS`` the start goes ahead with a
    warning (the primary holds it; with no replica up to date there is nothing a failover could promote).
    """
    key = ctx.keys.job(job_id)
    pairs = [part for field_value in fields.items() for part in field_value]
    try:
        # MULTI/EXEC by hand: the WAIT after them must go down the same connection.
        await (ctx.replicas if held else _UNHELD).written(
            ctx.redis, ("MULTI",), ("HSET", key, *pairs), ("EXPIRE", key, JOB_STATE_TTL_S), ("EXEC",)
        )
        ctx.redis_health.ok()
    except ReplicaShortfall as short:
        ctx.redis_health.ok()
        ctx.metrics.replica_shortfall()
        get_logger().warning("replica_ack_short", job=job_id, held=short.held, wanted=short.wanted)
    except RedisError as exc:
        ctx.redis_health.failed(reason=type(exc).__name__)
