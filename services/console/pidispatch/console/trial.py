"""``pi-dispatch triggers test FILE``: what an edit of ``triggers.json`` would change, tried on the
deliveries ``pd:events`` still keeps before the router reloads it.

FILE is validated as the router validates a file at start (the loader, then the forge credentials its
rules need and the harness's own account on each forge they name), then each kept delivery is re-decided
under FILE and under the file in force through the router's own path (``pipeline.planned``, the forge's
lookup, ``pipeline.resume``; ``explain`` rests on the same derivation) and set against the decision the
router recorded (``triggers.comparison``). Redis is only read. Each forge fact is asked once a run: the
harness's account once per forge, each authority question once, however many deliveries and both files
ask it. ``--offline`` asks no forge and marks the decisions that needed one.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
from collections.abc import Awaitable, Callable, Collection

import aiohttp
import msgspec

from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.keys import Keys
from pidispatch.common.models import Event
from pidispatch.common.redis import Redis
from pidispatch.common.settings import load_settings
from pidispatch.common.streams import xrevrange
from pidispatch.common.table import aligned
from pidispatch.console.deliveries import open_redis
from pidispatch.forges import FORGES, find, pipeline
from pidispatch.forges.authority import Authority, CannotAnswer
from pidispatch.forges.config import ForgeConfig, load_forge_config
from pidispatch.forges.http import create_http
from pidispatch.forges.identity import IdentityCalls, IdentityTransient, explicit_self_ids, require_knowable
from pidispatch.forges.route import TokenSources, route_of, token_sources
from pidispatch.triggers import comparison, decisions
from pidispatch.triggers.comparison import Comparison, Outcome, Row
from pidispatch.triggers.decision import Ask, Fire, Subject
from pidispatch.triggers.decisions import Decided
from pidispatch.triggers.explain import safe_word
from pidispatch.triggers.loader import load_triggers
from pidispatch.triggers.lookup import Authorized, Indeterminate, Question, SelfIds, Verdict
from pidispatch.triggers.rules import Rules
from pidispatch.triggers.subsets import MalformedPayload

PAGE = 500  # entries read per XREVRANGE
CHUNK = 100  # deliveries compared together: their decisions are read, their questions asked, at once
LOOKUPS_AT_ONCE = 4
READS_AT_ONCE = 8
IDENTITY_TIMEOUT_S = 15.0

Asker = Callable[[Question], Awaitable[Verdict]]


class Facts:
    """The forge's answers for one run, each question asked once (the two files and every delivery by the
    same actor share it); an unanswered question is not asked again either. ``ask`` None: offline."""

    def __init__(self, ask: Asker | None, at_once: int = LOOKUPS_AT_ONCE) -> None:
        self._ask = ask
        self._answers: dict[Question, asyncio.Task[Verdict]] = {}
        self._gate = asyncio.Semaphore(at_once)

    @property
    def offline(self) -> bool:
        return self._ask is None

    @property
    def asked(self) -> int:
        return len(self._answers)

    async def verdict(self, question: Question) -> Verdict | None:
        if self._ask is None:
            return None
        task = self._answers.get(question)
        if task is None:
            task = self._answers[question] = asyncio.ensure_future(self._one(self._ask, question))
        return await task

    async def _one(self, ask: Asker, question: Question) -> Verdict:
        async with self._gate:
            return await ask(question)


def forge_asker(authority: Authority) -> Asker:
    """The router's lookup (the forge's own ``authorize`` through ``Authority``'s bounded HTTP helpers),
    without the router's log line: this command reports an unanswered question in its output."""

    async def ask(question: Question) -> Verdict:
        forge = find(getattr(question, "forge", ""))
        if forge is None:
            raise TypeError(f"not a lookup question: {type(question).__name__}")
        try:
            return Authorized(await route_of(forge).authorize(question, authority) is True)
        except CannotAnswer as exc:
            return Indeterminate(exc.reason)

    return ask


