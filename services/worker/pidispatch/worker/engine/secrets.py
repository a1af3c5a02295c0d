"""Secret profiles: turn a job's secret *references* into values, just before spend.

A job carries ``{VAR_NAME: "<opaque reference>"}`` and a profile name; the profile is an operator-declared
resolver executable, run as ``<resolver> <reference>`` (no shell). Its exit code is the verdict: 0 = the
value on stdout, 2 = a determinate "no" (refused, not retried), anything else = infrastructure (retried).
Values live only in the returned dict; references, resolver paths and output never reach a log or record.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass

from pidispatch.common.envnames import PROVIDER_KEY_VARS, secret_name_refused
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job
from pidispatch.common.outcome import InfraFault, JobRefusal
from pidispatch.common.settings import Settings
from pidispatch.worker.engine.environment import effective_provider
from pidispatch.worker.program import executable_file, run_program

STDOUT_CAP = 64 * 1024
DEFAULT_PROFILE = "default"
NAME_RESERVED = "secret-name-reserved"
PROFILE_UNKNOWN = "secret-profile-unknown"
UNRESOLVED = "secret-unresolved"
UNREACHABLE = "secret-resolver-unreachable"


@dataclass(frozen=True)
class Answer:
    """What one resolver run said. ``failure`` names why it gave no value (a token, never output)."""

    value: str | None
    failure: str | None
    code: int | None
    stderr_bytes: int
    determinate: bool = True


def armed(job: Job) -> bool:
    return bool(job.secrets) or bool(job.secrets_profile)


def static_refusal(job: Job) -> str | None:
    """Pure: the first bound name no secret may take whatever the deployment (step 1), or None."""
    for name in job.secrets or {}:
        if secret_name_refused(name):
            return name
    return None


def deployment_refusal(job: Job, settings: Settings) -> str | None:
    """Pure: the first bound name this deployment owns (step 3): the job provider's key variables, set or
    not, and every forwarded name. Another provider's key variable is allowed."""
    owned = {*PROVIDER_KEY_VARS.get(effective_provider(job, settings), ()), *settings.forward_env}
    for name in job.secrets or {}:
        if name in owned:
            return name
    return None


async def find_resolver(job: Job, settings: Settings) -> str | None:
    """The resolver of the job's profile (``default`` when it names none), or None when undeclared or
    not an executable file. Never an "only profile" fallback."""
    wanted = job.secrets_profile or DEFAULT_PROFILE
    path = dict(settings.secret_profiles).get(wanted)
    if path is None:
        return None
    return await asyncio.to_thread(executable_file, path)


def judge(code: int | None, out: bytes, *, overflow: bool, stderr_bytes: int) -> Answer:
    """Pure: a finished resolver run as a value or a named failure."""
    if overflow:
        return Answer(None, "overflow", code, stderr_bytes)
    if code == 2:
        return Answer(None, "exit-2", code, stderr_bytes)
    if code != 0:
        return Answer(None, "exit-code", code, stderr_bytes, determinate=False)
    if b"\0" in out:
        return Answer(None, "nul", code, stderr_bytes)
    # Exactly one line ending is the resolver's; anything more belongs to the value (no trim).
    if out.endswith(b"\r\n"):
        out = out[:-2]
    elif out.endswith(b"\n"):
        out = out[:-1]
    if not out:
        return Answer(None, "empty", code, stderr_bytes)
    try:
        value = out.decode()
    except UnicodeDecodeError:
        return Answer(None, "not-utf8", code, stderr_bytes)
    return Answer(value, None, code, stderr_bytes)


async def run_resolver(
    path: str, reference: str, *, env: Mapping[str, str], timeout_s: float, abort: asyncio.Event | None
) -> Answer:
    """Run ``<path> <reference>`` once, bounded by ``timeout_s`` and ``abort``; never raises."""
    run = await run_program(
        path, [reference], env=env, timeout_s=timeout_s, abort=abort, stdout_cap=STDOUT_CAP
    )
    if run.failure in ("spawn", "timeout", "abort"):
        return Answer(None, run.failure, None, 0, determinate=False)
    return judge(run.code, run.stdout, overflow=run.failure == "overflow", stderr_bytes=run.stderr_bytes)


def _refuse(job: Job, name: str, failure: str, reason: str, answer: Answer | None = None) -> JobRefusal:
    get_logger().info(
        "secret_refused", kind=job.kind, name=name, failure=failure,
        code=answer.code if answer else None, stderrBytes=answer.stderr_bytes if answer else None,
    )
    return JobRefusal(reason)


async def resolve_secrets(
    job: Job,
    settings: Settings,
    *,
    abort: asyncio.Event | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str] | JobRefusal:
    """The job's secrets as ``{name: value}`` (``{}`` when it binds none), or a named refusal.

    Raises ``InfraFault("secret-resolver-unreachable")`` for a resolver that could not give a verdict
    (exit 1 or another code, spawn error, timeout, abort). The first failure stops: never a partial set.
    ``env`` is what the resolver runs with (default: the worker's own environment).
    """
    if not armed(job):
        return {}
    if (name := static_refusal(job)) is not None:
        return _refuse(job, name, "reserved", NAME_RESERVED)
    resolver = await find_resolver(job, settings)
    if resolver is None:
        return _refuse(job, job.secrets_profile or DEFAULT_PROFILE, "profile-unknown", PROFILE_UNKNOWN)
    if (name := deployment_refusal(job, settings)) is not None:
        return _refuse(job, name, "reserved", NAME_RESERVED)
    run_env = os.environ if env is None else env
    values: dict[str, str] = {}
    known: dict[str, str] = {}  # reference -> value: an identical reference is resolved once
    for name, reference in (job.secrets or {}).items():
        if reference not in known:
            answer = await run_resolver(
                resolver, reference, env=run_env, timeout_s=settings.secret_resolve_timeout_s, abort=abort
            )
            if answer.value is None:
                if answer.determinate:
                    return _refuse(job, name, answer.failure or "unresolved", UNRESOLVED, answer)
                get_logger().warning(
                    "secret_resolver_fault", kind=job.kind, name=name, failure=answer.failure,
                    code=answer.code, stderrBytes=answer.stderr_bytes,
                )
                raise InfraFault(UNREACHABLE)
            known[reference] = answer.value
        values[name] = known[reference]
    return values
