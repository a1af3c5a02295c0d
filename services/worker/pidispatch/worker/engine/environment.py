"""A job container's environment: a closed allowlist, assigned in an order that is itself the security
property (later wins: see ``container_env`` for the order).

Nothing is copied from the worker's environment except the provider credential and the names the operator
listed in ``PI_FORWARD_ENV``. Later assignments win, so what the runtime owns (``HOME``, the minted forge
token) is assigned after everything an operator or a trigger could influence.
"""

from __future__ import annotations

from collections.abc import Mapping

from pidispatch import forges
from pidispatch.common.dollars import USD_ACCEPTED, lower_cap, usd_micros
from pidispatch.common.envnames import ENV_NAME_RE, PROVIDER_KEY_VARS, RUNNER_INTERNAL_VARS
from pidispatch.common.models import Job
from pidispatch.common.outcome import JobConfigRefused
from pidispatch.common.settings import Settings

CONTAINER_HOME = "/home/pi"
# Where a job's minted forge token goes: every one of its forge's variables, never another forge's.
FORGE_TOKEN_VARS: dict[str, tuple[str, ...]] = {f.name: f.token_vars for f in forges.FORGES}
COST_CAP_VAR = "PI_MAX_COST_MICROS"
# The runner writes it into pi's models.json as the provider's base URL.
BASE_URL_VAR = "PI_MODEL_BASE_URL"
PLAYWRIGHT_ENV: Mapping[str, str] = {
    "PLAYWRIGHT_BROWSERS_PATH": "/ms-playwright",
    "PLAYWRIGHT_MCP_BROWSER": "chromium",
    "PLAYWRIGHT_MCP_SANDBOX": "false",
}


def effective_provider(job: Job, settings: Settings) -> str:
    return job.provider or settings.provider


def effective_model(job: Job, settings: Settings) -> str | None:
    return job.model or settings.model


def effective_max_turns(job: Job, settings: Settings) -> int:
    return job.max_turns if job.max_turns is not None else settings.max_turns


def effective_models(job: Job, settings: Settings) -> tuple[str, ...]:
    """The models a job may use: the trigger's ``run.models``, else the deployment's ``PI_ALLOWED_MODELS``."""
    return tuple(job.models) if job.models else settings.allowed_models


def effective_cost_micros(job: Job, settings: Settings) -> int | None:
    """The job's dollar cap in micro-dollars: the lower of ``PI_MAX_COST_USD`` and the trigger's
    ``run.maxCostUsd``, or None when neither is set.

    Raises ``JobConfigRefused`` for a job cap that does not read as an amount: running it uncapped would
    not honour what the trigger asked for.
    """
    if job.max_cost_usd is None:
        return settings.max_cost_micros
    micros = usd_micros(job.max_cost_usd)
    if micros is None:
        raise JobConfigRefused(f"this job's maxCostUsd is refused; accepted: {USD_ACCEPTED}")
    return lower_cap(settings.max_cost_micros, micros)


def token_vars(job: Job) -> tuple[str, ...]:
    """Where a job's minted forge token goes; a local job that asked for one gets the default forge's
    (the registry's fallthrough forge, GitHub).

    Raises ``JobConfigRefused`` for a kind with no table entry: never a default forge.
    """
    kind = forges.fallthrough().name if job.is_local else job.kind
    names = FORGE_TOKEN_VARS.get(kind)
    if names is None:
        raise JobConfigRefused(
            f"job kind {kind!r} has no forge token variables; accepted: {', '.join(FORGE_TOKEN_VARS)}"
        )
    return names


def base_env(job: Job, *, name: str, settings: Settings) -> dict[str, str]:
    """The variables the worker derives from the job and its settings, before any credential."""
    env = {"PI_PROVIDER": effective_provider(job, settings)}
    model = effective_model(job, settings)
    if model:
        env["PI_MODEL"] = model
    env["PI_MAX_TURNS"] = str(effective_max_turns(job, settings))
    if settings.max_tokens is not None:
        env["PI_MAX_TOKENS"] = str(settings.max_tokens)
    env["PI_JOB_ID"] = name
    env.update(PLAYWRIGHT_ENV)
    # A command job is dispatched by name; it never also carries a flow.
    if job.command:
        env["PI_COMMAND"] = job.command
    elif job.flow:
        env["PI_FLOW"] = job.flow
    if job.exclude_tools:
        env["PI_EXCLUDE_TOOLS"] = ",".join(job.exclude_tools)
    models = effective_models(job, settings)
    if models:
        env["PI_ALLOWED_MODELS"] = ",".join(models)
    env["PI_OFFLINE"] = "1"
    return env


def container_env(
    job: Job,
    *,
    name: str,
    settings: Settings,
    host_env: Mapping[str, str],
    secrets: Mapping[str, str],
    forge_token: str | None = None,
    user_set: bool = True,
) -> dict[str, str]:
    """Pure: the closed map of variables one job's container sees. No value is ever ``None``.

    Assignment order (later wins): base map -> provider credential -> ``PI_FORWARD_ENV`` -> resolved
    secrets -> ``HOME`` -> cost cap and model endpoint settled -> runner-internal names deleted -> forge
    token. Secrets that
    would shadow a runtime name are refused before this (``resolve_secrets``); the order is the second line
    of defence.
    Raises ``JobConfigRefused`` for a secret name that is not a variable name, a job cap that is not an
    amount, an empty forge token, or a forge token for a kind with no token variables.
    """
    env = base_env(job, name=name, settings=settings)
    # Every key variable pi reads for this provider that the worker has, in pi's order. None set is not
    # refused here: the provider-credential gate (`provider-unconfigured`) belongs to a later issue.
    for var in PROVIDER_KEY_VARS.get(effective_provider(job, settings), ()):
        value = host_env.get(var)
        if value:
            env[var] = value
    for var in settings.forward_env:
        value = host_env.get(var)
        if value:  # an empty forwarded value is skipped, not set empty
            env[var] = value
    for var, value in secrets.items():
        # A name with '=' in it would set another variable through the back door.
        if not ENV_NAME_RE.match(var):
            raise JobConfigRefused(
                "a resolved secret is bound to an invalid variable name; accepted: [A-Za-z_][A-Za-z0-9_]*"
            )
        env[var] = value
    if user_set:
        env["HOME"] = CONTAINER_HOME
    # Settled after everything an operator or a trigger could name: the cap is the runtime's, set or absent.
    env.pop(COST_CAP_VAR, None)
    cap = effective_cost_micros(job, settings)
    if cap is not None:
        env[COST_CAP_VAR] = str(cap)
    # Likewise the endpoint: the deployment's, never one a trigger or a forwarded name could set.
    env.pop(BASE_URL_VAR, None)
    if settings.model_base_url is not None:
        env[BASE_URL_VAR] = settings.model_base_url
    for var in RUNNER_INTERNAL_VARS:
        env.pop(var, None)
    if forge_token is not None:
        if not forge_token:
            raise JobConfigRefused(
                "the minted forge token is empty; check the forge credentials (pi-dispatch doctor)"
            )
        for var in token_vars(job):
            env[var] = forge_token
    return env
