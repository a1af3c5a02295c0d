"""``pi-dispatch doctor``: ask every dependency the services need, once, and say what is wrong and the fix.

This module gathers facts (environment, Redis, Docker, the triggers file, each forge's API) with every
call bounded by ``--timeout``; ``worker.diagnosis`` turns them into checks. A refused variable does not
stop it: the ``config`` check fails and every check that does not depend on that variable still runs.
Exit 0 all ok, 1 a warning, 2 a failure.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pidispatch import forges
from pidispatch.common import devstate
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.keys import Keys
from pidispatch.common.redis import redis_for
from pidispatch.common.settings import Settings, load_settings_by_part
from pidispatch.common.table import aligned
from pidispatch.common.unsupported import unknown_variables
from pidispatch.console import diagnosis as dx
from pidispatch.console.diagnosis import Check
from pidispatch.console.doctorredis import (
    FIX_CONFIG,
    NO_REDIS_FIX,
    REDIS_DOWN,
    late,
    redis_check_into,
    redis_state,
    streams,
    topology,
    within,
)
from pidispatch.console.heal import doctor_check as heal_row
from pidispatch.console.modelcheck import ModelFacts, model_row, read_instance, running_dev
from pidispatch.forges.config import ForgeConfig, load_forge_config_by_forge
from pidispatch.forges.receive import receive_of
from pidispatch.forges.route import route_of
from pidispatch.worker.egress.rules import destinations

DEFAULT_TIMEOUT_S = 5.0
DOCKER_FIX = "fix the docker check first"
RECEIVER_REFUSED = "a receiver variable is refused (config)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="check configuration, Redis, Docker, the job image, triggers and "
                                      "forges; exit 0 ok, 1 warnings, 2 failures",
                       description="Check every dependency once (configuration, Redis and its persistence, "
                       "stream groups, Docker, the job image, triggers.json, forge credentials, webhook "
                       "secrets, budget, clock skew, live hosts, dead entries): each ok, warn or fail "
                       "with the fix in one line. Exit 0 all ok, 1 warnings, 2 a failure.")
    p.add_argument("--json", action="store_true", help='one JSON object {"checks": [...], "exit": n}')
    p.add_argument("--service", action="append", choices=sorted(dx.SERVICES), default=None,
                   help="only the checks this service needs (repeatable; default all): in a container that "
                   "runs one service, e.g. docker-compose exec router pi-dispatch doctor --service router")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="seconds each dependency gets to answer (default %(default)s)")
    p.set_defaults(func=doctor_command)


async def doctor_command(args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= 300:
        raise ConfigError(f"--timeout {args.timeout} is refused; accepted: seconds, more than 0 up to 300")
    # Beside a running dev the CLI has taken dev.json's values: the checks judge what dev runs, and say so.
    dev = await asyncio.to_thread(running_dev, Path.cwd())
    services = frozenset(args.service) if args.service else dx.SERVICES
    checks = await diagnose(os.environ, args.timeout, dev, services)
    code = dx.exit_code(checks)
    if args.json:
        print(json.dumps({"checks": [c.as_json() for c in checks], "exit": code}))
    else:
        print(render(checks))
    return code


def render(checks: list[Check]) -> str:
    """Pure: the table, then one line per fix."""
    table = aligned([("CHECK", "STATUS", "FINDING"), *((c.name, c.status, c.finding) for c in checks)])
    fixes = [f"  {c.name}: {c.fix}" for c in checks if c.status != dx.OK and c.fix]
    return table + ("\n\nfix:\n" + "\n".join(fixes) if fixes else "")


async def diagnose(
    env: Mapping[str, str], timeout_s: float, dev: devstate.DevState | None = None,
    services: frozenset[str] = dx.SERVICES,
) -> list[Check]:
    """Every check ``services`` need (``--service``: the one a container runs), in a fixed order."""
    settings, errors = load_settings_by_part(env)
    forge_config, forge_errors = load_forge_config_by_forge(env)
    checks = [dx.config_check({**errors, **forge_errors}), dx.variables_check(unknown_variables(env))]
    if dev is not None:
        checks.append(dx.dev_check(dev.pid, settings.job_image))
    keys = Keys(settings.key_prefix)
    redis = None if "store" in errors else redis_for(settings)
    try:
        redis_up = await redis_check_into(checks, redis, timeout_s)
        live = redis if redis_up else None
        checks.append(await streams(live, keys, timeout_s, redis is None))
        checks.append(await topology(live, settings, timeout_s))
        if "worker" in services:
            instance = await read_instance(live, keys, timeout_s)
            model = ModelFacts(env, instance, dev, "agent" in errors)
            checks += await _docker(settings, forge_config, timeout_s, "container" in errors, model)
        rules = None
        if services & {"router", "worker"}:
            rules, trigger_check = await _triggers(settings, "receiver" in errors)
            checks.append(trigger_check)
            checks += await _forges(forge_config, forge_errors, rules, timeout_s)
        if "router" in services:
            checks.append(await heal_row(settings, forge_config, timeout_s, errors, forge_errors))
        if "receiver" in services:
            # Alone (its own container) the receiver has no rules to judge its arms by: one must serve.
            alone = not services & {"router", "worker"} and "receiver" not in errors
            checks.append(dx.arms_check(_served(settings, env)) if alone
                          else _webhooks(rules, settings, env, "receiver" in errors))
        if live is None:
            cause = "REDIS_URL refused (config)" if redis is None else REDIS_DOWN
            checks += [dx.skipped(n, cause, NO_REDIS_FIX) for n in ("budget", "clock", "hosts", "dead")]
        else:
            checks += await redis_state(live, keys, settings, timeout_s, "spend" in errors)
        checks = [c for c in checks if dx.in_scope(c.name, services)]
    finally:
        if redis is not None:
            await redis.aclose()
    return checks


# ---- Docker and the job image ---------------------------------------------------------------------


async def _docker(settings: Settings, config: ForgeConfig, timeout_s: float, refused: bool,
                  model: ModelFacts) -> list[Check]:
    from pidispatch.worker.engine.dockerapi import create_docker
    from pidispatch.worker.engine.preflight import inspect_image

    docker = create_docker()
    try:
        try:
            info = await within(docker.system.info(), timeout_s)
        except TimeoutError:
            return [dx.docker_check(late(timeout_s), None), *_no_image("docker unreachable", DOCKER_FIX)]
        except Exception as exc:
            return [dx.docker_check(f"unreachable ({type(exc).__name__})", None),
                    *_no_image("docker unreachable", DOCKER_FIX)]
        driver = info.get("Driver") if isinstance(info, Mapping) else None
        checks = [dx.docker_check(None, driver if isinstance(driver, str) else None)]
        if refused:
            return [*checks, *_no_image("PI_JOB_IMAGE or another container variable is refused", FIX_CONFIG)]
        try:
            facts = await within(inspect_image(docker, settings.job_image), timeout_s)
        except TimeoutError:
            checks.append(dx.Check("job-image", dx.FAIL, f"Docker {late(timeout_s)}", "check the daemon"))
            return [*checks, dx.skipped("model", "the job image could not be inspected", "check the daemon")]
        except Exception as exc:
            checks.append(dx.Check("job-image", dx.FAIL, f"inspect failed ({type(exc).__name__})",
                                   "check the daemon"))
            return [*checks, dx.skipped("model", "the job image could not be inspected", "check the daemon")]
        checks.append(dx.image_check(settings.job_image, facts, config.configured_forges()))
        checks.append(await _egress(docker, settings, config, timeout_s))
        checks.append(await model_row(docker, settings, facts, model, timeout_s))
        return checks
    finally:
        await docker.close()


def _no_image(cause: str, fix: str) -> list[Check]:
    """The checks that need the job image, when it could not be inspected."""
    return [dx.skipped("job-image", cause, fix), dx.skipped("model", cause, fix)]


async def _egress(docker: Any, settings: Settings, config: ForgeConfig, timeout_s: float) -> Check:
    egress = settings.egress
    count = len(destinations(settings, config.job_urls()))
    if not egress.enabled:
        return dx.egress_check(False, egress.image, None, count)
    try:
        await within(docker.images.inspect(egress.image), timeout_s)
        present = True
    except TimeoutError:
        return dx.Check("egress", dx.FAIL, f"Docker {late(timeout_s)}", "check the daemon")
    except Exception:
        present = False
    return dx.egress_check(True, egress.image, present, count)


# ---- triggers, forges, webhook secrets ----------------------------------------------------------


async def _triggers(settings: Settings, refused: bool) -> tuple[Any, Check]:
    """The loaded rules (None when the file is refused) and the triggers check."""
    from pidispatch.triggers.loader import load_triggers

    if refused:
        return None, dx.skipped("triggers", RECEIVER_REFUSED, FIX_CONFIG)
    path = settings.triggers_file
    try:
        rules = await asyncio.to_thread(
            functools.partial(load_triggers, path, cron_floor_s=settings.cron_min_interval_s)
        )
        disarmed = await asyncio.to_thread(_disarmed, path)
    except ConfigError as exc:
        return None, dx.triggers_check(str(exc), 0, ())
    return rules, dx.triggers_check(None, rules.count, disarmed)


def _disarmed(path: str) -> list[int]:
    """The indexes of spent one-shots (``on.disarmed``) in a file that has just loaded."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return dx.disarmed_indexes(data)


