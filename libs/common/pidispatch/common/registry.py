"""The host registry: what each host can serve, who is alive, and which host stream a job belongs on.

Routing is decided at enqueue, never by pick-and-put-back: a job that names a secret profile or a wait
profile can only run where that profile is declared, and the router is the one place that sees every
job before a worker does. Everything here fails open onto the shared stream ``pd:jobs``, which is where
the job would have gone without a registry: the worst a bad read can do is fail to improve on it.

Rows are written by other processes, so every field is re-validated on read: a peer decides nothing
about where money-spending work goes beyond what its names and numbers say.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Literal, Protocol

import msgspec
from redis.exceptions import RedisError

from pidispatch.common.configsyntax import WORKER_NAME_RE
from pidispatch.common.health import Health
from pidispatch.common.keys import HOSTS_CACHE_TTL_MS, REGISTRY_READ_TIMEOUT_S, ROUTE_FRESH_MS, Keys
from pidispatch.common.log import get_logger
from pidispatch.common.models import Job, decode_fields, text
from pidispatch.common.redis import Redis, bounded
from pidispatch.common.runtime import EpochMsClock
from pidispatch.common.scripts import HOST_PRUNE

# The name charset excludes ',' (so a token list joins unambiguously) and ':' (so a token splits at
# its first colon). Always used with fullmatch: '$' alone would accept a trailing newline.
TOKEN_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
CAP_SECRET = "s"
CAP_WAIT = "w"
_CLASSES = (CAP_SECRET, CAP_WAIT)


_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
_DRIVE_RE = re.compile(r"^[A-Za-z]:[\\/]")
_INT_RE = re.compile(r"^[0-9]{1,16}$")
# Longest free-text value kept from a peer's row (version, tz, image): enough for a pinned digest.
_TEXT_MAX = 200
_DIGEST_RE = re.compile(r"[0-9a-f]{8,64}")

class RegistryUnreachable(Exception):
    """The registry could not be read: never the same thing as "no hosts"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# A row's ``jobImage``: did the worker find its PI_JOB_IMAGE at start (``status`` names hosts without it).
JOB_IMAGE_FIELD = "jobImage"
# "off" when the host runs its jobs with PI_EGRESS=0 (on the bridge, unfiltered); status names such hosts.
EGRESS_FIELD = "egress"
IMAGE_PRESENT, IMAGE_MISSING = "present", "missing"


class HostRow(msgspec.Struct, frozen=True, kw_only=True):
    """One host's row, as re-validated by the reader. ``stale_ms`` is None when the beat is undatable."""

    name: str
    beat_at: int | None = None
    started_at: int | None = None
    version: str = ""
    routes: bool = False
    caps: frozenset[str] = frozenset()
    concurrency: int | None = None
    running: int | None = None
    tz: str = ""
    image: str = ""
    egress: str = ""  # "on", "off" (PI_EGRESS=0), or "" from a worker that predates the field
    # The cron schedules the host serves and how many; the fingerprint of those it wants (with its zone)
    # and each wanted one's definition digest, which the fleet gate compares.
    cron: frozenset[str] = frozenset()
    fp_cron: str = ""
    cron_count: int | None = None
    cron_sigs: dict[str, str] = msgspec.field(default_factory=dict)
    stale_ms: int | None = None


# ---- capability tokens ---------------------------------------------------------------------------


def _token(cls: str, name: object) -> str | None:
    return f"{cls}:{name}" if isinstance(name, str) and TOKEN_NAME_RE.fullmatch(name) else None


def capability_tokens(secret_profiles: Iterable[str], wait_profiles: Iterable[str]) -> list[str]:
    """This host's tokens from its profile NAMES (never the resolver paths), sorted so the published
    value is stable from beat to beat."""
    out = {_token(CAP_SECRET, n) for n in secret_profiles} | {_token(CAP_WAIT, n) for n in wait_profiles}
    return sorted(t for t in out if t is not None)


def parse_caps(text: str | None) -> frozenset[str]:
    """A peer's ``caps`` value, re-validated: unknown classes, bad names and empty halves are dropped."""
    out = set()
    for part in (text or "").split(","):
        cls, sep, name = part.partition(":")
        if sep and cls in _CLASSES and TOKEN_NAME_RE.fullmatch(name):
            out.add(part)
    return frozenset(out)


