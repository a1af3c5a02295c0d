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
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from pidispatch import forges
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.keys import ROUTER_GROUP, WORKER_GROUP, Keys
from pidispatch.common.redis import Redis, bounded, redis_for
from pidispatch.common.settings import Settings, load_settings_by_part
from pidispatch.common.table import aligned
from pidispatch.common.unsupported import unknown_variables
from pidispatch.console import diagnosis as dx
from pidispatch.console.diagnosis import Check
from pidispatch.console.topology import read_topology
from pidispatch.forges.config import ForgeConfig, load_forge_config_by_forge
from pidispatch.forges.receive import receive_of
from pidispatch.forges.route import route_of
from pidispatch.worker.egress.rules import destinations

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 5.0
REDIS_DOWN = "redis unreachable"
NO_REDIS_FIX = "fix the redis check first"
FIX_CONFIG = "fix the config check first"
RECEIVER_REFUSED = "a receiver variable is refused (config)"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="check configuration, Redis, Docker, the job image, triggers and "
                                      "forges; exit 0 ok, 1 warnings, 2 failures",
                       description="Check every dependency once (configuration, Redis and its persistence, "
                       "stream groups, Docker, the job image, triggers.json, forge credentials, webhook "
                       "secrets, budget, clock skew, live hosts, dead entries): each ok, warn or fail "
                       "with the fix in one line. Exit 0 all ok, 1 warnings, 2 a failure.")
    p.add_argument("--json", action="store_true", help='one JSON object {"checks": [...], "exit": n}')
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="seconds each dependency gets to answer (default %(default)s)")
    p.set_defaults(func=doctor_command)


async def doctor_command(args: argparse.Namespace) -> int:
    if not 0 < args.timeout <= 300:
        raise ConfigError(f"--timeout {args.timeout} is refused; accepted: seconds, more than 0 up to 300")
    checks = await diagnose(os.environ, args.timeout)
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


async def within(call: Awaitable[T], timeout_s: float) -> T:
    """``call`` or ``TimeoutError`` after ``timeout_s``: no dependency can hang the doctor."""
    async with asyncio.timeout(timeout_s):
        return await call


def late(timeout_s: float) -> str:
    return f"did not answer within {timeout_s:g} s"


async def diagnose(env: Mapping[str, str], timeout_s: float) -> list[Check]:
    settings, errors = load_settings_by_part(env)
    forge_config, forge_errors = load_forge_config_by_forge(env)
    checks = [dx.config_check({**errors, **forge_errors}), dx.variables_check(unknown_variables(env))]
    keys = Keys(settings.key_prefix)
    redis = None if "store" in errors else redis_for(settings)
    try:
        redis_up = await _redis(checks, redis, timeout_s)
        live = redis if redis_up else None
        checks.append(await _streams(live, keys, timeout_s, redis is None))
        checks.append(await _topology(live, settings, timeout_s))
        checks += await _docker(settings, forge_config, timeout_s, "container" in errors)
        rules, trigger_check = await _triggers(settings, "receiver" in errors)
        checks.append(trigger_check)
        checks += await _forges(forge_config, forge_errors, rules, timeout_s)
        checks.append(_webhooks(rules, settings, env, "receiver" in errors))
        if live is None:
            cause = "REDIS_URL refused (config)" if redis is None else REDIS_DOWN
            checks += [dx.skipped(n, cause, NO_REDIS_FIX) for n in ("budget", "clock", "hosts", "dead")]
        else:
            checks += await _redis_state(live, keys, settings, timeout_s, "spend" in errors)
    finally:
        if redis is not None:
            await redis.aclose()
    return checks


# ---- Redis ----------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _config_get(redis: Redis, name: str, timeout_s: float) -> str | None:
    answer = await bounded(redis.config_get(name), timeout_s)
    found = {_text(k): _text(v) for k, v in answer.items()}
    return found.get(name)


async def _redis(checks: list[Check], redis: Redis | None, timeout_s: float) -> bool:
    """Append the redis check; True when Redis answers."""
    from redis.exceptions import AuthenticationError, RedisError, ResponseError

    if redis is None:
        checks.append(dx.skipped("redis", "REDIS_URL refused (config)", FIX_CONFIG))
        return False
    try:
        await bounded(redis.ping(), timeout_s)
    except AuthenticationError:
        refusal = "refused the credentials (VALKEY_PASSWORD/REDIS_PASSWORD/REDIS_URL)"
        checks.append(dx.redis_check(refusal, None))
        return False
    except TimeoutError:
        checks.append(dx.redis_check(late(timeout_s), None))
        return False
    except (RedisError, OSError) as exc:
        checks.append(dx.redis_check(f"unreachable ({type(exc).__name__})", None))
        return False
    try:
        facts = dx.RedisFacts(
            appendonly=await _config_get(redis, "appendonly", timeout_s),
            save=await _config_get(redis, "save", timeout_s),
            policy=await _config_get(redis, "maxmemory-policy", timeout_s),
        )
    except ResponseError:  # CONFIG renamed or disabled, as managed services do
        facts = None
    except (RedisError, OSError, TimeoutError) as exc:
        checks.append(dx.redis_check(f"answers PING, then failed ({type(exc).__name__})", None))
        return False
    checks.append(dx.redis_check(None, facts))
    return True


async def _topology(redis: Redis | None, settings: Settings, timeout_s: float) -> Check:
    from redis.exceptions import RedisError

    if redis is None:
        return dx.skipped("topology", REDIS_DOWN, NO_REDIS_FIX)
    try:
        return dx.topology_check(await read_topology(redis, settings, timeout_s))
    except (RedisError, OSError, TimeoutError) as exc:
        return Check("topology", dx.FAIL, f"INFO replication failed ({type(exc).__name__})", NO_REDIS_FIX)