async def redecide(event: Event, rules: Rules, self_ids: SelfIds, facts: Facts) -> tuple[Outcome, Subject]:
    """One stored event decided as the router decides it, asking ``facts`` what the forge would say."""
    try:
        decision, about = pipeline.planned(event, rules, self_ids)
        if isinstance(decision, Ask):
            verdict = await facts.verdict(decision.question)
            if verdict is None:
                if_allowed = pipeline.resume(event, rules, self_ids, True)
                return (comparison.asking(if_allowed) if isinstance(if_allowed, Fire)
                        else comparison.decided(if_allowed)), about
            if isinstance(verdict, Indeterminate):
                return comparison.unanswered(verdict.reason), about
            return comparison.decided(pipeline.resume(event, rules, self_ids, verdict.value is True)), about
    except MalformedPayload:
        return comparison.malformed(), pipeline.subject_of(event.event)
    return comparison.decided(decision), about


async def latest(redis: Redis, keys: Keys, last: int | None) -> list[tuple[str, dict[str, str]]]:
    """The newest entry of each of the ``last`` newest deliveries (every one kept when None), newest
    first: a replay carries its delivery's id and is the same delivery."""
    seen: set[tuple[str, str]] = set()
    found: list[tuple[str, dict[str, str]]] = []
    top = "+"
    while True:
        page = await xrevrange(redis, keys.events, max=top, count=PAGE)
        for entry, fields in page:
            who = (fields.get("forge", "?"), fields.get("delivery", "?"))
            if who not in seen:
                seen.add(who)
                found.append((entry, fields))
                if last is not None and len(found) >= last:
                    return found
        if len(page) < PAGE:
            return found
        top = "(" + page[-1][0]


class Trial:
    """One run: the two files, the identities and the forge's answers the re-runs share."""

    def __init__(self, candidate: Rules, in_force: Rules, self_ids: SelfIds, facts: Facts) -> None:
        self.candidate, self.in_force, self.self_ids, self.facts = candidate, in_force, self_ids, facts
        named = {f.name for f in FORGES if candidate.group(f.name).has_rules()
                 or in_force.group(f.name).has_rules()}
        # Without the harness's own id there, the bot-loop guard cannot drop its own events.
        self.unknown = frozenset(name for name in named if self_ids.of(name) is None)

    async def row(self, fields: dict[str, str], stored: Decided | None) -> tuple[Row, bool]:
        forge, delivery = fields.get("forge", "?"), fields.get("delivery", "?")
        try:
            event = Event.from_fields(fields)
            if not event.delivery:
                raise ValueError("empty delivery id")
        except ValueError:  # the router parks such an entry at once, whatever the file
            about, now = pipeline.subject_of(fields.get("event")), comparison.malformed()
            would = now
        else:
            (now, about), (would, _) = await asyncio.gather(
                redecide(event, self.in_force, self.self_ids, self.facts),
                redecide(event, self.candidate, self.self_ids, self.facts),
            )
        if forge in self.unknown:
            now, would = comparison.needing_identity(now), comparison.needing_identity(would)
        return comparison.compared(delivery, safe_word(forge) or "?", about.event, about.action, about.target,
                                   stored, now, would)

    async def run(self, redis: Redis, keys: Keys, last: int | None) -> Comparison:
        entries = await latest(redis, keys, last)
        reads = asyncio.Semaphore(READS_AT_ONCE)  # each read holds a pooled connection while it waits

        async def decision(entry: str, f: dict[str, str]) -> Decided | None:
            async with reads:
                return await decisions.read(redis, keys, f.get("forge", "?"), f.get("delivery", "?"), entry)

        results: list[tuple[Row, bool]] = []
        for start in range(0, len(entries), CHUNK):
            chunk = entries[start:start + CHUNK]
            stored = await asyncio.gather(*(decision(entry, f) for entry, f in chunk))
            pairs = zip(chunk, stored, strict=True)
            results += await asyncio.gather(*(self.row(fields, s) for (_, fields), s in pairs))
        return comparison.comparison(results, offline=self.facts.offline)


def router_checks(rules: Rules, config: ForgeConfig) -> None:
    """The router's own refusals at start beyond the loader (exit 2): credentials for rules that need a
    lookup, the harness's own account on every forge the rules name."""
    from pidispatch.router.commands import require_credentials  # loaded by this verb alone

    require_credentials(rules, config)
    require_knowable(rules, config)