def job_needs(job: Job) -> list[str]:
    """The tokens a job needs: ``s:<secretsProfile>`` and ``w:<profile>`` per wait condition.

    A job with ``secrets`` but no ``secretsProfile`` resolves through the worker's ``default`` profile,
    yet needs nothing here: only an explicit ``secretsProfile`` is a routing need, so such a job stays
    on the shared stream and a host without ``default`` refuses it before spend.
    """
    needs = {_token(CAP_SECRET, job.secrets_profile)} if job.secrets_profile is not None else set()
    for condition in job.wait_for or ():
        if isinstance(condition, Mapping) and "profile" in condition:
            needs.add(_token(CAP_WAIT, condition["profile"]))
    return sorted(n for n in needs if n is not None)


def path_shaped(value: str) -> bool:
    """A value that looks like a filesystem path: it would tell every reader of Redis a host's layout."""
    return value.startswith(("/", "\\")) or "\\" in value or bool(_DRIVE_RE.match(value))


# ---- rows ----------------------------------------------------------------------------------------


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and _INT_RE.fullmatch(value) else None


def _text(value: str | None) -> str:
    # A path-shaped value is refused at write; a peer that wrote one anyway is not echoed.
    if not value or path_shaped(value):
        return ""
    return value[:_TEXT_MAX]


def parse_cron_sigs(value: str | None) -> dict[str, str]:
    """``id=digest,...`` -> {id: digest}; a malformed pair is dropped, not guessed at."""
    pairs = (item.partition("=") for item in (value or "").split(","))
    return {i: d for i, _, d in pairs if TOKEN_NAME_RE.fullmatch(i) and _DIGEST_RE.fullmatch(d)}


def valid_host_name(name: str) -> bool:
    return bool(WORKER_NAME_RE.fullmatch(name)) and not name.endswith((".json", ".log"))


def parse_row(fields: Mapping[str, str], now_ms: int) -> HostRow | None:
    """A row as text fields -> HostRow, or None when its name is not a valid worker name."""
    name = fields.get("name", "")
    if not valid_host_name(name):
        return None
    beat_at = _int(fields.get("beatAt"))
    return HostRow(
        name=name,
        beat_at=beat_at,
        started_at=_int(fields.get("startedAt")),
        version=_text(fields.get("version")),
        routes=fields.get("routes") == "true",
        caps=parse_caps(fields.get("caps")),
        concurrency=_int(fields.get("concurrency")),
        running=_int(fields.get("running")),
        tz=_text(fields.get("tz")),
        image=_text(fields.get("image")),
        egress=egress if (egress := fields.get(EGRESS_FIELD, "")) in ("on", "off") else "",
        cron=frozenset(i for i in (fields.get("cron") or "").split(",") if TOKEN_NAME_RE.fullmatch(i)),
        fp_cron=_text(fields.get("fpCron")),
        cron_count=_int(fields.get("cronCount")),
        cron_sigs=parse_cron_sigs(fields.get("cronSigs")),
        stale_ms=max(0, now_ms - beat_at) if beat_at is not None else None,
    )


async def _read(redis: Redis, keys: Keys, now_ms: int, known: Sequence[str]) -> list[HostRow]:
    # One round trip when the fleet is what it was (the index and the rows of ``known`` together); a
    # second only for members that joined since.
    async with redis.pipeline(transaction=False) as pipe:
        pipe.smembers(keys.hosts)
        for member in known:
            pipe.hgetall(keys.host(member))
        index, *raws = await pipe.execute()
    members = sorted({text(m) for m in index})
    by_member = dict(zip(known, raws, strict=True))
    if joined := [m for m in members if m not in by_member]:
        async with redis.pipeline(transaction=False) as pipe:
            for member in joined:
                pipe.hgetall(keys.host(member))
            by_member.update(zip(joined, await pipe.execute(), strict=True))
    rows, gone = [], []
    for member in members:
        raw = by_member[member]
        if not raw:
            gone.append(member)  # the row expired: the set is an index that readers keep tidy
            continue
        fields = decode_fields(raw)
        row = parse_row({"name": member, **fields}, now_ms)
        # A row that names another host than its key is not trusted; one bad row skips only itself.
        if row is not None and row.name == member:
            rows.append(row)
    if gone:
        async with redis.pipeline(transaction=False) as pipe:
            for member in gone:
                HOST_PRUNE.in_pipeline(pipe, [keys.host(member), keys.hosts], [member])
            await pipe.execute()
    return rows


