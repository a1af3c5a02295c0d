"""What ``pi-dispatch doctor`` concludes: facts in, one ``Check`` out, no I/O (``worker.doctor`` gathers).

Each check is ok, warn or fail with a one-line finding and, when not ok, the fix in one line. The facts
are plain values so every verdict can be tested without a Redis, a Docker daemon or a forge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

from pidispatch.common.unsupported import unknown_line
from pidispatch.worker.engine.preflight import ANY_UID, ImageFacts
from pidispatch.worker.limits.budget import OVER_BUDGET, SOFT_HOLD, window_state

OK, WARN, FAIL = "ok", "warn", "fail"
EXIT = {OK: 0, WARN: 1, FAIL: 2}
# Eviction policies that never drop a key: Redis refuses writes when full instead.
SAFE_POLICY = "noeviction"
CLOCK_WARN_S, CLOCK_FAIL_S = 2.0, 30.0


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    finding: str
    fix: str = ""

    def as_json(self) -> dict[str, str]:
        return asdict(self)


# The checks each service needs, for ``doctor --service`` in a container that runs one of them: a check of
# what another service needs (Docker in the router's container) would fail there for nothing.
SERVICES = frozenset({"receiver", "router", "worker"})
_COMMON = frozenset({"config", "variables", "dev", "redis", "streams", "topology"})
SCOPES: dict[str, frozenset[str]] = {
    "receiver": _COMMON | {"webhook-secrets"},
    "router": _COMMON | {"triggers", "forge", "heal", "hosts", "dead"},
    "worker": _COMMON | {"docker", "job-image", "egress", "model", "triggers", "forge", "budget", "clock",
                         "hosts", "dead"},
}


def in_scope(name: str, services: frozenset[str]) -> bool:
    """Pure: whether check ``name`` (``forge:<name>`` counts as ``forge``) concerns any of ``services``."""
    return any(name.split(":", maxsplit=1)[0] in SCOPES[s] for s in services)


def ok(name: str, finding: str) -> Check:
    return Check(name, OK, finding)


def skipped(name: str, cause: str, fix: str, status: str = FAIL) -> Check:
    """A check that could not run because an earlier one failed: reported, never left out."""
    return Check(name, status, f"skipped: {cause}", fix)


def exit_code(checks: Iterable[Check]) -> int:
    return max((EXIT[c.status] for c in checks), default=0)


def config_check(errors: Mapping[str, str]) -> Check:
    if not errors:
        return ok("config", "settings and forge configuration load")
    first = next(iter(errors.values()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return Check("config", FAIL, f"{first}{more}", "fix the variable named; the services exit 2 on it")


def variables_check(unknown: Sequence[tuple[str, str | None]]) -> Check:
    """Set variables under this project's or a forge's prefix that no process reads (a typo, mostly)."""
    if not unknown:
        return ok("variables", "every PI_, PD_ and forge variable set is one pi-dispatch reads")
    return Check("variables", WARN, unknown_line(list(unknown)),
                 "rename it to the variable meant, or unset it (docs/configuration.md lists them all)")


@dataclass(frozen=True)
class RedisFacts:
    """``CONFIG GET`` answers; None where CONFIG is disabled (managed Redis)."""

    appendonly: str | None
    save: str | None
    policy: str | None


def redis_check(error: str | None, facts: RedisFacts | None) -> Check:
    name = "redis"
    if error is not None:
        return Check(name, FAIL, error, "start Redis, or set REDIS_URL (and VALKEY_PASSWORD/REDIS_PASSWORD)")
    if facts is None or facts.policy is None:
        return Check(name, WARN, "answers PING; cannot read CONFIG (persistence, eviction unknown)",
                     "make sure it persists (appendonly yes) and has maxmemory-policy noeviction")
    if facts.policy != SAFE_POLICY:
        return Check(name, FAIL, f"maxmemory-policy {facts.policy}: it would evict streams and keys",
                     "CONFIG SET maxmemory-policy noeviction (and in redis.conf)")
    aof = facts.appendonly == "yes"
    rdb = bool((facts.save or "").strip())
    if not aof and not rdb:
        return Check(name, WARN, "no persistence (appendonly no, save empty): a restart loses every job",
                     "CONFIG SET appendonly yes (and in redis.conf)")
    return ok(name, f"answers; persistence {'AOF' if aof else 'RDB'}, maxmemory-policy {SAFE_POLICY}")


def streams_check(missing: Sequence[tuple[str, str]]) -> Check:
    """``missing``: (stream, group) pairs without their consumer group."""
    if not missing:
        return ok("streams", "consumer groups router and workers exist")
    named = ", ".join(f"{group} on {stream}" for stream, group in missing)
    return Check("streams", WARN, f"missing consumer group {named}",
                 "start the router and a worker once (each creates its group at start)")


def docker_check(error: str | None, driver: str | None) -> Check:
    if error is not None:
        return Check("docker", FAIL, error, "start the Docker daemon, or set DOCKER_HOST")
    if driver == "vfs":
        return Check("docker", WARN, "storage driver vfs: every container copies its whole image",
                     "use overlay2 (dockerd --storage-driver overlay2)")
    return ok("docker", f"answers; storage driver {driver or 'unknown'}")


def image_check(ref: str, facts: ImageFacts | None, forges: Sequence[str]) -> Check:
    """``facts`` None: the daemon does not have ``ref``. ``forges``: the configured forges."""
    name = "job-image"
    if facts is None:
        return Check(name, FAIL, f"{ref} is not on this Docker host",
                     "pi-dispatch job-image build (or set PI_JOB_IMAGE to an image you have)")
    allows = "every forge" if facts.forges is None else "forges " + ",".join(facts.forges)
    caps = ",".join(facts.capabilities) or "none"
    summary = f"{ref}: pi {facts.pi_version or '?'}, {allows}, capabilities {caps}"
    if ANY_UID not in facts.capabilities:
        return Check(name, FAIL, f"{summary}; lacks {ANY_UID}: every job would be refused",
                     "pi-dispatch job-image build (an image that runs as any uid)")
    excluded = [f for f in forges if facts.forges is not None and f not in facts.forges]
    if excluded:
        return Check(name, WARN, f"{summary}; refuses jobs of {','.join(excluded)}",
                     "rebuild the image for those forges: pi-dispatch job-image build")
    return ok(name, summary)


def egress_check(enabled: bool, image: str, present: bool | None, destinations: int) -> Check:
    """``present`` None: the daemon was not asked (egress off)."""
    if not enabled:
        return Check("egress", WARN, "off (PI_EGRESS=0): job containers reach the whole network",
                     "unset PI_EGRESS: each job then reaches only its allowlist, through the proxy")
    if not present:
        return Check("egress", FAIL, f"{image} is not on this Docker host: every job would be refused "
                     "egress-proxy-missing", "pi-dispatch egress-image build (or PI_EGRESS=0)")
    return ok("egress", f"on: jobs reach {destinations} destinations, through a proxy from {image}")


def disarmed_indexes(data: object) -> list[int]:
    """The indexes of entries whose ``on`` carries ``disarmed`` (spent one-shots) in a parsed file."""
    entries = data.get("triggers") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    return [i for i, e in enumerate(entries)
            if isinstance(e, dict) and isinstance(e.get("on"), dict) and "disarmed" in e["on"]]


def triggers_check(error: str | None, count: int, disarmed: Sequence[int]) -> Check:
    if error is not None:
        return Check("triggers", FAIL, error, "fix PI_TRIGGERS_FILE as the finding says")
    rules = f"{count} rule{'' if count == 1 else 's'}"
    if disarmed:
        listed = ", ".join(f"triggers[{i}]" for i in disarmed)
        return Check("triggers", WARN, f"{rules}; disarmed (spent one-shots): {listed}",
                     "remove the spent entries, or delete their on.disarmed to arm them again")
    return ok("triggers", f"{rules}, none disarmed")


@dataclass(frozen=True)
class ForgeProbe:
    """One real call with the forge's credentials: an error text, or a resolved identity and, where the
    forge reports them (a classic token's ``X-OAuth-Scopes`` header), the token's scopes."""

    error: str | None = None
    scopes: str | None = None


# A classic token needs one of these to read collaborators and comment on private repositories.
REPO_SCOPES = ("repo", "public_repo")


def forge_check(forge: str, probe: ForgeProbe, hint: str = "its credentials") -> Check:
    """``hint``: what an operator sets to give the forge credentials (``Forge.credentials_hint``)."""
    name = f"forge:{forge}"
    if probe.error is not None:
        return Check(name, FAIL, probe.error, f"check {hint}")
    if probe.scopes is None:
        return ok(name, "credentials accepted; identity resolved")
    scopes = [s.strip() for s in probe.scopes.split(",") if s.strip()]
    if not any(s in REPO_SCOPES for s in scopes):
        return Check(name, WARN, f"identity resolved; token scopes {','.join(scopes) or 'none'} lack repo",
                     "give the token the repo scope (or public_repo for public repositories)")
    return ok(name, f"identity resolved; token scopes {','.join(scopes)}")


def webhook_check(arms: Mapping[str, str | None]) -> Check:
    """``arms``: each forge with webhook rules -> None (its secret is set) or what is missing."""
    if not arms:
        return ok("webhook-secrets", "no webhook rules in triggers.json")
    missing = {f: why for f, why in arms.items() if why is not None}
    if missing:
        forge, why = next(iter(missing.items()))
        return Check("webhook-secrets", FAIL, f"{','.join(missing)} rules but no usable webhook arm: {why}",
                     f"set the {forge} webhook secret variables on the receiver")
    return ok("webhook-secrets", f"set for {','.join(arms)}")


def arms_check(served: Mapping[str, str | None]) -> Check:
    """A receiver with no triggers file to judge by (its own container): at least one forge's arm serves."""
    serving = [forge for forge, why in served.items() if why is None]
    if serving:
        return ok("webhook-secrets", f"serves {','.join(serving)}")
    refused = [why for why in served.values() if why is not None and why != "not set"]
    finding = refused[0] if refused else "no forge's webhook secret is set"
    return Check("webhook-secrets", FAIL, finding, "set WEBHOOK_SECRET (or another forge's) on the receiver")


@dataclass(frozen=True)
class WindowUse:
    name: str  # day, week, month, tokens
    used: int
    cap: int


def budget_check(windows: Sequence[WindowUse], soft_hold_pct: int | None) -> Check:
    """Warn when the next job would be held (soft hold) or refused (window full)."""
    shown = ", ".join(f"{w.name} {w.used}/{w.cap}" for w in windows)
    # The next job's reservation, as ``budget.reserve`` would judge it; the token cap refuses at the cap.
    states = [window_state(w.used + 1, w.cap, None if w.name == "tokens" else soft_hold_pct) for w in windows]
    full = [w for w, s in zip(windows, states, strict=True) if s == OVER_BUDGET]
    if full:
        return Check("budget", WARN, f"{shown}: {full[0].name} window full, jobs are refused",
                     f"wait for the window to turn, or raise its cap (PI_DAILY_CAP etc.); now {shown}")
    soft = [w for w, s in zip(windows, states, strict=True) if s == SOFT_HOLD]
    if soft:
        return Check("budget", WARN, f"{shown}: {soft[0].name} past PI_SOFT_HOLD_PCT={soft_hold_pct}",
                     "jobs are held until the window turns; raise the cap or PI_SOFT_HOLD_PCT")
    return ok("budget", shown)


def clock_check(skew_s: float) -> Check:
    finding = f"this host and Redis differ by {abs(skew_s):.2f} s"
    if abs(skew_s) > CLOCK_FAIL_S:
        return Check("clock", FAIL, finding, "run NTP (chrony, systemd-timesyncd) on both hosts")
    if abs(skew_s) > CLOCK_WARN_S:
        return Check("clock", WARN, finding, "run NTP (chrony, systemd-timesyncd) on both hosts")
    return ok("clock", finding)


@dataclass(frozen=True)
class HostLoad:
    name: str
    running: int | None
    concurrency: int | None
    caps: tuple[str, ...]


def hosts_check(hosts: Sequence[HostLoad]) -> Check:
    if not hosts:
        return Check("hosts", WARN, "no live worker: jobs queue and nothing runs them",
                     "start a worker: pi-dispatch worker")
    def row(h: HostLoad) -> str:
        load = f"{'?' if h.running is None else h.running}/{'?' if h.concurrency is None else h.concurrency}"
        return f"{h.name} {load}" + (f" [{','.join(h.caps)}]" if h.caps else "")

    rows = "; ".join(row(h) for h in hosts)
    return ok("hosts", f"{len(hosts)} live: {rows}")


def dead_check(count: int, stream: str) -> Check:
    if count == 0:
        return ok("dead", f"{stream} is empty")
    return Check("dead", WARN, f"{count} entries parked in {stream}",
                 f"inspect: redis-cli XRANGE {stream} - + ; then pi-dispatch replay <delivery>")


@dataclass(frozen=True)
class Topology:
    """How Redis is replicated, as the primary and the sentinels say (``console.topology`` reads it)."""

    role: str  # INFO replication's role on the server the services write to
    replicas: int  # replicas connected to it
    min_replicas: int | None  # min-replicas-to-write; None where CONFIG is disabled
    acks: int  # PD_REPLICA_ACKS
    sentinels: int | None = None  # sentinels watching the primary (this one included); None: none set
    sentinel_error: str | None = None


def topology_check(t: Topology) -> Check:
    """Warn wherever a failover could lose an acknowledged delivery or a container start."""
    name = "topology"
    if t.sentinel_error is not None:
        return Check(name, FAIL, f"sentinels: {t.sentinel_error}",
                     "check REDIS_SENTINELS and REDIS_SENTINEL_MASTER against sentinel.conf")
    if t.role != "master":
        return Check(name, FAIL, f"the server written to is a {t.role}: it refuses writes",
                     "point REDIS_URL at the primary, or set REDIS_SENTINELS to follow it")
    shape = f"primary with {t.replicas} replica(s)"
    if t.sentinels is not None:
        shape += f", {t.sentinels} sentinel(s)"
    if t.min_replicas:
        shape += f", min-replicas-to-write {t.min_replicas}"
    if t.replicas and not t.acks:
        return Check(name, WARN, f"{shape}; PD_REPLICA_ACKS=0: a failover can lose acknowledged deliveries",
                     "set PD_REPLICA_ACKS=1 (the default with REDIS_SENTINELS)")
    if t.acks > t.replicas:
        return Check(name, WARN, f"{shape}; PD_REPLICA_ACKS={t.acks}: each delivery waits, then is spooled",
                     "start the replicas, or lower PD_REPLICA_ACKS to the replicas you run")
    if t.replicas and t.sentinels is None:
        return Check(name, WARN, f"{shape}, no REDIS_SENTINELS: the services cannot follow a failover",
                     "set REDIS_SENTINELS (and REDIS_SENTINEL_MASTER) to the sentinels watching it")
    if t.sentinels is not None and t.sentinels < 3:
        return Check(name, WARN, f"{shape}: a failover needs a majority of 3 or more sentinels",
                     "run 3 sentinels, each on its own host")
    if not t.replicas:
        return ok(name, f"{shape}: no failover configured (docs/redis.md, HA)")
    return ok(name, f"{shape}; acknowledged once {t.acks} replica(s) hold it")


@dataclass(frozen=True)
class ModelPath:
    """Whether a job container reaches its model (``console.modelcheck`` gathers it): the job image, the
    URL its pi talks to, the provider's key variables, and what a probe container of the image got."""

    image: str
    has_pi: bool  # the image carries the pi agent (a demo or test image plays one and needs no model)
    provider: str
    url: str | None  # None: the provider has no endpoint known here and PI_MODEL_BASE_URL is unset
    key_vars: tuple[str, ...] = ()
    key_set: bool = False
    status: int | None = None  # the HTTP status the probe got
    error: str | None = None  # why the probe did not reach ``url``
    dev_standin: bool = False  # ``url`` is the stand-in model of the dev running in this folder


LOOPBACK_HOSTS = ("localhost", "127.", "[::1]", "::1")


def _loopback(url: str) -> bool:
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0] if "://" in url else url
    return host.startswith(LOOPBACK_HOSTS)


