"""Every Redis name, TTL and timeout the system uses, in one place.

Keys are built from a prefix (``PD_KEY_PREFIX``, default ``pd``) so two deployments, or two tests, can
share one Redis without seeing each other.
"""

from __future__ import annotations

import re

DAY_S = 24 * 3600

# Consumer groups.
ROUTER_GROUP = "router"
WORKER_GROUP = "workers"

# Retention of decisions: 7 full days after the UTC day of their events entry (router.decisions);
# delivery and job-id dedup keep 31 days (common.dedup).
DECISION_KEEP_DAYS = 7
DEDUP_WINDOW_MS = 10 * 60 * 1000
JOB_STATE_TTL_S = 31 * DAY_S
DEAD_MAXLEN = 10_000

# Host liveness: a beat every 15 s, a row that expires after 90 s without one.
HOST_BEAT_S = 15.0
HOST_TTL_MS = 90_000

# Every Redis call on a request path is bounded: the client would otherwise queue forever on a dead server.
REDIS_OP_TIMEOUT_S = 2.0
REDIS_CONNECT_TIMEOUT_S = 1.5
# How long a blocking XREADGROUP waits before the loop re-checks for shutdown.
READ_BLOCK_MS = 1_000
# After a Redis error a consumer loop waits this long, doubling up to the cap.
RETRY_BASE_S = 0.5
RETRY_CAP_S = 10.0

# Budget windows: a TTL set only when a counter is created, so busy days do not extend
# themselves.
BUDGET_DAY_TTL_S = 2 * DAY_S
BUDGET_WEEK_TTL_S = 9 * DAY_S
BUDGET_MONTH_TTL_S = 40 * DAY_S
BUDGET_TOKENS_TTL_S = BUDGET_DAY_TTL_S  # the daily token counter lives as long as a day window
# A scoped reservation's claim (one per job attempt) lives as long as a day window: a re-run of the same
# attempt after a crash finds it and takes no second slot; a give-back after it expired gives nothing.
SCOPED_CLAIM_TTL_S = BUDGET_DAY_TTL_S
# Scoped concurrency leases: held for this long past the last renewal, renewed three times as often, so a
# crashed worker's slot frees within a minute (a job over a ceiling comes back DEFER_MS later).
SCOPED_LEASE_TTL_MS = 60_000
SCOPED_LEASE_RENEW_S = 20.0

# Routing: a host is routed to only with evidence of life, three missed beats (stricter
# than the 90 s row TTL, because a job routed onto a dead host's stream waits for the rerouter). The
# router re-reads the registry at most once per 5 s and never waits longer than 1.5 s for it; it looks for
# a dead host's unread jobs once per beat.
ROUTE_FRESH_MS = 45_000
HOSTS_CACHE_TTL_MS = 5_000
REGISTRY_READ_TIMEOUT_S = 1.5
REROUTE_INTERVAL_S = 15.0
REROUTE_PAGE = 100

# Run-record mirror: never older than the deepest reader asks, never more members.
MIRROR_MAX_DAYS = 92
RUNS_INDEX_MAX = 5_000

# Delayed jobs: how often the promoter looks for due entries, and how many it moves per call.
PROMOTE_INTERVAL_S = 0.5
PROMOTE_BATCH = 100
# A job that cannot run yet on this worker (its local folder is busy) comes back this much later.
DEFER_MS = 5_000

# A schedule's firings: the newest few, kept as long as a job's live state.
SCHED_RUNS_KEEP = 50
SCHED_RUNS_TTL_S = JOB_STATE_TTL_S
# A schedule's stall streak: every stall restarts the 24 h window, one key per schedule.
SCHED_STALL_WINDOW_S = DAY_S

# Wait-for holds: a hold's hash outlives its next wake by an hour (at least five minutes), each check
# refreshes it for 25 h; a cleared target's marker lives 15 minutes, so a late duplicate is superseded.
WAIT_HOLD_MIN_TTL_MS = 5 * 60_000
WAIT_HOLD_SLACK_MS = 3_600_000
WAIT_COUNTER_TTL_MS = 25 * 3_600_000
WAIT_DONE_TTL_MS = 15 * 60_000
# A job whose check could not start for want of a slot, or whose check was interrupted, comes back later.
WAIT_THROTTLE_MIN_MS = 11_000
# An ``after`` closer than this is not held for: the job just runs.
WAIT_AFTER_SLACK_MS = 1_000

# Cancellation: the request lives a minute, the ack five; the CLI waits ten seconds.
CANCEL_REQUEST_TTL_MS = 60_000
CANCEL_ACK_TTL_MS = 300_000
CANCEL_POLL_S = 0.25
CANCEL_WAIT_S = 10.0