async def read_live_hosts(
    redis: Redis, keys: Keys, now_ms: int, *, timeout_s: float = REGISTRY_READ_TIMEOUT_S,
    known: Sequence[str] = (),
) -> list[HostRow]:
    """Every host with a row, sorted by name; expired members are pruned from ``keys.hosts``. ``known``:
    the members of the last read, whose rows are fetched with the index in one round trip.

    Raises ``RegistryUnreachable`` when Redis does not answer within ``timeout_s``: an empty list
    always means "nobody is registered", never "could not look".
    """
    try:
        return await bounded(_read(redis, keys, now_ms, known), timeout_s)
    except TimeoutError:
        raise RegistryUnreachable("timeout") from None
    except (RedisError, OSError) as exc:
        raise RegistryUnreachable(type(exc).__name__) from None


# ---- routing -------------------------------------------------------------------------------------


def fnv1a32(text: str) -> int:
    """FNV-1a 32-bit over UTF-16 code units (JavaScript's ``charCodeAt``), not UTF-8 bytes."""
    data = text.encode("utf-16-le", errors="surrogatepass")
    h = _FNV_OFFSET
    for i in range(0, len(data), 2):
        h = ((h ^ (data[i] | data[i + 1] << 8)) * _FNV_PRIME) & 0xFFFFFFFF
    return h


class Fleet:
    """One registry snapshot. Each capability set's capable hosts are found once per snapshot, so routing
    a job is a dictionary lookup and one FNV-1a, whatever the fleet's size."""

    __slots__ = ("_choices", "hosts")

    def __init__(self, hosts: Sequence[HostRow]) -> None:
        self.hosts = tuple(hosts)
        self._choices: dict[tuple[frozenset[str], str | None], tuple[str, ...]] = {}

    def route(self, needs: Sequence[str], job_id: str, *, exclude: str | None = None) -> str | None:
        """The host whose stream this job belongs on, or None for the shared stream.

        Four abstentions, each landing on the shared stream: the job needs nothing host-specific; every
        live host can serve it (the shared stream load-balances); no live host can (the worker's
        pre-spend refusal names what to fix); no capable host drains a stream of its own. Otherwise
        FNV-1a of the job id picks among the capable routable hosts: a redelivery lands the same way
        and replicas (whose ids differ) spread.
        """
        if not needs:
            return None
        key = (frozenset(needs), exclude)
        names = self._choices.get(key)
        if names is None:
            names = self._choices[key] = _routable(self.hosts, key[0], exclude)
        return names[fnv1a32(job_id) % len(names)] if names else None


def _routable(hosts: Sequence[HostRow], wanted: frozenset[str], exclude: str | None) -> tuple[str, ...]:
    """The sorted names a job needing ``wanted`` may be routed to; empty for the shared stream."""
    live = [h for h in hosts if h.name != exclude and is_live(h)]
    capable = [h for h in live if wanted <= h.caps]
    if not capable or len(capable) == len(live):
        return ()
    return tuple(sorted({h.name for h in capable if h.routes}))


def route_job(
    needs: Sequence[str], hosts: Sequence[HostRow], job_id: str, *, exclude: str | None = None
) -> str | None:
    """``Fleet(hosts).route``: for a caller that routes one job against a list it just read."""
    return Fleet(hosts).route(needs, job_id, exclude=exclude)


def is_live(host: HostRow) -> bool:
    """Fresh enough to route to: a beat within three intervals; a row that cannot be dated is not alive."""
    return host.stale_ms is not None and host.stale_ms <= ROUTE_FRESH_MS


def pick_host(names: Iterable[str], job_id: str) -> str | None:
    """FNV-1a of the job id over the sorted names: the same job always lands on the same host."""
    ordered = sorted(set(names))
    return ordered[fnv1a32(job_id) % len(ordered)] if ordered else None