def model_check(m: ModelPath) -> Check:
    name = "model"
    if not m.has_pi:
        return ok(name, f"{m.image} has no pi agent (a demo or test image): no model to reach")
    if m.url is None:
        return Check(name, FAIL, f"no endpoint known for provider {m.provider} and PI_MODEL_BASE_URL unset",
                     "set PI_MODEL_BASE_URL to the provider's API (or PI_PROVIDER to one pi-dispatch knows)")
    if m.status is None:
        why = m.error or "no answer"
        if m.dev_standin:
            fix = ("dev's stand-in model does not answer job containers: stop dev and start it again here "
                   "(it proves the address at start and names what blocks it)")
        elif _loopback(m.url):
            fix = ("PI_MODEL_BASE_URL names loopback, which in a job container is the container itself: use "
                   "this host's address on Docker's bridge (docker0's) or the provider's public endpoint")
        else:
            fix = ("let containers on Docker's bridge reach it (a firewall or a missing route is the usual "
                   "cause), or set PI_MODEL_BASE_URL to an endpoint they reach")
        return Check(name, FAIL, f"a {m.image} container does not reach {m.url}: {why}", fix)
    reached = f"a {m.image} container reaches {m.url} (HTTP {m.status})"
    if m.dev_standin:
        return ok(name, f"{reached}: dev's stand-in model")
    if not m.key_set and m.key_vars:
        return Check(name, WARN, f"{reached}; no {' or '.join(m.key_vars)} set here",
                     f"set {m.key_vars[-1]} in the worker's environment (or give jobs one via a secret "
                     "profile)")
    return ok(name, reached)


def dev_check(pid: int, image: str) -> Check:
    """The doctor runs in the folder of a running ``pi-dispatch dev``: its checks judge what dev runs."""
    return ok("dev", f"beside pi-dispatch dev pid {pid} (.pi-dispatch/dev.json): judging its job image "
                     f"{image} and its model")
