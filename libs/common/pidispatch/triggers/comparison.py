"""What a ``triggers.json`` edit would change: stored deliveries re-decided under a candidate file, set
against what the router recorded for them (``pi-dispatch triggers test``, the status page's form).

Pure. The caller re-decides each delivery twice, under the candidate and under the file in force, through
the router's own path (``forges.pipeline``), and reads its stored decision; here all three become
``Outcome`` values and are compared on what a job would carry: fire or drop, the rule's index and flow,
the drop reason. Dedup is not re-run, so a stored ``deduplicated`` reads as the fire it was. A rule is
known by its index (jobs carry it as ``trigger.matched.index``), so removing a rule renumbers the ones
after it, and their deliveries show as changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import msgspec

from pidispatch.triggers.decision import Drop, Fire
from pidispatch.triggers.decisions import Decided

# Which forge fact a decision needed and did not have: the actor's standing (--offline asks none), or the
# harness's own account on that forge (without it the bot-loop guard cannot drop the harness's own events).
ForgeFact = Literal["authority", "identity"]
# Stored outcomes that are the router's last word on a delivery; any other (pending, dead after failed
# lookups) is compared through the file in force instead.
FINAL = frozenset({"queued", "deduplicated", "dropped"})
MALFORMED = "malformed-event"
_FIRES = frozenset({"queued", "deduplicated", "fire", "ask"})
_DROPS = frozenset({"dropped", "drop"})


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One decision in the router's words (stored: queued, deduplicated, dropped, pending, dead) or a
    re-run's (fire, drop, ask, pending, dead). ``ask``: it fires if the forge allows the actor, and
    --offline did not ask; ``needs`` names the forge fact an offline run went without."""

    outcome: str
    trigger: int | None = None
    flow: str | None = None
    reason: str = ""
    needs: ForgeFact | None = None
    # False when ``flow`` is not known: a stored decision records the rule, not the flow.
    flow_known: bool = True

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"outcome": self.outcome, "trigger": self.trigger, "flow": self.flow,
                               "reason": self.reason}
        if self.needs is not None:
            out["needsForge"] = self.needs
        return out


def decided(decision: Drop | Fire) -> Outcome:
    """A re-run's final decision."""
    if isinstance(decision, Fire):
        return Outcome(outcome="fire", trigger=decision.index, flow=decision.job.flow)
    return Outcome(outcome="drop", reason=decision.reason)


def asking(if_allowed: Fire) -> Outcome:
    """A re-run that needed the forge's verdict and, offline, did not get one: the fire it would be."""
    return Outcome(outcome="ask", trigger=if_allowed.index, flow=if_allowed.job.flow, needs="authority")


def unanswered(reason: str) -> Outcome:
    """The forge could not answer: the router keeps such a delivery pending, never drops it."""
    return Outcome(outcome="pending", reason=f"lookup-failed:{reason}")


def malformed() -> Outcome:
    """A body no delivery of its forge can have: the router parks it at once."""
    return Outcome(outcome="dead", reason=MALFORMED)


def needing_identity(outcome: Outcome) -> Outcome:
    """Without the harness's own id on the delivery's forge (offline, it is known only when set): a fire
    might be the harness's own event, which the guard would drop. A drop stays a drop whatever it says."""
    if outcome.outcome in ("fire", "ask") and outcome.needs is None:
        return msgspec.structs.replace(outcome, needs="identity")
    return outcome


def recorded(stored: Decided | None, in_force: Outcome) -> Outcome | None:
    """The router's final decision as an ``Outcome``, or None (none kept, or not final). Its flow comes
    from the re-run under the file in force when that fires the same rule (the record keeps no flow)."""
    if stored is None:
        return None
    if stored.outcome in FINAL:
        if stored.outcome == "dropped":
            return Outcome(outcome="dropped", reason=stored.reason)
        same = _kind(in_force.outcome) == "fire" and in_force.trigger == stored.trigger
        return Outcome(outcome=stored.outcome, trigger=stored.trigger, flow=in_force.flow if same else None,
                       flow_known=same)
    if stored.outcome == "dead" and stored.reason == MALFORMED:
        return malformed()
    return None