def _uncredentialed(config: ForgeConfig, rules: Any) -> dict[str, str]:
    """Forges whose rules need a lookup but which have no credentials: the router refuses to start."""
    found: dict[str, str] = {}
    for forge in forges.FORGES:
        if rules is not None and route_of(forge).needs_lookup(rules.group(forge.name)):
            try:
                config.require(forge.name)
            except ConfigError as exc:
                found[forge.name] = str(exc)
    return found


async def _forges(
    config: ForgeConfig, errors: Mapping[str, str], rules: Any, timeout_s: float
) -> list[Check]:
    """One real call per configured forge; a forge whose variables are refused, or that rules need and
    has no credentials, fails without one. Other forges are not listed."""
    errors = {**_uncredentialed(config, rules), **errors}
    from pidispatch.forges.http import create_http
    from pidispatch.forges.identity import IdentityCalls
    from pidispatch.forges.route import token_sources

    configured = config.configured_forges()
    named = [f for f in forges.FORGES if f.name in configured or f.name in errors]
    if not named:
        return []
    http = create_http()
    try:
        calls = IdentityCalls(config, token_sources(config, http), http)

        async def one(forge: forges.Forge) -> Check:
            if forge.name in errors:
                probe = dx.ForgeProbe(error=errors[forge.name])
            else:
                probe = await _probe(forge, calls, timeout_s)
            return dx.forge_check(forge.name, probe, forge.credentials_hint)

        return list(await asyncio.gather(*(one(f) for f in named)))
    finally:
        await http.close()


