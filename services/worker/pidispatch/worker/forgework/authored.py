"""The trigger a forge job was queued by, as ``triggers.json`` says it is now: the entry at the job's
``trigger.matched.index``, if it still is the same rule. Two pre-spend refusals come from it:

- ``once-already-spent``: the job's rule is a one-shot whose entry carries an ``on.disarmed`` mark of
  another job (its own id: a retry of the job that spent it still runs);
- ``trigger-skew``: the entry now declares ``run.models`` or ``run.maxCostUsd`` and the job carries none
  (the file was narrowed after the job was queued: the narrowing wins).

An unreadable or unparsable file, or an entry that is no longer the same rule, refuses nothing: the
router validated the job's rule when it fired, and the file is the operator's to edit at any time.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pidispatch.common.filewatch import read_regular
from pidispatch.common.models import Job, Matched
from pidispatch.triggers.triggerfile import TRIGGERS_MAX_BYTES

# ``run`` fields that narrow what a job may spend: absent from the job but present in the file is skew.
NARROWING = (("models", "models"), ("maxCostUsd", "max_cost_usd"))


def read_text(path: str) -> str | None:
    """The file's UTF-8 text, or None when it is missing, not a regular file, too big or not UTF-8."""
    try:
        data = read_regular(path, TRIGGERS_MAX_BYTES)
        return None if data is None else data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def matched_of(job: Job) -> Matched | None:
    if job.is_local or job.trigger is None:
        return None
    return job.trigger.matched


def entry_at(data: Any, index: int) -> dict[str, Any] | None:
    """``triggers[index]`` when it is an object with object ``on`` and ``run``, else None."""
    triggers = data.get("triggers") if isinstance(data, dict) else None
    if not isinstance(triggers, list) or not 0 <= index < len(triggers):
        return None
    entry = triggers[index]
    if not isinstance(entry, dict) or not isinstance(entry.get("on"), dict):
        return None
    return entry if isinstance(entry.get("run"), dict) else None


def same_rule(entry: dict[str, Any], job: Job, matched: Matched) -> bool:
    """Whether the entry still is the rule that queued ``job``: what the job carries of it agrees (type,
    forge, one-shot, armed number, command or flow). Narrowing fields are left out on purpose: a
    narrowed rule is the same rule, and its job is refused ``trigger-skew``."""
    on, run = entry["on"], entry["run"]
    if on.get("type") != matched.type or run.get("kind") != job.kind:
        return False
    if (on.get("once") is True) != (matched.once is True):
        return False
    if matched.number is not None and on.get("number") != matched.number:
        return False
    if job.command is not None or run.get("command") is not None:
        return bool(run.get("command") == job.command)
    # A comment rule's job may run a flow named in the comment instead of the rule's default.
    return matched.type == "comment" or run.get("flow") == job.flow


def refusal(data: Any, job: Job) -> str | None:
    """The pre-spend refusal the current file gives ``job``, or None. Pure."""
    matched = matched_of(job)
    if matched is None:
        return None
    entry = entry_at(data, matched.index)
    if entry is None or not same_rule(entry, job, matched):
        return None
    mark = entry["on"].get("disarmed")
    # A mark without this job's id (or without any) was not written for this job: the rule is spent.
    own = isinstance(mark, dict) and mark.get("jobId") == job.id
    if matched.once is True and mark is not None and not own:
        return "once-already-spent"
    run = entry["run"]
    for file_key, job_field in NARROWING:
        if run.get(file_key) is not None and getattr(job, job_field) is None:
            return "trigger-skew"
    # The rule now waits and this job was queued without its conditions: it would start unwaited.
    if run.get("waitFor") and not job.wait_for:
        return "wait-skew"
    return None


def _refusal_from_file(path: str, job: Job) -> str | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return refusal(data, job)


async def authored_refusal(path: str, job: Job) -> str | None:
    """Rows 1-2 of the ladder: ``once-already-spent``, ``trigger-skew`` or ``wait-skew`` from the file now,
    or None."""
    if matched_of(job) is None:
        return None
    return await asyncio.to_thread(_refusal_from_file, path, job)