async def host_streams(redis: Redis, keys: Keys) -> dict[str, str]:
    """Every host stream by host name: found in the keyspace, plus those of registered hosts."""
    base = keys.host_jobs("")
    found: dict[str, str] = {}
    async for key in redis.scan_iter(match=keys.host_jobs("*"), _type="stream", count=500):
        name = text(key)[len(base):]
        if valid_host_name(name):
            found[name] = text(key)
    for member in await redis.smembers(keys.hosts):
        name = text(member)
        if valid_host_name(name):
            found.setdefault(name, keys.host_jobs(name))
    return found


# ---- the router's cache --------------------------------------------------------------------------


def refresh_due(read_at: int | None, now_ms: int, ttl_ms: int) -> Literal["wait", "background"] | None:
    """Pure: ``"wait"`` for a read before routing (no snapshot, or one ``ttl_ms`` old), ``"background"``
    for a re-read while the snapshot is still used (half its age: steady traffic never waits), else None."""
    if read_at is None or now_ms - read_at >= ttl_ms:
        return "wait"
    if now_ms - read_at >= ttl_ms // 2:
        return "background"
    return None


class HostReader(Protocol):
    def __call__(
        self, redis: Redis, keys: Keys, now_ms: int, *, timeout_s: float, known: Sequence[str]
    ) -> Awaitable[list[HostRow]]: ...


class HostCache:
    """The registry as the router sees it: a job is never routed on a snapshot ``ttl_ms`` old or older.
    Under steady traffic the snapshot is re-read in the background from half its age (one read in
    flight), so routing never waits; the first call, and the first after an idle spell, waits for the
    read instead (bounded by ``timeout_s``), since a stale snapshot may name a host long gone.

    A failed read is a snapshot with no host, so every job needing a capability goes to the shared
    stream (where a worker that cannot serve it forwards it); each such fall-back is counted and logged
    at most once per window, with the count so far.
    """

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        clock: EpochMsClock,
        *,
        ttl_ms: int = HOSTS_CACHE_TTL_MS,
        timeout_s: float = REGISTRY_READ_TIMEOUT_S,
        read: HostReader = read_live_hosts,
    ) -> None:
        self.redis, self.keys, self.clock = redis, keys, clock
        self.ttl_ms, self.timeout_s, self.read = ttl_ms, timeout_s, read
        self.health = Health("host_registry_unreachable", "host_registry_restored")
        self.fallbacks = 0  # jobs that needed a host but went to the shared stream: the registry was unread
        self._fleet = Fleet(())
        self._unread = False
        self._at: int | None = None
        self._logged_at: int | None = None
        self._inflight: asyncio.Task[None] | None = None

    async def fleet(self) -> Fleet:
        """A snapshot younger than ``ttl_ms``: read now when there is none or it has expired; from half
        its age a background re-read starts and this one is used meanwhile."""
        due = refresh_due(self._at, self.clock(), self.ttl_ms)
        if due == "wait":
            # Shielded: a cancelled caller must not cancel the read other callers share.
            await asyncio.shield(self._refreshing())
        elif due == "background":
            self._refreshing()
        return self._fleet

    async def route(self, needs: Sequence[str], job_id: str) -> str | None:
        """The host for a job needing ``needs``, or None for the shared stream."""
        fleet = await self.fleet()
        if needs and self._unread:
            self.fallbacks += 1
            now = self.clock()
            if self._logged_at is None or now - self._logged_at >= self.ttl_ms:
                self._logged_at = now
                get_logger().warning("host_registry_fallback", fallbacks=self.fallbacks)
        return fleet.route(needs, job_id)

    def _refreshing(self) -> asyncio.Task[None]:
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._refresh())
        return self._inflight

    async def _refresh(self) -> None:
        # The snapshot is as old as the moment it was asked for, not the moment it arrived.
        started = self.clock()
        try:
            try:
                known = [h.name for h in self._fleet.hosts]
                hosts = await self.read(self.redis, self.keys, started, timeout_s=self.timeout_s, known=known)
                self._unread = False
                self.health.ok()
            except RegistryUnreachable as exc:
                hosts, self._unread = [], True
                self.health.failed(reason=exc.reason)
            except Exception as exc:  # a routing hint fails open onto the shared stream, whatever broke
                hosts, self._unread = [], True
                self.health.failed(reason=type(exc).__name__)
            self._fleet, self._at = Fleet(hosts), started
        finally:
            self._inflight = None  # even when cancelled, so the next caller starts a fresh read
