"""Configuration: one frozen Struct, read once from the environment and validated before anything starts.

A bad value raises ``ConfigError`` naming the variable and what is accepted (exit 2).
"""

from __future__ import annotations

import ipaddress
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypedDict

import msgspec

from pidispatch.common.configsyntax import (
    WORKER_NAME_RE,
    check_worker_name,
    checked_image,
    parse_base_url,
    parse_cpus,
    parse_job_user,
    parse_memory,
    parse_profiles,
    parse_program_path,
    parse_usd,
    read_int,
    read_optional_int,
    url_carries_password,
)
from pidispatch.common.cronpattern import MIN_INTERVAL_DEFAULT_S
from pidispatch.common.egresssettings import EgressSettings, load_egress_settings
from pidispatch.common.envnames import REDIS_PASSWORD_VARS, parse_forward_env
from pidispatch.common.errors import ConfigError
from pidispatch.common.healsettings import HealSettings, load_heal_settings
from pidispatch.common.keys import PREFIX_RE
from pidispatch.common.secret import Secret
from pidispatch.common.unsupported import check_environment
from pidispatch.common.waitsettings import WaitSettings, load_wait_settings

PROVIDER_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
MODEL_REF_RE = re.compile(r"^[a-z0-9][a-z0-9._:/-]{0,127}$")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    redis_url: str = "redis://127.0.0.1:6379/0"
    # VALKEY_PASSWORD / REDIS_PASSWORD, for a URL that carries none; prints as Secret(***).
    redis_password: Secret[str] | None = None
    # REDIS_SENTINELS: (host, port) of each sentinel; when set, the primary is the one they name
    # REDIS_SENTINEL_MASTER, and REDIS_URL gives only the database, user and password.
    redis_sentinels: tuple[tuple[str, int], ...] = ()
    redis_sentinel_master: str = "pi-dispatch"
    redis_sentinel_password: Secret[str] | None = None
    # PD_REPLICA_ACKS: replicas that must hold a write (WAIT) before it is acknowledged; docs/redis.md "HA".
    replica_acks: int = 0
    replica_ack_timeout_ms: int = 250
    key_prefix: str = "pd"
    log_level: str = "info"
    # Router and worker: where /healthz, /readyz and /metrics are served (common.monitor); None = nowhere.
    metrics_port: int | None = None
    # Where that endpoint listens: loopback unless an operator opens it (compose: its private network).
    metrics_bind: str = "127.0.0.1"
    events_maxlen: int = 10_000
    claim_idle_ms: int = 60_000
    max_deliveries: int = 5

    webhook_secret: str | None = None
    github_auth_source: str | None = None
    receiver_port: int = 3000
    receiver_bind: str = "0.0.0.0"
    triggers_file: str = "triggers.json"
    # The closest two occurrences of one cron trigger may come (seconds); a file breaking it is refused.
    cron_min_interval_s: int = MIN_INTERVAL_DEFAULT_S

    worker_name: str = "localhost"
    worker_name_declared: bool = False
    concurrency: int = 3
    job_image: str = "pi-job:latest"
    job_user: str = "1000:1000"
    job_memory_bytes: int = 4 * 1024**3
    job_nano_cpus: int = 2 * 10**9
    job_timeout_s: float = 1800.0
    shutdown_grace_s: float = 10.0
    logs_dir: str = "~/.pi-dispatch/logs"
    jobs_dir: str = ""

    # Host liveness: a beat every 15 s, a row that expires 90 s after the last one; a peer
    # takes over a host's pending jobs only once its row is gone. Tests shorten both.
    host_beat_ms: int = 15_000
    host_ttl_ms: int = 90_000

    # Retries of infrastructure faults (never of policy): attempts in all, first delay, doubling.
    retry_attempts: int = 2
    retry_base_ms: int = 60_000
    # Worker-lost runs of one cron schedule within 24 h past which it is torn down.
    scheduler_stall_max: int = 2
    log_retention_days: int = 30
    capture_job_logs: bool = False
    sweep_interval_hours: int = 24
    # An operator's program run after a job ends in failure (worker.hook), and how long it may take.
    on_failure: str | None = None
    on_failure_timeout_ms: int = 10_000
    # Quiet hours (worker.pausewindows): a JSON file of windows in which no job starts.
    pause_windows_file: str | None = None

    # Spend, checked before a container starts: job-count windows (None = window off) and the daily token cap.
    daily_cap: int = 25
    weekly_cap: int | None = None
    monthly_cap: int | None = None
    soft_hold_pct: int | None = None
    daily_token_cap: int | None = None
    # Per-repository and per-folder limits (worker.scopedlimits): a JSON file, validated by the worker.
    scoped_limits_file: str | None = None
    # Per-job dollar cap (PI_MAX_COST_USD) in micro-dollars; a trigger's run.maxCostUsd may only lower it.
    max_cost_micros: int | None = None

    # What the agent runs with (passed to the container as PI_PROVIDER, PI_MODEL, PI_MAX_TURNS).
    provider: str = "anthropic"
    model: str | None = None
    max_turns: int = 30
    max_tokens: int | None = None
    allowed_models: tuple[str, ...] = ()
    forward_env: tuple[str, ...] = ()

    # Secret profiles: (name, absolute resolver path) in declaration order.
    secret_profiles: tuple[tuple[str, str], ...] = ()
    secret_resolve_timeout_s: float = 10.0
    # Where the job's provider is reached instead of its default endpoint (a local model, a proxy).
    model_base_url: str | None = None

    wait: WaitSettings = WaitSettings()
    egress: EgressSettings = EgressSettings()
    # The router's healing from GitHub's delivery log (PD_HEAL_*; router.heal).
    heal: HealSettings = HealSettings()


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    return read_int(env, name, default, lo, hi)


