"""Why a delivery did or did not fire: the ``Explanation`` value, the ``Trace`` the filters fill while
they decide, and the rendering for ``pi-dispatch explain``: the decision the router stored first, then
what today's rules would do (the file may have changed since, and dedup is not re-run).

The filters write to the trace as they walk their rules, so the explanation is the decision itself, not
a second derivation that could drift from it. Nothing here carries payload text: event and action words
are shown only when they look like forge vocabulary, and "why" is a fixed token.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal

import msgspec

from pidispatch import forges
from pidispatch.triggers.decisions import Decided
from pidispatch.triggers.rules import Rules

FORGES = forges.names()
_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

# Fixed "why" tokens, rendered for people. Drop reasons reuse their own tokens.
WHY_TEXT = {
    "matched": "matched",
    "no-any-label": "none of its `any` labels present",
    "missing-all-label": "an `all` label missing",
    "has-none-label": "a `none` label present",
    "no-label-change": "no label added by this event",
    "action-not-in-rule": "action not in the rule's list",
    "number-not-matched": "armed for another item number",
    "author-not-allowed": "actor not allowed",
    "pr-author-not-allowed": "pull request author not a collaborator",
    "review-state-not-matched": "review state not in `reviewState`",
    "no-trigger-phrase": "phrase not in the comment",
    "no-flow": "no default flow and no known flow named",
    "closer-not-allowed": "closer lacks write access",
    "not-reached": "not evaluated: the decision was made before this rule",
    "not-read-by-route": "this event's route does not read this rule type",
    "other-forge": "rule for another forge",
    "cron-rule": "cron rule (served by the scheduler)",
    "disarmed": "disarmed one-shot",
}


class RuleEntry(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    type: str  # label | comment | pull_request | issue | cron | disarmed
    forge: str | None = None  # the rule's run.kind; None for cron and disarmed entries
    matched: bool = False
    why: str = ""


class Trace:
    """What a filter looked at: the routes it took, the rule groups they read, each rule's verdict."""

    __slots__ = ("entries", "groups", "routes")
    recording = True  # explain reads every rule's verdict; the hot path may skip rules that cannot hold

    def __init__(self) -> None:
        self.routes: list[str] = []
        self.groups: set[str] = set()
        self.entries: dict[int, RuleEntry] = {}

    def route(self, name: str, *groups: str) -> None:
        self.routes.append(name)
        self.groups.update(groups)

    def rule(self, index: int, type_: str, why: str | None = None) -> None:
        """``why`` None means the rule matched."""
        self.entries[index] = RuleEntry(
            index=index, type=type_, matched=why is None, why="matched" if why is None else why
        )

    def reset(self) -> None:
        self.routes.clear()
        self.groups.clear()
        self.entries.clear()


class _Silent(Trace):
    """The trace the hot path passes: records nothing."""

    __slots__ = ()
    recording = False

    def route(self, name: str, *groups: str) -> None:
        pass

    def rule(self, index: int, type_: str, why: str | None = None) -> None:
        pass

    def reset(self) -> None:
        pass


NO_TRACE: Trace = _Silent()