async def _streams(redis: Redis | None, keys: Keys, timeout_s: float, refused: bool) -> Check:
    from redis.exceptions import RedisError, ResponseError

    if redis is None:
        return dx.skipped("streams", "REDIS_URL refused (config)" if refused else REDIS_DOWN, NO_REDIS_FIX)
    missing: list[tuple[str, str]] = []
    for stream, group in ((keys.events, ROUTER_GROUP), (keys.jobs, WORKER_GROUP)):
        try:
            groups = await bounded(redis.xinfo_groups(stream), timeout_s)
        except ResponseError:  # no such stream yet
            groups = []
        except (RedisError, OSError, TimeoutError) as exc:
            return dx.Check("streams", dx.FAIL, f"XINFO failed ({type(exc).__name__})", NO_REDIS_FIX)
        if group not in {_text(value) for g in groups for k, value in g.items() if _text(k) == "name"}:
            missing.append((stream, group))
    return dx.streams_check(missing)


async def _redis_state(redis: Redis, keys: Keys, settings: Settings, timeout_s: float,
                       spend_refused: bool) -> list[Check]:
    """budget, clock, hosts, dead: each bounded, each failing on its own."""
    found: list[Check] = []
    readers: tuple[tuple[str, Callable[[], Awaitable[Check]]], ...] = (
        ("budget", lambda: _budget(redis, keys, settings, spend_refused)),
        ("clock", lambda: _clock(redis)),
        ("hosts", lambda: _hosts(redis, keys, timeout_s)),
        ("dead", lambda: _dead(redis, keys)),
    )
    for name, read in readers:
        try:
            found.append(await within(read(), timeout_s))
        except TimeoutError:
            found.append(dx.Check(name, dx.FAIL, f"Redis {late(timeout_s)}", NO_REDIS_FIX))
        except Exception as exc:
            found.append(dx.Check(name, dx.FAIL, f"could not read ({type(exc).__name__})", NO_REDIS_FIX))
    return found


async def _budget(redis: Redis, keys: Keys, settings: Settings, refused: bool) -> Check:
    from pidispatch.worker.limits.budget import token_key, windows

    if refused:
        return dx.skipped("budget", "a spend variable is refused (config)", FIX_CONFIG)
    now = int(time.time() * 1000)
    found = windows(settings, now, keys)
    names = [w.key for w in found]
    if settings.daily_token_cap is not None:
        names.append(token_key(keys, now))
    values = await redis.mget(names)
    used = [int(v) if v is not None else 0 for v in values]
    caps = [(w.name, w.cap) for w in found]
    if settings.daily_token_cap is not None:
        caps.append(("tokens", settings.daily_token_cap))
    rows = [dx.WindowUse(n, u, c) for (n, c), u in zip(caps, used, strict=True)]
    return dx.budget_check(rows, settings.soft_hold_pct)


async def _clock(redis: Redis) -> Check:
    before = time.time()
    seconds, micros = await redis.time()
    after = time.time()
    return dx.clock_check((before + after) / 2 - (seconds + micros / 1e6))


async def _hosts(redis: Redis, keys: Keys, timeout_s: float) -> Check:
    from pidispatch.common.registry import is_live, read_live_hosts

    rows = await read_live_hosts(redis, keys, int(time.time() * 1000), timeout_s=timeout_s)
    return dx.hosts_check([
        dx.HostLoad(h.name, h.running, h.concurrency, tuple(sorted(h.caps))) for h in rows if is_live(h)
    ])


async def _dead(redis: Redis, keys: Keys) -> Check:
    return dx.dead_check(int(await redis.xlen(keys.dead)), keys.dead)


# ---- Docker and the job image ---------------------------------------------------------------------


async def _docker(settings: Settings, config: ForgeConfig, timeout_s: float, refused: bool) -> list[Check]:
    from pidispatch.worker.engine.dockerapi import create_docker
    from pidispatch.worker.engine.preflight import inspect_image

    docker = create_docker()
    try:
        try:
            info = await within(docker.system.info(), timeout_s)
        except TimeoutError:
            return [dx.docker_check(late(timeout_s), None), dx.skipped("job-image", "docker unreachable",
                                                                      "fix the docker check first")]
        except Exception as exc:
            return [dx.docker_check(f"unreachable ({type(exc).__name__})", None),
                    dx.skipped("job-image", "docker unreachable", "fix the docker check first")]
        driver = info.get("Driver") if isinstance(info, Mapping) else None
        checks = [dx.docker_check(None, driver if isinstance(driver, str) else None)]
        if refused:
            checks.append(dx.skipped("job-image", "PI_JOB_IMAGE or another container variable is refused",
                                     FIX_CONFIG))
            return checks
        try:
            facts = await within(inspect_image(docker, settings.job_image), timeout_s)
        except TimeoutError:
            checks.append(dx.Check("job-image", dx.FAIL, f"Docker {late(timeout_s)}", "check the daemon"))
            return checks
        except Exception as exc:
            checks.append(dx.Check("job-image", dx.FAIL, f"inspect failed ({type(exc).__name__})",
                                   "check the daemon"))
            return checks
        checks.append(dx.image_check(settings.job_image, facts, config.configured_forges()))
        checks.append(await _egress(docker, settings, config, timeout_s))
        return checks
    finally:
        await docker.close()


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