def _optional_int(env: Mapping[str, str], name: str, lo: int, hi: int) -> int | None:
    return read_optional_int(env, name, lo, hi)


def default_jobs_dir() -> str:
    return str(Path(tempfile.gettempdir()) / f"pi-dispatch-{os.getuid()}" / "jobs")


# Each part below reads one group of variables and validates it; load_settings composes them. A part is a
# TypedDict so mypy checks every key and type against the Settings field it fills.


class _StorePart(TypedDict):
    redis_url: str
    redis_password: Secret[str] | None
    redis_sentinels: tuple[tuple[str, int], ...]
    redis_sentinel_master: str
    redis_sentinel_password: Secret[str] | None
    replica_acks: int
    replica_ack_timeout_ms: int
    key_prefix: str
    events_maxlen: int
    claim_idle_ms: int
    max_deliveries: int


class _ReceiverPart(TypedDict):
    webhook_secret: str | None
    github_auth_source: str | None
    receiver_port: int
    receiver_bind: str
    triggers_file: str
    cron_min_interval_s: int


class _HostPart(TypedDict):
    worker_name: str
    worker_name_declared: bool
    concurrency: int
    host_beat_ms: int
    host_ttl_ms: int


class _ContainerPart(TypedDict):
    job_image: str
    job_user: str
    job_memory_bytes: int
    job_nano_cpus: int
    job_timeout_s: float
    shutdown_grace_s: float


class _UpkeepPart(TypedDict):
    logs_dir: str
    jobs_dir: str
    retry_attempts: int
    retry_base_ms: int
    scheduler_stall_max: int
    log_retention_days: int
    capture_job_logs: bool
    sweep_interval_hours: int
    on_failure: str | None
    on_failure_timeout_ms: int
    pause_windows_file: str | None


class _SpendPart(TypedDict):
    daily_cap: int
    weekly_cap: int | None
    monthly_cap: int | None
    soft_hold_pct: int | None
    daily_token_cap: int | None
    scoped_limits_file: str | None
    max_cost_micros: int | None


class _AgentPart(TypedDict):
    provider: str
    model: str | None
    max_turns: int
    max_tokens: int | None
    allowed_models: tuple[str, ...]
    forward_env: tuple[str, ...]
    secret_profiles: tuple[tuple[str, str], ...]
    secret_resolve_timeout_s: float
    model_base_url: str | None