class Explanation(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery re-decided against a rules file. ``--json`` is this value encoded."""

    forge: str
    event: str
    action: str | None
    delivery: str
    needs_authority: bool  # would the outcome change with the forge's verdict?
    verdict: bool | None  # the verdict used; None when none was needed or none was given
    outcome: Literal["fire", "drop", "ask"]
    reason: str  # the drop reason; "" when it fires or asks
    trigger: int | None  # index of the rule that fires (or would, if authorised)
    jobs: tuple[str, ...]  # job ids after replica fan-out
    routes: tuple[str, ...]
    rules: tuple[RuleEntry, ...]
    # What the router recorded for this delivery; None when it has not decided it (or the record expired).
    # Every field above is today's re-run, which can differ: the file may have changed, dedup is not re-run.
    stored: Decided | None = None

    def today(self) -> str:
        """What today's rules would do, in words (the CLI and the status page say it alike)."""
        if self.outcome == "fire":
            return f"fire rule #{self.trigger}, job(s) {', '.join(self.jobs)}"
        if self.outcome == "ask":
            return f"fire rule #{self.trigger} if the forge says the actor is allowed"
        return f"drop it, reason {self.reason}"

    def authority(self) -> str:
        if not self.needs_authority:
            return "no forge lookup needed"
        if self.verdict is None:
            return "needed, not asked"
        return f"needed, verdict {'allowed' if self.verdict else 'refused'}"

    def lines(self) -> list[str]:
        out = [f"delivery {self.delivery}: forge {self.forge}, event {self.event}, "
               f"action {self.action if self.action is not None else '-'}"]
        if self.stored is not None:
            out.append(stored_line(self.stored))
        out.append(f"today's rules would: {self.today()}")
        out.append(f"authority: {self.authority()}")
        out.append(f"route: {', '.join(self.routes) if self.routes else '-'}")
        out.append("rules:")
        for r in self.rules:
            owner = f" ({r.forge})" if r.forge else ""
            mark = "MATCH" if r.matched else "no"
            out.append(f"  #{r.index} {r.type}{owner}: {mark} - {WHY_TEXT.get(r.why, r.why)}")
        if not self.rules:
            out.append("  (the file has no rules)")
        return out


def stored_line(d: Decided) -> str:
    """The router's recorded decision in one line: ids and tokens only, as the record holds nothing else."""
    jobs = ", ".join(d.jobs) or "-"
    rule = f" by rule #{d.trigger}" if d.trigger is not None else ""
    if d.outcome == "queued":
        what = f"queued{rule}, job(s) {jobs}"
    elif d.outcome == "deduplicated" and d.reason == "job-id":
        what = f"deduplicated{rule} by job id: its job {jobs} exists already (this entry is a replay)"
    elif d.outcome == "deduplicated":
        what = f"deduplicated{rule}: no job of its own, the surviving job(s) {jobs} carry it"
        what += " (the 10-minute window)" if d.reason == "semantic-window" else ""
    elif d.outcome == "dropped":
        what = f"dropped, reason {d.reason}"
    elif d.outcome == "pending":
        what = f"pending, reason {d.reason or '-'} (the router tries it again)"
    elif d.outcome == "dead":
        # A dead record keeps the time of the entry's earlier pending decision, not of its parking.
        return f"stored decision: dead, reason {d.reason or '-'} (parked after repeated failures)"
    else:
        what = f"{safe_word(d.outcome) or '?'}, reason {d.reason or '-'}"
    return f"stored decision{_at(d.decided_at)}: {what}"


def _at(ms: int | None) -> str:
    if not ms:
        return ""
    return " (" + datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S") + " UTC)"


def safe_word(value: object) -> str | None:
    """A forge vocabulary word, or None: anything else a body says is not shown."""
    return value if isinstance(value, str) and _WORD_RE.fullmatch(value) else None


def rule_listing(rules: Rules, forge: str, trace: Trace) -> tuple[RuleEntry, ...]:
    """Every entry of the file in index order, with what this delivery's decision made of it."""
    found: dict[int, RuleEntry] = {}
    for kind in FORGES:
        group = rules.group(kind)
        members: list[tuple[int, str, str]] = [(r.index, "label", "label") for r in group.label]
        if group.comment is not None:
            members.append((group.comment.index, "comment", "comment"))
        members += [(r.index, "pull_request", "pull_request") for r in group.pull_request]
        members += [(r.index, "pull_request", "pr_close") for r in group.pr_close]
        members += [(r.index, "issue", "issue") for r in group.issue]
        for index, type_, group_name in members:
            found[index] = _entry(index, type_, kind, group_name, forge, trace)
    for cron in rules.cron:
        found[cron.index] = RuleEntry(index=cron.index, type="cron", why="cron-rule")
    for index in range(rules.count):
        if index not in found:
            found[index] = RuleEntry(index=index, type="disarmed", why="disarmed")
    return tuple(found[i] for i in sorted(found))


def _entry(index: int, type_: str, kind: str, group: str, forge: str, trace: Trace) -> RuleEntry:
    if kind != forge:
        return RuleEntry(index=index, type=type_, forge=kind, why="other-forge")
    seen = trace.entries.get(index)
    if seen is not None:
        return msgspec.structs.replace(seen, type=type_, forge=kind)
    why = "not-reached" if not trace.routes or group in trace.groups else "not-read-by-route"
    return RuleEntry(index=index, type=type_, forge=kind, why=why)
