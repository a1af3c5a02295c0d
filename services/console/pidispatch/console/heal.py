"""``pi-dispatch heal [--dry-run]``: one healing pass by hand (``router.heal``), and doctor's ``heal`` check.

The pass is the router's own, under the same lease: while a router's pass runs, this one reads nothing
and says so. ``--dry-run`` lists what would be asked for, asks nothing, writes nothing to Redis and takes
no lease. Exit 0 when every log was read to the window, 1 when one was not (the reason is printed), 2 for
a configuration that names no log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
from collections.abc import Mapping, Sequence

import msgspec

from pidispatch.common.connect import unreachable
from pidispatch.common.healsettings import HealSettings
from pidispatch.common.settings import Settings
from pidispatch.common.table import aligned
from pidispatch.console import diagnosis as dx
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.github import FORGE
from pidispatch.forges.github.deliveries import LogSource
from pidispatch.router.heal import HealReport

CHECK = "heal"
NO_LOG = ("no delivery log is configured: set GITHUB_AUTH_SOURCE=app (the App's log) or "
          "GITHUB_HEAL_HOOKS=owner/repo:hook_id (repository webhooks' logs)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "heal", help=f"ask {FORGE.display} to redeliver what it failed to bring (one pass)",
        description=f"Read {FORGE.display}'s delivery logs (the App's, and each GITHUB_HEAL_HOOKS hook's) "
        f"back to PD_HEAL_WINDOW_H hours, and ask {FORGE.display} once to redeliver each delivery of a "
        "stored event type the receiver never stored. Env: as the router's (REDIS_URL, PD_KEY_PREFIX, "
        "GITHUB_AUTH_SOURCE and its credentials, GITHUB_HEAL_HOOKS, PD_HEAL_WINDOW_H).",
    )
    p.add_argument("--dry-run", action="store_true",
                   help="list what would be asked for; ask nothing, write nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=heal_command)


def holder_name(env: Mapping[str, str] | None = None) -> str:
    """The lease's holder for a pass by hand: ``cli-<host>-<pid>`` (a router's is its consumer name)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "", socket.gethostname())[:40] or "localhost"
    return f"cli-{host}-{os.getpid()}"


async def heal_command(args: argparse.Namespace) -> int:
    from redis.exceptions import AuthenticationError, RedisError

    from pidispatch.common.errors import ConfigError, InfraError
    from pidispatch.common.keys import Keys
    from pidispatch.common.redis import auth_refused, redis_for
    from pidispatch.common.runtime import now_ms
    from pidispatch.common.settings import load_settings
    from pidispatch.forges.config import load_forge_config
    from pidispatch.forges.github.auth import GithubAuth
    from pidispatch.forges.github.config import block_of
    from pidispatch.forges.github.deliveries import DeliveryLog, sources_of
    from pidispatch.forges.http import create_http
    from pidispatch.router.heal import Healer

    settings, config = load_settings(), load_forge_config()
    sources = sources_of(block_of(config))
    if not sources:
        raise ConfigError(NO_LOG)
    http, redis = create_http(), redis_for(settings)
    try:
        log = DeliveryLog(http, GithubAuth(config, http))
        healer = Healer(redis, Keys(settings.key_prefix), log, sources, settings.heal.window_ms, now_ms)
        report = await healer.run_pass(holder_name(), asyncio.Event(), dry_run=args.dry_run)
    except AuthenticationError:
        raise auth_refused(settings.redis_url) from None
    except (RedisError, OSError) as exc:
        raise unreachable(settings, type(exc).__name__, "the pass stopped") from None
    finally:
        await redis.aclose()
        await http.close()
    if report.lease is not None:
        raise InfraError(f"another heal pass is running ({report.lease}); nothing was read: run it again "
                         "once that one ends")
    print(json.dumps(report_json(report)) if args.json else render(report))
    return 1 if any(part.error for part in report.sources) else 0


def report_json(report: HealReport) -> dict[str, object]:
    """Pure: ``{"dryRun", "windowHours", "asked", "sources": [...], "deliveries": [...]}``."""
    return {
        "dryRun": report.dry_run, "windowHours": report.window_h, "asked": report.asked,
        "sources": [msgspec.to_builtins(part) for part in report.sources],
        "deliveries": [msgspec.to_builtins(row) for row in report.rows],
    }


