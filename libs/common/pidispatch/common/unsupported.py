"""Environment variables pi-dispatch does not implement: refused at start unless explicitly allowed.

A variable an operator sets is either read or refused, never silently ignored: a setting carried over
from another deployment of the same harness would otherwise look configured and do nothing. Listing a
name in ``PD_ALLOW_UNSUPPORTED`` starts anyway, with one warning; a name there that this table lacks is
itself refused, so a typo cannot allow nothing. ``load_settings`` calls ``check_environment`` first, so
every service and command that reads its settings gets the check.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

import msgspec

from pidispatch.common.envnames import FORGE_SETTINGS_VARS, FORGE_TOKEN_VARS, PROVIDER_KEY_VARS
from pidispatch.common.errors import ConfigError

ALLOW_VARIABLE = "PD_ALLOW_UNSUPPORTED"

_SANDBOX = "unset it: every job runs in a throw-away folder under PI_JOBS_DIR"
_SESSIONS = "unset it: no agent session is kept between jobs (run.resume true is refused too)"
_AUTH_SOURCE = "unset it: the forge's token variable is read as a personal access token"
_HOST_BUDGET = "size PI_CONCURRENCY, PI_JOB_MEMORY and PI_JOB_CPUS to the host instead"
_PROVIDER_KEYS = "unset it: provider keys come only from their own variables (ANTHROPIC_API_KEY, ...)"
_PROJECTS = "give each repository or folder its own row in PI_SCOPED_LIMITS_FILE instead"
_BACKEND = "unset it: every job runs on this host's Docker daemon"
_EGRESS = "unset it: each worker runs its own egress proxy (PI_EGRESS, PI_EGRESS_ALLOWLIST)"
_CHAIN = "unset it: a job never starts another job"

# Each variable this project does not read, and what to do instead (one short phrase).
UNSUPPORTED: dict[str, str] = {
    "PI_AUTH_FROM_PI": _PROVIDER_KEYS,
    "PI_CODING_AGENT_DIR": _PROVIDER_KEYS,
    "PI_DAILY_COST_USD": "use PI_DAILY_CAP (jobs) or PI_DAILY_TOKEN_CAP (tokens) instead",
    "PI_WEEKLY_COST_USD": "use PI_WEEKLY_CAP (jobs) instead",
    "PI_MONTHLY_COST_USD": "use PI_MONTHLY_CAP (jobs) instead",
    "PI_SANDBOX_DIR": _SANDBOX,
    "PI_SANDBOX_RETENTION_HOURS": _SANDBOX,
    "PI_SANDBOX_PIN_DAYS": _SANDBOX,
    "PI_SANDBOX_IDLE_MINUTES": _SANDBOX,
    "PI_SESSIONS_DIR": _SESSIONS,
    "PI_SESSIONS_TTL_DAYS": _SESSIONS,
    "PI_SESSION_MAX_BYTES": _SESSIONS,
    "PI_SESSION_MAX_AGE_DAYS": _SESSIONS,
    "PI_SESSION_MAX_RESUME_CHAIN": _SESSIONS,
    "PI_SESSION_MAX_CONTEXT_PCT": _SESSIONS,
    "PI_SESSIONS_ALLOW_GH_SOURCE": _SESSIONS,
    "PI_PROJECTS_FILE": _PROJECTS,
    "PI_SETTINGS_FILE": "set each setting as its own environment variable instead",
    "PI_GLOBAL_PI_DIR": "build shared agent files into PI_JOB_IMAGE instead",
    "PI_GLOBAL_ALLOW_EXTENSIONS": "build extensions into PI_JOB_IMAGE instead",
    "PI_SECRET_RESOLVER_ROOTS": "give each resolver's absolute path in PI_SECRET_PROFILES instead",
    "PI_BACKENDS": _BACKEND,
    "PI_BACKEND_FLOOR": _BACKEND,
    "PI_EGRESS_PROXY": _EGRESS,
    "PI_MODEL_ENDPOINTS_FILE": "unset it: each provider is reached at its default endpoint",
    "PI_CHAIN_DEPTH_MAX": _CHAIN,
    "PI_CHAIN_MAX_PER_JOB": _CHAIN,
    "PI_HOST_MEMORY_BUDGET": _HOST_BUDGET,
    "PI_HOST_CPU_BUDGET": _HOST_BUDGET,
    "PI_HOST_RESERVE_MEMORY": _HOST_BUDGET,
    "PI_HOST_RESERVE_CPUS": _HOST_BUDGET,
    "GITLAB_AUTH_SOURCE": _AUTH_SOURCE,
    "FORGEJO_AUTH_SOURCE": _AUTH_SOURCE,
    "AZURE_AUTH_SOURCE": _AUTH_SOURCE,
    "RECEIVER_IDENTITY_RETRY_SECONDS": "use PD_IDENTITY_RETRY_SECONDS instead",
}

# Every variable a process of this project reads (the documentation's table of honoured variables), so
# an allow-list naming one is told it is implemented rather than unknown.
HONOURED: tuple[str, ...] = (
    "REDIS_URL", "VALKEY_URL", "REDIS_PASSWORD", "VALKEY_PASSWORD", "PD_KEY_PREFIX", "PD_LOG_LEVEL",
    "REDIS_SENTINELS", "REDIS_SENTINEL_MASTER", "REDIS_SENTINEL_PASSWORD", "PD_REPLICA_ACKS",
    "PD_REPLICA_ACK_TIMEOUT_MS",
    "PD_METRICS_PORT", "PD_METRICS_BIND", "PD_WEB_USER", "PD_WEB_PASSWORD",
    ALLOW_VARIABLE, "PD_EVENTS_MAXLEN", "PD_CLAIM_IDLE_MS", "PD_MAX_DELIVERIES", "PD_FAULT_INJECT",
    "PD_HALT_ON_CONFIG_ERROR",
    "RECEIVER_PORT", "RECEIVER_BIND", "PD_SPOOL_DIR", "PD_SPOOL_MAX_BYTES",
    "PI_TRIGGERS_FILE", "PI_CRON_MIN_INTERVAL_S", "PI_SCHEDULER_STALL_MAX", "PD_ROUTER_NAME",
    "PD_IDENTITY_RETRY_SECONDS", "PD_HEAL_INTERVAL_S", "PD_HEAL_WINDOW_H",
    *FORGE_SETTINGS_VARS,
    "PI_WORKER_NAME", "PI_CONCURRENCY", "PD_HOST_BEAT_MS", "PD_HOST_TTL_MS", "PI_JOB_IMAGE", "PI_JOB_USER",
    "PI_JOB_MEMORY", "PI_JOB_CPUS", "PI_JOB_TIMEOUT", "PI_SHUTDOWN_GRACE", "PI_LOGS_DIR", "PI_JOBS_DIR",
    "PI_CAPTURE_JOB_LOGS", "PI_LOG_RETENTION_DAYS", "PI_SWEEP_INTERVAL_HOURS", "PI_RETRY_ATTEMPTS",
    "PI_RETRY_BASE_MS", "PI_ON_FAILURE", "PI_ON_FAILURE_TIMEOUT_MS", "PI_PAUSE_WINDOWS_FILE",
    "PI_DAILY_CAP", "PI_WEEKLY_CAP", "PI_MONTHLY_CAP", "PI_SOFT_HOLD_PCT", "PI_DAILY_TOKEN_CAP",
    "PI_SCOPED_LIMITS_FILE", "PI_MAX_TOKENS", "PI_MAX_COST_USD",
    "PI_PROVIDER", "PI_MODEL", "PI_MAX_TURNS", "PI_ALLOWED_MODELS", "PI_FORWARD_ENV", "PI_SECRET_PROFILES",
    "PI_SECRET_RESOLVE_TIMEOUT_MS", "PI_WAIT_PROFILES", "PI_WAIT_CHECK_TIMEOUT_MS", "PI_WAIT_INTERVAL_MS",
    "PI_WAIT_CHECK_SLOTS", "PI_WAIT_MAX_MS", "PI_WAIT_AFTER_MAX_MS", "PI_WAIT_MAX_CHECKS",
    "PI_WAIT_MAX_FAULTS", "PD_WAIT_INTERVAL_FLOOR_MS", "PI_MODEL_BASE_URL",
    "PI_EGRESS", "PI_EGRESS_ALLOWLIST", "PD_EGRESS_IMAGE", "PD_EGRESS_SUBNETS",
    *(name for names in PROVIDER_KEY_VARS.values() for name in names),
)

# Names already reported by this process: load_settings may run more than once in one (pi-dispatch dev).
_warned: set[str] = set()


def allowed_unsupported(env: Mapping[str, str]) -> tuple[str, ...]:
    """Pure: the table's variables set (non-blank) in ``env`` that the allow-list names, in table order.

    Raises ``ConfigError`` for an allow-list entry outside the table, then for the first set variable
    the allow-list does not name."""
    allow = [n.strip() for n in (env.get(ALLOW_VARIABLE) or "").split(",") if n.strip()]
    for name in allow:
        if name not in UNSUPPORTED:
            raise ConfigError(f"{ALLOW_VARIABLE} names {name!r}, {_not_listed(name)}")
    found = [name for name in UNSUPPORTED if (env.get(name) or "").strip()]
    refused = [name for name in found if name not in allow]
    if len(refused) == 1:
        name = refused[0]
        raise ConfigError(f"{name} is set but pi-dispatch does not implement it; {UNSUPPORTED[name]} "
                          f"(or list it in {ALLOW_VARIABLE} to start anyway)")
    if refused:
        # All of them at once: one restart per variable would be a migration by trial and error.
        each = "; ".join(f"{name}: {UNSUPPORTED[name]}" for name in refused)
        raise ConfigError(f"{', '.join(refused)} are set but pi-dispatch does not implement them ({each}); "
                          f"or list them in {ALLOW_VARIABLE} to start anyway")
    return tuple(found)


# The prefixes of this project's variables and of the forges': a set name under one of them that no
# process reads is most likely a typo (PI_CONCURENCY) and is named at start.
OWN_PREFIXES = ("PI_", "PD_", "GITHUB_", "GITLAB_", "FORGEJO_", "GITEA_", "AZURE_")
# Set under those prefixes by CI runners, shells and tools, not by an operator for this project.
FOREIGN = frozenset({
    "GITHUB_ACTION", "GITHUB_ACTION_PATH", "GITHUB_ACTION_REPOSITORY", "GITHUB_ACTIONS", "GITHUB_ACTOR",
    "GITHUB_ACTOR_ID", "GITHUB_BASE_REF", "GITHUB_ENV", "GITHUB_EVENT_NAME", "GITHUB_EVENT_PATH",
    "GITHUB_GRAPHQL_URL", "GITHUB_HEAD_REF", "GITHUB_JOB", "GITHUB_OUTPUT", "GITHUB_PATH", "GITHUB_REF",
    "GITHUB_REF_NAME", "GITHUB_REF_PROTECTED", "GITHUB_REF_TYPE", "GITHUB_REPOSITORY", "GITHUB_REPOSITORY_ID",
    "GITHUB_REPOSITORY_OWNER", "GITHUB_REPOSITORY_OWNER_ID", "GITHUB_RETENTION_DAYS", "GITHUB_RUN_ATTEMPT",
    "GITHUB_RUN_ID", "GITHUB_RUN_NUMBER", "GITHUB_SERVER_URL", "GITHUB_SHA", "GITHUB_STATE",
    "GITHUB_STEP_SUMMARY", "GITHUB_TRIGGERING_ACTOR", "GITHUB_WORKFLOW", "GITHUB_WORKFLOW_REF",
    "GITHUB_WORKFLOW_SHA", "GITHUB_WORKSPACE", "GITHUB_ENTERPRISE_TOKEN", "GITLAB_CI", "GITLAB_FEATURES",
    "GITLAB_USER_EMAIL", "GITLAB_USER_ID", "GITLAB_USER_LOGIN", "GITLAB_USER_NAME", "GITEA_ACTIONS",
    "FORGEJO_ACTIONS", "AZURE_CONFIG_DIR", "AZURE_CORE_OUTPUT", "AZURE_EXTENSION_DIR",
    # compose.yaml's own (read by docker-compose, not by a process of the project).
    "PD_SERVICE_IMAGE", "PD_CONFIG_DIR", "PI_DATA_DIR",
    # The test suite's own switches (tests/).
    "PD_REQUIRE_DOCKER", "PD_REQUIRE_AGENT_IMAGE", "PD_REQUIRE_DEPLOY", "PD_REQUIRE_BROWSER",
    "PD_REQUIRE_REDIS7", "PD_REQUIRE_SENTINEL", "PD_REQUIRE_SYSTEMD", "PD_TEST_WORKERS", "PD_DEPLOY_LOGS",
    "PD_UPDATE_SCREENSHOT",
})


def unknown_variables(env: Mapping[str, str], known: Iterable[str] = ()) -> list[tuple[str, str | None]]:
    """Pure: each set variable under ``OWN_PREFIXES`` that no process reads (``HONOURED``, the table
    above, ``known``), with the nearest name it may have meant (None when nothing is close)."""
    every = {*HONOURED, *UNSUPPORTED, *FORGE_TOKEN_VARS, *known}
    names = sorted(n for n in env if n.startswith(OWN_PREFIXES) and n not in every and n not in FOREIGN)
    candidates = sorted(every)
    return [(n, next(iter(difflib.get_close_matches(n, candidates, n=1, cutoff=0.8)), None)) for n in names]


def unknown_line(found: list[tuple[str, str | None]]) -> str:
    """``unknown variable PI_CONCURENCY (did you mean PI_CONCURRENCY?), PI_FOO``."""
    shown = [f"{n} (did you mean {near}?)" if near else n for n, near in found]
    many = len(found) > 1
    return (f"unknown variable{'s' if many else ''} {', '.join(shown)}: no process of pi-dispatch reads "
            f"{'them' if many else 'it'}")


def _not_listed(name: str) -> str:
    if name in HONOURED:
        return "which pi-dispatch implements; accepted: only names it does not implement (remove this one)"
    close = difflib.get_close_matches(name.upper(), list(UNSUPPORTED), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"which is not a variable pi-dispatch refuses{hint} accepted: names from docs/configuration.md"


def check_environment(env: Mapping[str, str]) -> None:
    """Refuse (exit 2) an unimplemented variable that is set, or warn once about the allowed ones.

    The warning is one JSON line on stderr: this runs before logging is configured, and inside commands
    whose stdout is a script's input."""
    names = [n for n in allowed_unsupported(env) if n not in _warned]
    if names:
        _warned.update(names)
        _warn({"event": "unsupported_variable_allowed", "names": names})
    unknown = [(n, near) for n, near in unknown_variables(env) if n not in _warned]
    if unknown:
        _warned.update(n for n, _ in unknown)
        _warn({"event": "unknown_variable", "names": [n for n, _ in unknown],
               "meant": {n: near for n, near in unknown if near}, "message": unknown_line(unknown)})


def _warn(fields: dict[str, object]) -> None:
    line = {**fields, "level": "warning", "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
    sys.stderr.write(msgspec.json.encode(line).decode() + "\n")
    sys.stderr.flush()