# --- Receiver edge and spool ---
# A client gets this long for its request headers, and an idle keep-alive connection lives this long
# (GitHub itself gives up on a delivery after 10 s); the body gets as long again once headers are in.
RECEIVER_HEADER_TIMEOUT_S = 10.0
RECEIVER_BODY_TIMEOUT_S = 10.0
# While Redis refuses, the spool drain retries after this delay, doubling up to the cap: a returned
# Redis is drained within about a second.
SPOOL_RETRY_BASE_S = 0.1
SPOOL_RETRY_CAP_S = 1.0
SPOOL_MAX_BYTES_DEFAULT = 1024**3

# Trimming: one step removes at most this many entries (whole nodes), so no command runs long; a pass
# takes at most so many steps before it lets the next pass continue. A mark is taken every keep/64 entries
# and 256 are kept, so a cut keeps between keep and keep + keep/64 entries (plus what came since the pass).
TRIM_INTERVAL_S = 5.0
TRIM_STEP_ENTRIES = 200
TRIM_PASS_STEPS = 500
TRIM_MARK_SPACING = 64
TRIM_MARKS_MAX = 256

# Healing from GitHub's delivery log (router.heal): one router at a time holds the lease, renewed while a
# pass runs; its log is read back at most HEAL_WINDOW_MAX_H (GitHub keeps a few days). Each redelivery
# request waits HEAL_PACE_S after the one before (GitHub: at most 80 content-creating requests a minute),
# a read of a page of the log none, and a rate limit's Retry-After or reset at most HEAL_PAUSE_MAX_S.
HEAL_WINDOW_DEFAULT_H = 24
HEAL_WINDOW_MAX_H = 72
HEAL_LEASE_MS = 120_000
HEAL_PACE_S = 1.0
HEAL_PAUSE_MAX_S = 60.0
HEAL_PAGE = 100
HEAL_TIMEOUT_S = 10.0
# How often the router reads whether the healer asked for anything (its decisions' ``healed`` mark).
HEAL_MARKS_RECHECK_S = 1.0

PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]{1,32}$")


class Space:
    """One dedup memory (the receiver's deliveries, the router's job ids; common.dedup): its shard tables'
    names, each built once, the day buckets of the layout before, and the flag that says they may still
    hold some."""

    __slots__ = ("_base", "_tables", "legacy", "upgraded")

    def __init__(self, base: str, legacy: str, upgraded: str) -> None:
        self._base = base
        self._tables: dict[int, str] = {}
        self.legacy = legacy  # "<prefix>:seen:": the old buckets are "<legacy><day>:<shard>"
        self.upgraded = upgraded

    def table(self, shard: int) -> str:
        name = self._tables.get(shard)
        if name is None:
            name = self._tables[shard] = f"{self._base}:{shard}"
        return name