def _kind(outcome: str) -> str:
    return "fire" if outcome in _FIRES else "drop" if outcome in _DROPS else outcome


def same(before: Outcome, after: Outcome) -> bool:
    """Would a job differ: fire or drop (or pending, dead), the rule, its flow where known, the reason."""
    kind = _kind(before.outcome)
    if kind != _kind(after.outcome):
        return False
    if kind == "fire":
        flows = not (before.flow_known and after.flow_known) or before.flow == after.flow
        return before.trigger == after.trigger and flows
    return before.reason == after.reason


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """One delivery compared: ids, forge words and the item reference only, never payload text."""

    delivery: str
    forge: str
    event: str
    action: str | None
    target: str | None
    stored: Outcome
    would: Outcome
    # False: the router's decision is gone (expired, or not final), ``stored`` is the file in force's.
    recorded: bool = True

    def as_json(self) -> dict[str, Any]:
        return {"delivery": self.delivery, "forge": self.forge, "event": self.event, "action": self.action,
                "target": self.target, "stored": {**self.stored.as_json(), "recorded": self.recorded},
                "would": self.would.as_json()}


def compared(delivery: str, forge: str, event: str, action: str | None, target: str | None,
             stored: Decided | None, in_force: Outcome, would: Outcome) -> tuple[Row, bool]:
    """One delivery's row and whether the candidate changes its outcome.

    A delivery that needed the forge's verdict under both files for the same rule and flow asks the same
    question, so an offline run takes the verdict that made the stored decision: unchanged."""
    base = recorded(stored, in_force)
    row = Row(delivery=delivery, forge=forge, event=event, action=action, target=target,
              stored=base or in_force, would=would, recorded=base is not None)
    if would.outcome == "ask" and in_force.outcome == "ask":
        return row, not (would.trigger == in_force.trigger and would.flow == in_force.flow)
    return row, not same(row.stored, would)


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """The run's answer: how many deliveries were compared, how many would not change, the rows that would,
    and how many decisions needed a forge fact an offline run went without."""

    compared: int
    unchanged: int
    changed: tuple[Row, ...]
    needed_forge: int = 0
    offline: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"compared": self.compared, "unchanged": self.unchanged,
                               "changed": [r.as_json() for r in self.changed]}
        if self.offline or self.needed_forge:
            out["neededForge"] = self.needed_forge
        return out


def comparison(results: Iterable[tuple[Row, bool]], *, offline: bool = False) -> Comparison:
    rows = list(results)
    changed = tuple(row for row, differs in rows if differs)
    needed = sum(1 for row, _ in rows if row.would.needs is not None or row.stored.needs is not None)
    return Comparison(compared=len(rows), unchanged=len(rows) - len(changed), changed=changed,
                      needed_forge=needed, offline=offline)


def outcome_text(o: Outcome) -> str:
    """One outcome for people: the rule and flow of a fire, the reason of anything else."""
    flow = f", flow {o.flow or '-'}" if o.flow_known else ""
    if o.outcome == "ask":
        return f"fire rule #{o.trigger}{flow} if the forge allows (not asked)"
    if _kind(o.outcome) == "fire":
        word = "fire" if o.outcome == "fire" else o.outcome
        text = f"{word} rule #{o.trigger}{flow}"
    else:
        word = "drop" if o.outcome == "drop" else o.outcome
        text = f"{word}: {o.reason or '-'}"
    return text + (" (own id unknown)" if o.needs == "identity" else "")


def stored_text(row: Row) -> str:
    return outcome_text(row.stored) + ("" if row.recorded else " (no stored decision: the file in force)")


def summary(c: Comparison) -> str:
    line = f"compared {c.compared} deliveries: {c.unchanged} unchanged, {len(c.changed)} would change"
    if c.offline or c.needed_forge:
        line += f"; {c.needed_forge} needed a forge fact that was not asked (marked)"
    return line


def table_rows(changed: Sequence[Row]) -> list[tuple[str, str, str, str, str, str]]:
    """The CLI's and the status page's rows: delivery, forge, event/action, target, stored, under FILE."""
    return [(r.delivery, r.forge, r.event + (f"/{r.action}" if r.action else ""), r.target or "-",
             stored_text(r), outcome_text(r.would)) for r in changed]
