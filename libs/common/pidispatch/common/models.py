"""The values that cross service boundaries: events, jobs and run records.

Stream entries are flat string fields so ``XRANGE`` reads like a log; the job itself
travels as one JSON field. Keys that a rule did not set are absent, never null.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from pidispatch.common.runtime import iso_ms

Fields = dict[str, str]

_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]")
# A flow (skill) name, and a model id after lower-casing: one rule for triggers.json and the CLI.
FLOW_RE = re.compile(r"[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?")
MODEL_RE = re.compile(r"(?=.{1,64}$)[~@]?[a-z0-9][a-z0-9._:/@_-]*", re.ASCII)


def text(value: bytes | str) -> str:
    # Replacement keeps one bad entry from failing the whole page; its content then fails validation.
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def decode_fields(raw: Mapping[Any, Any]) -> Fields:
    """A stream entry's fields as text, whichever way the client decoded them."""
    return {text(k): text(v) for k, v in raw.items()}


# The pd:events fields besides the body's. ``receivedAt`` is epoch ms for programs (the entry id says the
# same time); ``receivedAtIso`` is for a person reading XRANGE. ``replayedAt`` marks an operator's replay.
RECEIVED_AT, RECEIVED_AT_ISO, REPLAYED_AT = "receivedAt", "receivedAtIso", "replayedAt"
# The names an older receiver wrote: read during a rolling upgrade, never written.
LEGACY_RECEIVED_AT, LEGACY_REPLAYED_AT = "received_at", "replayed_at"


def received_at(fields: Mapping[str, str]) -> int:
    """A pd:events entry's receive time (epoch ms), in either naming; 0 when it has none."""
    value = fields.get(RECEIVED_AT) or fields.get(LEGACY_RECEIVED_AT) or ""
    return int(value) if value.isdigit() else 0


def is_replay(fields: Mapping[str, str]) -> bool:
    """The entry was appended by ``pi-dispatch replay``."""
    return REPLAYED_AT in fields or LEGACY_REPLAYED_AT in fields


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """One verified delivery, exactly as the receiver appended it to ``pd:events``."""

    forge: str
    event: str
    delivery: str
    received_at: int
    body: str

    def to_fields(self) -> Fields:
        return {
            "forge": self.forge,
            "event": self.event,
            "delivery": self.delivery,
            RECEIVED_AT: str(self.received_at),
            RECEIVED_AT_ISO: iso_ms(self.received_at),
            "body": self.body,
        }

    @classmethod
    def from_fields(cls, raw: dict[Any, Any]) -> Event:
        # Entries read through common.streams are text already (str keys, str values): decoding them
        # again was a visible share of the router's time per event.
        f = raw if isinstance(next(iter(raw), ""), str) else decode_fields(raw)
        try:
            return cls(
                forge=f["forge"],
                event=f["event"],
                delivery=f["delivery"],
                received_at=int(f[RECEIVED_AT] if RECEIVED_AT in f else f[LEGACY_RECEIVED_AT]),
                body=f["body"],
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"malformed event entry: {type(exc).__name__} {exc}") from None


class Target(msgspec.Struct, kw_only=True, omit_defaults=True):
    type: str
    number: int
    title: str | None = None
    body: str | None = None
    head: dict[str, Any] | None = None
    base: dict[str, Any] | None = None


class Matched(msgspec.Struct, kw_only=True, omit_defaults=True):
    index: int
    type: str
    label: str | None = None
    phrase: str | None = None
    action: str | None = None
    number: int | None = None
    once: bool | None = None


class Sender(msgspec.Struct, kw_only=True):
    id: int | str


class Trigger(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """What fired the job; copied verbatim into the container's ``/job/event.json``.

    Execution knobs never live here, and neither does any login, username or email.
    """

    event: str
    action: str | None = None
    delivery_id: str | None = None
    sender: Sender | None = None
    matched: Matched | None = None
    comment: dict[str, Any] | None = None
    review: dict[str, Any] | None = None
    # A cron trigger's job: the schedule's ``on.id`` and ``on.pattern`` (event is "cron").
    id: str | None = None
    pattern: str | None = None


# The kind of a job that runs on a folder of its host; every other kind is a forge's name (pidispatch.forges).
LOCAL_KIND: Final = "local"


class Job(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """A unit of paid work. Forge jobs carry repo/target/trigger; local jobs carry folder/task."""

    id: str
    kind: str  # LOCAL_KIND or a forge's name
    repo: str
    target: Target | None = None
    flow: str | None = None
    command: str | None = None
    trigger: Trigger | None = None
    project_id: int | None = None
    azure: dict[str, Any] | None = None
    folder: str | None = None
    task: str | None = None
    provider: str | None = None
    model: str | None = None
    max_turns: int | None = None
    models: list[str] | None = None
    packages: bool | None = None
    image: str | None = None
    backend: str | None = None
    exclude_tools: list[str] | None = None
    max_cost_usd: str | float | None = None
    skills_dir: str | None = None
    instructions: str | None = None
    resume: bool | None = None
    secrets: dict[str, str] | None = None
    secrets_profile: str | None = None
    wait_for: list[dict[str, str]] | None = None
    replica: int | None = None
    replicas: int | None = None
    enqueued_at: int | None = None

    @property
    def is_local(self) -> bool:
        return self.kind == LOCAL_KIND


_job_encoder = msgspec.json.Encoder()
_job_decoder = msgspec.json.Decoder(Job)


def job_to_fields(job: Job, attempt: int = 1) -> Fields:
    return {
        "id": job.id,
        "kind": job.kind,
        "repo": job.repo,
        "attempt": str(attempt),
        "job": _job_encoder.encode(job).decode(),
    }


def job_from_fields(raw: dict[Any, Any]) -> tuple[Job, int]:
    """Decode a job stream entry; raises ``ValueError`` naming what is wrong (the entry goes to dead)."""
    f = decode_fields(raw)
    try:
        job = _job_decoder.decode(f["job"])
        attempt = int(f.get("attempt", "1"))
    except KeyError:
        raise ValueError("job entry has no 'job' field") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"job entry does not decode: {exc}") from None
    except ValueError:
        raise ValueError("job entry has a non-numeric attempt") from None
    return job, attempt


def encode_job(job: Job) -> bytes:
    return _job_encoder.encode(job)


class RunRecord(msgspec.Struct, kw_only=True, rename="camel"):
    """One attempt of one job. Built field by field; never a spread of job data."""

    job_id: str
    kind: str
    target: str | None
    flow: str | None
    started_at: str
    ended_at: str
    outcome: str
    reason: str | None
    exit_code: int | None
    turns: int | None = None
    tokens: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    provider: str | None = None
    model: str | None = None
    budget_reserved: bool = False
    attempt: int = 1
    replica: int | None = None
    replicas: int | None = None
    trigger_index: int | None = None
    trigger_type: str | None = None
    session: dict[str, Any] | None = None
    host: str = ""


def sanitize_job_id(job_id: str | None) -> str:
    """The older, replacing name form: every character outside ``[A-Za-z0-9._-]`` becomes ``_``."""
    if not job_id:
        return "unknown-job"
    return _UNSAFE_ID_CHARS.sub("_", job_id)