class Keys:
    """Builds the names of one deployment's keys."""

    __slots__ = ("_deliveries", "_jobids", "prefix")

    def __init__(self, prefix: str = "pd") -> None:
        if not PREFIX_RE.match(prefix):
            raise ValueError(f"invalid key prefix {prefix!r}")
        self.prefix = prefix
        self._deliveries: Space | None = None
        self._jobids: Space | None = None

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    @property
    def events(self) -> str:
        return self._k("events")

    @property
    def replica_probe(self) -> str:
        """A counter the receiver's spool drain increments and then ``WAIT``s on: held by the replicas, it
        proves everything appended before it is held too (replication keeps the primary's order)."""
        return self._k("replica-probe")

    @property
    def ignored(self) -> str:
        """Deliveries answered 204 (no rule could act on them), a HASH counted by ``<forge>:<event type>``."""
        return self._k("ignored")

    @property
    def deliveries(self) -> Space:
        """The deliveries seen in the dedup window: a table per shard, ``pd:deliveries:<shard>``
        (common.dedup); the layout before kept ``pd:seen:<day>:<shard>``."""
        if self._deliveries is None:
            self._deliveries = Space(self._k("deliveries"), self._k("seen") + ":", self.dedup_upgraded)
        return self._deliveries

    @property
    def dedup_layout(self) -> str:
        """Set at the router's first start of the table layout (``dedup.upgrade_until``)."""
        return self._k("dedup-layout")

    @property
    def dedup_upgraded(self) -> str:
        """Lives 32 days from an upgrade: the day buckets of the layout before are read too."""
        return self._k("dedup-upgraded")

    def decided(self, day: int, shard: int) -> str:
        """The router's decisions on deliveries whose events entry is of ``day`` and digest in ``shard``."""
        return self._k("decided", str(day), str(shard))

    @property
    def decisions(self) -> str:
        """The readable decision log: a ZSET of one-line decisions scored by decision time (epoch ms),
        capped at ``PD_EVENTS_MAXLEN`` (``router.decisionlog``)."""
        return self._k("decisions")

    @property
    def events_trimmed(self) -> str:
        """How many entries trimming has removed from ``events`` (a counter)."""
        return self._k("events-trimmed")

    @property
    def events_marks(self) -> str:
        """(entries ever added, last id) samples of ``events``, by which its trim keeps a count."""
        return self._k("events-marks")

    @property
    def jobs_trimmed(self) -> str:
        """How many entries trimming has removed from the job streams, all of them (a counter)."""
        return self._k("jobs-trimmed")

    @property
    def jobs(self) -> str:
        return self._k("jobs")

    def host_jobs(self, host: str) -> str:
        return self._k("jobs", host)

    @property
    def jobids(self) -> Space:
        """The job ids queued in the window: ``pd:jobids:<shard>`` (before: ``pd:jobid:<day>:<shard>``)."""
        if self._jobids is None:
            self._jobids = Space(self._k("jobids"), self._k("jobid") + ":", self.dedup_upgraded)
        return self._jobids

    def dedup(self, semantic_key: str) -> str:
        return self._k("dedup", semantic_key)

    def job(self, job_id: str) -> str:
        return self._k("job", job_id)

    @property
    def delayed(self) -> str:
        return self._k("delayed")

    @property
    def window_held(self) -> str:
        """Jobs a quiet-hours window sent to ``delayed``, scored by when the window closes (for status)."""
        return self._k("held", "window")

    @property
    def dead(self) -> str:
        return self._k("dead")

    @property
    def hosts(self) -> str:
        return self._k("hosts")

    @property
    def instance(self) -> str:
        """This deployment's id (set once, by whichever process starts first): the ``pd.instance`` label
        on everything it makes in Docker, by which it finds its own and never another's."""
        return self._k("instance")

    def host(self, name: str) -> str:
        return self._k("host", name)

    @property
    def runs_index(self) -> str:
        return self._k("runs", "index")

    def run_rec(self, sanitized_job_id: str) -> str:
        return self._k("runs", "rec", sanitized_job_id)

    @property
    def paused(self) -> str:
        return self._k("paused")

    def paused_host(self, host: str) -> str:
        return self._k("paused", host)

    def cancel(self, job_id: str) -> str:
        return self._k("cancel", job_id)

    def cancel_ack(self, job_id: str) -> str:
        return self._k("cancel-ack", job_id)

    def sched_stalls(self, schedule_id: str) -> str:
        """Set: the job ids of a cron schedule's runs whose worker died under them, this 24 h streak."""
        return self._k("sched-stalls", schedule_id)

    def sched_down(self, schedule_id: str) -> str:
        """Set (no expiry) while a schedule is torn down by its stall guard; ``--rearm`` deletes it."""
        return self._k("sched-down", schedule_id)

    def sched_runs(self, schedule_id: str) -> str:
        """A cron schedule's queued occurrences: job ids scored by the occurrence's epoch ms."""
        return self._k("sched-runs", schedule_id)

    def wait_job(self, job_id: str) -> str:
        """Hash while a job is held on its ``waitFor``: since, target, dedupId, conditions, checks, faults,
        throttles, next (ms), host."""
        return self._k("wait", "job", job_id)

    def wait_key(self, dedup_id: str) -> str:
        """The supersede lease of one target's wait: the holding job's id (only it extends or deletes)."""
        return self._k("wait", "key", dedup_id)

    def wait_done(self, dedup_id: str) -> str:
        """The job whose wait on this target cleared, for ``WAIT_DONE_TTL_MS``: a later duplicate is
        superseded."""
        return self._k("wait", "done", dedup_id)

    @property
    def wait_held(self) -> str:
        """Set: the ids of held jobs (``waits``, ``status``); members whose hash is gone are pruned."""
        return self._k("wait", "held")

    def budget_day(self, day: str) -> str:
        """``day`` is ``YYYY-MM-DD`` (UTC)."""
        return self._k("budget", day)

    def budget_week(self, monday: str) -> str:
        return self._k("budget", "w", monday)

    def budget_month(self, month: str) -> str:
        """``month`` is ``YYYY-MM`` (UTC)."""
        return self._k("budget", "m", month)

    def budget_tokens(self, day: str) -> str:
        return self._k("budget", "t", day)

    def budget_scoped_day(self, digest: str, day: str) -> str:
        """A scoped row's day window; ``digest`` names the row (``ScopedLimit.digest``)."""
        return self._k("budget", "s", digest, day)

    def budget_scoped_week(self, digest: str, monday: str) -> str:
        return self._k("budget", "s", digest, "w", monday)

    def budget_scoped_month(self, digest: str, month: str) -> str:
        return self._k("budget", "s", digest, "m", month)

    def budget_scoped_claim(self, job_id: str, attempt: int) -> str:
        """The scoped counters one attempt incremented (newline-separated), so it never takes them twice."""
        return self._k("budget", "claim", str(attempt), job_id)

    def scoped_lease(self, digest: str) -> str:
        """A scoped row's running jobs: a sorted set of job ids scored by when their lease runs out (ms)."""
        return self._k("lease", "s", digest)

    def leader(self, role: str) -> str:
        return self._k("leader", role)

    @property
    def heal_asked(self) -> str:
        """The deliveries the healer asked GitHub to redeliver: a ZSET of their guids scored by when it
        asked (epoch ms), cut to the heal window; the router marks a decision ``healed`` by it."""
        return self._k("heal-asked")