def _store_part(env: Mapping[str, str]) -> _StorePart:
    """Where the state lives: the Redis URL, the key prefix, and the bounds of the streams in it."""
    prefix = _get(env, "PD_KEY_PREFIX") or "pd"
    if not PREFIX_RE.match(prefix):
        raise ConfigError(f"PD_KEY_PREFIX={prefix!r} is refused; accepted: 1-32 of [A-Za-z0-9._-]")
    redis_url = _get(env, "REDIS_URL") or _get(env, "VALKEY_URL") or "redis://127.0.0.1:6379/0"
    if not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("REDIS_URL must start with redis://, rediss:// or unix://")
    sentinels = _sentinels(env)
    if sentinels and redis_url.startswith("unix://"):
        # The sentinels name the primary by host and port: a socket path could never be it.
        raise ConfigError("REDIS_URL is a unix:// socket and REDIS_SENTINELS is set; accepted with "
                          "sentinels: redis:// or rediss:// (its database, user and password are used)")
    return _StorePart(
        redis_url=redis_url,
        redis_password=_redis_password(env, redis_url),
        redis_sentinels=sentinels,
        redis_sentinel_master=_sentinel_master(env),
        redis_sentinel_password=_secret(env, "REDIS_SENTINEL_PASSWORD"),
        # With sentinels a failover is expected, so by default one replica holds a write before it counts.
        replica_acks=_int(env, "PD_REPLICA_ACKS", 1 if sentinels else 0, 0, 16),
        replica_ack_timeout_ms=_int(env, "PD_REPLICA_ACK_TIMEOUT_MS", 250, 10, 10_000),
        key_prefix=prefix,
        events_maxlen=_int(env, "PD_EVENTS_MAXLEN", 10_000, 100, 10_000_000),
        claim_idle_ms=_int(env, "PD_CLAIM_IDLE_MS", 60_000, 100, 24 * 3600 * 1000),
        max_deliveries=_int(env, "PD_MAX_DELIVERIES", 5, 1, 100),
    )


_SENTINEL_MASTER_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def _sentinels(env: Mapping[str, str]) -> tuple[tuple[str, int], ...]:
    """``REDIS_SENTINELS=host:port[,host:port…]``: each sentinel once; a bracketed IPv6 host is accepted."""
    raw = _get(env, "REDIS_SENTINELS")
    if not raw:
        return ()
    found: list[tuple[str, int]] = []
    for item in (part.strip() for part in raw.split(",")):
        host, _, port = item.rpartition(":")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c in host for c in "/@ "):
            raise ConfigError(
                f"REDIS_SENTINELS entry {item!r} is refused; accepted: host:port[,host:port...]"
            )
        if (host, int(port)) not in found:
            found.append((host, int(port)))
    return tuple(found)


def _sentinel_master(env: Mapping[str, str]) -> str:
    name = _get(env, "REDIS_SENTINEL_MASTER") or "pi-dispatch"
    if not _SENTINEL_MASTER_RE.match(name):
        raise ConfigError(
            f"REDIS_SENTINEL_MASTER={name!r} is refused; accepted: 1-64 of [A-Za-z0-9._-] (sentinel.conf's)"
        )
    return name


def _secret(env: Mapping[str, str], name: str) -> Secret[str] | None:
    value = env.get(name)
    return Secret(value) if value is not None and value.strip() else None


def _redis_password(env: Mapping[str, str], redis_url: str) -> Secret[str] | None:
    """The first of ``VALKEY_PASSWORD``, ``REDIS_PASSWORD`` that is not blank, taken as written (a password
    may hold spaces). Beside a URL that carries a password too it is refused: neither would be sure to win."""
    for name in REDIS_PASSWORD_VARS:
        secret = _secret(env, name)
        if secret is None:
            continue
        if url_carries_password(redis_url):
            url_var = "REDIS_URL" if _get(env, "REDIS_URL") else "VALKEY_URL"
            raise ConfigError(
                f"{url_var} carries a password and {name} is set too; accepted: the password in one of them"
            )
        return secret
    return None


def _log_level(env: Mapping[str, str]) -> str:
    log_level = (_get(env, "PD_LOG_LEVEL") or "info").lower()
    if log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"PD_LOG_LEVEL={log_level!r} is refused; accepted: debug, info, warning, error")
    return log_level


def _receiver_part(env: Mapping[str, str]) -> _ReceiverPart:
    auth_source = _get(env, "GITHUB_AUTH_SOURCE")
    if auth_source is not None and auth_source not in ("gh", "pat", "app"):
        raise ConfigError(f"GITHUB_AUTH_SOURCE={auth_source!r} is refused; accepted: gh, pat, app")
    return _ReceiverPart(
        webhook_secret=_get(env, "WEBHOOK_SECRET"),
        github_auth_source=auth_source,
        receiver_port=_int(env, "RECEIVER_PORT", 3000, 1, 65535),
        receiver_bind=_get(env, "RECEIVER_BIND") or "0.0.0.0",
        triggers_file=_get(env, "PI_TRIGGERS_FILE") or "triggers.json",
        cron_min_interval_s=cron_min_interval(env),
    )