async def own_ids(config: ForgeConfig, sources: TokenSources, http: aiohttp.ClientSession,
                  named: Collection[str]) -> SelfIds:
    """The harness's account on each forge in ``named``: as set, else asked once (as the router asks at
    start, without its retries: a forge that cannot answer now fails the run, exit 1)."""
    ids = explicit_self_ids(config)
    calls = IdentityCalls(config, sources, http)
    for forge in FORGES:
        if forge.name not in named or ids.of(forge.name) is not None:
            continue
        if forge.name not in config.configured_forges():
            continue
        route = route_of(forge)
        try:
            value = await asyncio.wait_for(route.resolve_self(calls), IDENTITY_TIMEOUT_S)
        except (TimeoutError, IdentityTransient) as exc:
            reason = exc.reason if isinstance(exc, IdentityTransient) else "timeout"
            raise InfraError(f"could not resolve the {forge.name} identity ({reason}); try again, or pass "
                             "--offline to ask no forge") from None
        ids = route.with_self(ids, value)
    return ids


async def _load(path: str, cron_floor_s: int) -> Rules:
    return await asyncio.to_thread(functools.partial(load_triggers, path, cron_floor_s=cron_floor_s))


async def trial_command(args: argparse.Namespace) -> int:
    """Every refusal first (FILE, then the file in force: exit 2), then Redis (exit 1 when it does not
    answer), then the run; the output is the whole answer, printed once."""
    settings = load_settings()
    config = load_forge_config()
    candidate = await _load(args.file, settings.cron_min_interval_s)
    router_checks(candidate, config)
    in_force = await _load(settings.triggers_file, settings.cron_min_interval_s)
    named = [f.name for f in FORGES
             if candidate.group(f.name).has_rules() or in_force.group(f.name).has_rules()]
    redis = await open_redis(settings)
    http = create_http()
    try:
        if args.offline:
            self_ids, facts = explicit_self_ids(config), Facts(None)
        else:
            sources = token_sources(config, http)  # one credential object per forge: a token minted once
            self_ids = await own_ids(config, sources, http, named)
            facts = Facts(forge_asker(Authority(config, sources, http)))
        result = await Trial(candidate, in_force, self_ids, facts).run(
            redis, Keys(settings.key_prefix), args.last
        )
    finally:
        await http.close()
        await redis.aclose()
    if args.json:
        sys.stdout.write(msgspec.json.encode(result.as_json()).decode() + "\n")
    else:
        print("\n".join(lines(result, os.path.basename(args.file) or args.file)))
    return 0


def lines(result: Comparison, name: str) -> list[str]:
    out = [comparison.summary(result)]
    if result.changed:
        header = ("DELIVERY", "FORGE", "EVENT", "TARGET", f"STORED -> UNDER {name}")
        rows = [(d, f, e, t, f"{s} -> {w}") for d, f, e, t, s, w in comparison.table_rows(result.changed)]
        out.append(aligned([header, *rows]))
    return out


def _count(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError("accepted: a whole number of 1 or more")
    return int(value)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    triggers = sub.add_parser(
        "triggers", help="try a triggers.json edit on the stored deliveries before it goes live",
        description="Work with a triggers file before the router reloads it.",
    )
    verbs = triggers.add_subparsers(dest="triggers_command", metavar="VERB", required=True)
    test = verbs.add_parser(
        "test", help="what FILE would change for the deliveries Redis keeps (writes nothing)",
        description="Validate FILE as the router would (exit 2 when refused), then re-decide the stored "
        "deliveries under FILE and under PI_TRIGGERS_FILE and list each one whose outcome would change: "
        "stored decision -> decision under FILE (rule index and flow, or drop reason). Writes nothing to "
        "Redis; asks each forge fact once (--offline: none).",
    )
    test.add_argument("file", metavar="FILE", help="the candidate triggers.json")
    test.add_argument("--last", type=_count, metavar="N",
                      help="only the N newest deliveries (default: every one pd:events keeps)")
    test.add_argument("--json", action="store_true", help="print one JSON object")
    test.add_argument("--offline", action="store_true",
                      help="ask no forge: decisions that need one are marked, not decided")
    test.set_defaults(func=trial_command)


def candidate_rules(raw: bytes, name: str, cron_floor_s: int) -> Rules:
    """An uploaded file through the loader's own text check (the status page's form). Raises the
    loader's ``ConfigError`` line."""
    from pidispatch.triggers.loader import parse_triggers

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"PI_TRIGGERS_FILE {name}: is not UTF-8; accepted: a UTF-8 JSON file") from None
    return parse_triggers(text, name, cron_floor_s=cron_floor_s)