def render(report: HealReport) -> str:
    """Pure: one line per log, then one row per delivery asked for (would be, with ``--dry-run``)."""
    verb = "would ask" if report.dry_run else "asked"
    lines = []
    for p in report.sources:
        line = (f"{p.source}: {p.read} attempts in the last {report.window_h} h, {p.missing} never stored, "
                f"{verb} {p.asked}, asked before {p.before}")
        lines.append(line + (f", refused by {FORGE.display} {p.gone}" if p.gone else "")
                     + (f"; stopped: {p.error}" if p.error else ""))
    if report.rows:
        rows = [(r.source, r.guid, r.event + (f"/{r.action}" if r.action else ""), r.delivered_at,
                 str(r.status_code)) for r in report.rows]
        lines += ["", aligned([("SOURCE", "DELIVERY", "EVENT", "DELIVERED", "STATUS"), *rows])]
    return "\n".join(lines)


# ---- doctor ---------------------------------------------------------------------------------------


async def probe_logs(
    config: ForgeConfig, timeout_s: float, sources: Sequence[LogSource] | None = None
) -> dict[str, str | None]:
    """Each configured log's first page, read once: None where it was read, else why not (a short
    token: ``credentials``, ``status-404``, ``rate-limited``, ``did not answer within 5 s``)."""
    from pidispatch.forges.github.auth import GithubAuth
    from pidispatch.forges.github.config import block_of
    from pidispatch.forges.github.deliveries import DeliveryLog, LogUnread, sources_of
    from pidispatch.forges.http import create_http

    block = block_of(config)
    sources = sources_of(block) if sources is None else sources
    if not sources:
        return {}
    http = create_http()
    try:
        log = DeliveryLog(http, GithubAuth(config, http))

        async def one(source: LogSource) -> str | None:
            try:
                async with asyncio.timeout(timeout_s):
                    await log.page(source, None)
            except TimeoutError:
                return f"did not answer within {timeout_s:g} s"
            except LogUnread as exc:
                return exc.reason
            return None

        found = await asyncio.gather(*(one(s) for s in sources))
        return {s.name: error for s, error in zip(sources, found, strict=True)}
    finally:
        await http.close()


def heal_check(heal: HealSettings, probed: Mapping[str, str | None], refused: str | None = None) -> dx.Check:
    """Pure: whether the credentials can read every delivery log healing reads. A log that cannot be read
    fails while the router heals (``PD_HEAL_INTERVAL_S``) and warns otherwise (only ``pi-dispatch heal``
    would miss it); no log at all is fine while healing is off."""
    on = heal.interval_s is not None
    mode = f"every {heal.interval_s} s, {heal.window_h} h back" if on else "off (PD_HEAL_INTERVAL_S unset)"
    if refused is not None:
        return dx.skipped(CHECK, refused, "fix the config check first")
    if not probed:
        if on:
            return dx.Check(CHECK, dx.FAIL, "PD_HEAL_INTERVAL_S is set but no delivery log is configured "
                            "(the router refuses to start)", NO_LOG)
        return dx.ok(CHECK, f"healing {mode}; no delivery log configured")
    failed = {name: error for name, error in probed.items() if error is not None}
    if not failed:
        return dx.ok(CHECK, f"healing {mode}; delivery log readable: {', '.join(probed)}")
    finding = "cannot read " + ", ".join(f"{name} ({error})" for name, error in failed.items())
    fix = ("give the credentials read access to the hook's deliveries (a token with admin:repo_hook, or an "
           "App with the Webhooks permission), or correct GITHUB_HEAL_HOOKS; the App's log needs "
           "GITHUB_APP_ID and its key")
    return dx.Check(CHECK, dx.FAIL if on else dx.WARN, f"healing {mode}; {finding}", fix)


async def doctor_check(
    settings: Settings, config: ForgeConfig, timeout_s: float, errors: Mapping[str, str] | None = None,
    forge_errors: Mapping[str, str] | None = None,
) -> dx.Check:
    """doctor's ``heal`` row: ``probe_logs`` then ``heal_check``; skipped when the settings' ``heal`` group
    or the forge's block was refused (``load_settings_by_part`` / ``load_forge_config_by_forge`` errors)."""
    if errors and "heal" in errors:
        return heal_check(settings.heal, {}, "PD_HEAL_INTERVAL_S or PD_HEAL_WINDOW_H refused (config)")
    if forge_errors and FORGE.name in forge_errors:
        return heal_check(settings.heal, {}, f"a {FORGE.display} variable is refused (config)")
    return heal_check(settings.heal, await probe_logs(config, timeout_s))