def _metrics_bind(env: Mapping[str, str]) -> str:
    """``PD_METRICS_BIND``: one IP address to listen on (default 127.0.0.1)."""
    raw = _get(env, "PD_METRICS_BIND")
    if raw is None:
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        raise ConfigError(f"PD_METRICS_BIND={raw!r} is refused; accepted: an IP address such as 127.0.0.1 "
                          "(loopback, the default) or 0.0.0.0 (every interface)") from None


def cron_min_interval(env: Mapping[str, str]) -> int:
    """``PI_CRON_MIN_INTERVAL_S``: whole seconds, 1 to a day (default 60)."""
    return _int(env, "PI_CRON_MIN_INTERVAL_S", MIN_INTERVAL_DEFAULT_S, 1, 86_400)


def _host_part(env: Mapping[str, str]) -> _HostPart:
    """This worker host: its name, its slots, and the beat that keeps its liveness row."""
    declared = _get(env, "PI_WORKER_NAME")
    if declared is not None:
        check_worker_name(declared)
    beat_ms = _int(env, "PD_HOST_BEAT_MS", 15_000, 50, 600_000)
    ttl_ms = _int(env, "PD_HOST_TTL_MS", 90_000, 200, 3_600_000)
    if ttl_ms < 3 * beat_ms:
        raise ConfigError(
            f"PD_HOST_TTL_MS={ttl_ms} is too short for PD_HOST_BEAT_MS={beat_ms}; accepted: at least 3 beats"
        )
    return _HostPart(
        worker_name=declared or _default_host_name(),
        worker_name_declared=declared is not None,
        concurrency=_int(env, "PI_CONCURRENCY", 3, 1, 256),
        host_beat_ms=beat_ms,
        host_ttl_ms=ttl_ms,
    )


def _container_part(env: Mapping[str, str]) -> _ContainerPart:
    """One job's container: image, user, resource limits, and how long it may run and take to stop."""
    timeout = _int(env, "PI_JOB_TIMEOUT", 1800, 1, 24 * 3600)
    grace = _int(env, "PI_SHUTDOWN_GRACE", 10, 0, 3600)
    memory = _get(env, "PI_JOB_MEMORY")
    cpus = _get(env, "PI_JOB_CPUS")
    return _ContainerPart(
        job_image=checked_image(_get(env, "PI_JOB_IMAGE") or "pi-job:latest"),
        job_user=parse_job_user(_get(env, "PI_JOB_USER") or "1000:1000"),
        job_memory_bytes=parse_memory("PI_JOB_MEMORY", memory) if memory else 4 * 1024**3,
        job_nano_cpus=parse_cpus("PI_JOB_CPUS", cpus) if cpus else 2 * 10**9,
        job_timeout_s=float(timeout),
        shutdown_grace_s=float(grace),
    )


def _upkeep_part(env: Mapping[str, str]) -> _UpkeepPart:
    """What the worker keeps and sweeps on disk, and how it retries infrastructure faults."""
    return _UpkeepPart(
        logs_dir=os.path.expanduser(_get(env, "PI_LOGS_DIR") or "~/.pi-dispatch/logs"),
        jobs_dir=os.path.expanduser(_get(env, "PI_JOBS_DIR") or default_jobs_dir()),
        retry_attempts=_int(env, "PI_RETRY_ATTEMPTS", 2, 1, 10),
        retry_base_ms=_int(env, "PI_RETRY_BASE_MS", 60_000, 10, 3_600_000),
        scheduler_stall_max=_int(env, "PI_SCHEDULER_STALL_MAX", 2, 0, 1000),
        log_retention_days=_int(env, "PI_LOG_RETENTION_DAYS", 30, 0, 3650),
        capture_job_logs=_int(env, "PI_CAPTURE_JOB_LOGS", 0, 0, 1) == 1,
        sweep_interval_hours=_int(env, "PI_SWEEP_INTERVAL_HOURS", 24, 0, 168),
        on_failure=parse_program_path("PI_ON_FAILURE", _get(env, "PI_ON_FAILURE")),
        on_failure_timeout_ms=_int(env, "PI_ON_FAILURE_TIMEOUT_MS", 10_000, 100, 600_000),
        pause_windows_file=os.path.expanduser(w) if (w := _get(env, "PI_PAUSE_WINDOWS_FILE")) else None,
    )