async def _probe(forge: forges.Forge, calls: Any, timeout_s: float) -> dx.ForgeProbe:
    from pidispatch.forges.identity import IdentityTransient

    try:
        await within(route_of(forge).resolve_self(calls), timeout_s)
    except TimeoutError:
        return dx.ForgeProbe(error=late(timeout_s))
    except IdentityTransient as exc:
        return dx.ForgeProbe(error=f"no usable answer ({exc.reason})")
    except (ConfigError, InfraError) as exc:
        return dx.ForgeProbe(error=str(exc))
    headers = calls.headers.get(forge.name, {})
    return dx.ForgeProbe(scopes=headers.get("x-oauth-scopes"))


def _served(settings: Settings, env: Mapping[str, str]) -> dict[str, str | None]:
    """Each forge's webhook arm on this receiver: None when it serves, else why not (no rules to judge by)."""
    served: dict[str, str | None] = {}
    for forge in forges.FORGES:
        receive = receive_of(forge)
        try:
            served[forge.name] = None if receive.load(settings, env) is not None else "not set"
        except ConfigError as exc:
            served[forge.name] = str(exc)
    return served


def _webhooks(rules: Any, settings: Settings, env: Mapping[str, str], refused: bool) -> Check:
    if refused:
        return dx.skipped("webhook-secrets", RECEIVER_REFUSED, FIX_CONFIG)
    if rules is None:
        return dx.skipped("webhook-secrets", "triggers.json refused", "fix the triggers check first")
    arms: dict[str, str | None] = {}
    for forge in forges.FORGES:
        if not rules.group(forge.name).has_rules():
            continue
        receive = receive_of(forge)
        try:
            served = receive.load(settings, env)
        except ConfigError as exc:
            arms[forge.name] = str(exc)
            continue
        arms[forge.name] = None if served is not None else f"{receive.setup_hint} not set"
    return dx.webhook_check(arms)