def _spend_part(env: Mapping[str, str]) -> _SpendPart:
    max_cost = _get(env, "PI_MAX_COST_USD")
    return _SpendPart(
        daily_cap=_int(env, "PI_DAILY_CAP", 25, 0, 1_000_000),
        weekly_cap=_optional_int(env, "PI_WEEKLY_CAP", 0, 10_000_000),
        monthly_cap=_optional_int(env, "PI_MONTHLY_CAP", 0, 100_000_000),
        soft_hold_pct=_optional_int(env, "PI_SOFT_HOLD_PCT", 1, 99),
        daily_token_cap=_optional_int(env, "PI_DAILY_TOKEN_CAP", 0, 10**15),
        scoped_limits_file=os.path.expanduser(f) if (f := _get(env, "PI_SCOPED_LIMITS_FILE")) else None,
        max_cost_micros=None if max_cost is None else parse_usd("PI_MAX_COST_USD", max_cost),
    )


def _agent_part(env: Mapping[str, str]) -> _AgentPart:
    """What the agent runs with: provider, model and budget, the variables and secrets it is given."""
    provider = (_get(env, "PI_PROVIDER") or "anthropic").lower()
    if not PROVIDER_RE.match(provider):
        raise ConfigError(f"PI_PROVIDER={provider!r} is refused; accepted: a provider id such as anthropic")
    allowed = tuple(m.strip().lower() for m in (_get(env, "PI_ALLOWED_MODELS") or "").split(",") if m.strip())
    for ref in allowed:
        if "/" not in ref or not MODEL_REF_RE.match(ref):
            raise ConfigError(f"PI_ALLOWED_MODELS entry {ref!r} is refused; accepted: provider/model, commas")
    resolve_ms = _int(env, "PI_SECRET_RESOLVE_TIMEOUT_MS", 10_000, 100, 600_000)
    return _AgentPart(
        provider=provider,
        model=_get(env, "PI_MODEL"),
        max_turns=_int(env, "PI_MAX_TURNS", 30, 1, 10_000),
        max_tokens=_optional_int(env, "PI_MAX_TOKENS", 1, 10**12),
        allowed_models=allowed,
        forward_env=parse_forward_env(_get(env, "PI_FORWARD_ENV"), env),
        secret_profiles=parse_profiles("PI_SECRET_PROFILES", _get(env, "PI_SECRET_PROFILES")),
        secret_resolve_timeout_s=resolve_ms / 1000,
        model_base_url=parse_base_url("PI_MODEL_BASE_URL", _get(env, "PI_MODEL_BASE_URL")),
    )


# Each group of variables and its reader, in field order: with several bad variables the first group's
# error is the one raised.
_READERS: dict[str, Callable[[Mapping[str, str]], Mapping[str, object]]] = {
    "store": _store_part,
    "log": lambda e: {"log_level": _log_level(e)},
    "metrics": lambda e: {"metrics_port": _optional_int(e, "PD_METRICS_PORT", 1, 65535),
                          "metrics_bind": _metrics_bind(e)},
    "receiver": _receiver_part, "host": _host_part, "container": _container_part,
    "upkeep": _upkeep_part, "spend": _spend_part, "agent": _agent_part,
    "wait": lambda e: {"wait": load_wait_settings(e)},
    "egress": lambda e: {"egress": load_egress_settings(e)},
    "heal": lambda e: {"heal": load_heal_settings(e)},
}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    check_environment(env)  # a variable this project does not implement stops it before any other
    fields: dict[str, object] = {}
    for read in _READERS.values():
        fields.update(read(env))
    return Settings(**fields)  # type: ignore[arg-type]


def _default_host_name() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "", os.uname().nodename.lower())[:64]
    return name if WORKER_NAME_RE.match(name) else "localhost"


def load_settings_by_part(env: Mapping[str, str]) -> tuple[Settings, dict[str, str]]:
    """``load_settings`` for ``pi-dispatch doctor``: each group of variables read on its own, so one bad
    variable does not hide the rest. A refused group keeps its defaults; returned with its ConfigError
    text, by group (``environment``, ``store``, ``receiver``, ``host``, ``container``, ``spend``, ...)."""
    errors: dict[str, str] = {}
    fields: dict[str, object] = {}
    try:
        check_environment(env)
    except ConfigError as exc:
        errors["environment"] = str(exc)
    for group, read in _READERS.items():
        try:
            fields.update(read(env))
        except ConfigError as exc:
            errors[group] = str(exc)
    return Settings(**fields), errors  # type: ignore[arg-type]
