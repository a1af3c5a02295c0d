"""``triggers.json``: load, validate whole, group per forge.

The file is the operator's reviewed allowlist, so any doubt refuses the whole file with one line naming
the entry index, the field and what is accepted. Every key is either implemented or refused: first each
entry's values are checked (so a malformed value is named as such), then the fields this build parses but
does not act on yet, every one of them in the same line. A rule's identity is its raw array index,
reported on every job as ``trigger.matched.index``. This module owns the file and the ``on`` half of
each entry; ``runfields`` owns the ``run`` half.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from pidispatch import forges
from pidispatch.common.cronpattern import MIN_INTERVAL_DEFAULT_S, pattern_problem, valid_pattern
from pidispatch.common.errors import ConfigError
from pidispatch.common.filewatch import read_regular
from pidispatch.common.log import get_logger
from pidispatch.common.models import LOCAL_KIND
from pidispatch.forges import FORGES
from pidispatch.forges.route import route_of
from pidispatch.triggers.match.predicate import Predicate
from pidispatch.triggers.refusal import (
    ID_RE,
    TriggerEntry,
    TriggerRefusal,
    Unsupported,
    integer,
    nonblank,
    trim,
    unknown_key,
    unsupported_line,
)
from pidispatch.triggers.rules import (
    CloseRule,
    CommentRule,
    CronRule,
    ForgeGroup,
    LabelIndex,
    LabelRule,
    PullRequestRule,
    Rules,
    RulesRef,
    RunSpec,
    pr_index,
)
from pidispatch.triggers.runfields import (
    REFUSED_RUN,
    RUN_KEYS,
    cron_run,
    cron_run_keys,
    refuse_unknown_keys,
    unsupported_run,
    webhook_run,
)
from pidispatch.triggers.triggerfile import TRIGGERS_MAX_BYTES, decode

# Re-exported: the matchers and the service import these names from here.
__all__ = [
    "FORGE_KINDS", "TRIGGERS_MAX_BYTES", "ForgeGroup", "Rules", "RulesRef", "RunSpec", "load_triggers",
    "parse_triggers",
]

ON_TYPES = ("cron", "label", "comment", "pull_request", "issue")
FORGE_KINDS = forges.names()
RUN_KINDS = (LOCAL_KIND, *FORGE_KINDS)
SELECTORS = ("any", "all", "none")

# Each forge's own action words: a word from another forge would load and never fire.
PR_ACTIONS: dict[str, frozenset[str]] = {f.name: f.pr_actions for f in FORGES}
PR_CLOSE_WORD = {f.name: f.pr_close_word for f in FORGES if f.pr_close_word is not None}
# The action that means "a label was added"; there the label is the approval, so it needs a positive one.
PR_LABEL_ACTION = {f.name: f.pr_label_action for f in FORGES if f.pr_label_action is not None}
ISSUE_ACTIONS: dict[str, frozenset[str]] = {
    f.name: f.issue_actions for f in FORGES if f.issue_actions is not None
}
REVIEW_ACTION = "review_submitted"
REVIEW_STATES = ("approved", "changes_requested", "commented")

# The keys each level accepts, in the order the documentation lists them.
FILE_KEYS = ("triggers",)
ENTRY_KEYS = ("on", "run")
ON_KEYS: dict[str, tuple[str, ...]] = {
    "label": ("type", "any", "all", "none"),
    "comment": ("type", "phrase"),
    "pull_request": ("type", "action", "reviewState", "any", "all", "none", "number", "once", "disarmed"),
    "issue": ("type", "action", "number", "once", "disarmed"),
    "cron": ("type", "id", "pattern"),
}
# What this build parses but does not act on yet, and why: refused once the whole file has validated.
REFUSED_ON_TYPES: dict[str, str] = {}
REFUSED_ON: dict[str, str] = {}

Rule = LabelRule | CommentRule | PullRequestRule | CloseRule


def parse_triggers(
    text: str, name: str = "triggers.json", *, cron_floor_s: int = MIN_INTERVAL_DEFAULT_S
) -> Rules:
    """Validate the whole file text and group it; any problem raises one ``ConfigError`` line.
    ``cron_floor_s`` is ``PI_CRON_MIN_INTERVAL_S``: cron triggers firing closer than it are refused."""
    try:
        return _parse(text, cron_floor_s)
    except TriggerRefusal as exc:
        raise ConfigError(f"PI_TRIGGERS_FILE {name}: {exc}") from None


def load_triggers(path: str, *, cron_floor_s: int = MIN_INTERVAL_DEFAULT_S) -> Rules:
    """Read and parse the file (blocking: call through ``asyncio.to_thread`` on a loop)."""
    name = os.path.basename(path) or path
    try:
        raw = read_regular(path, TRIGGERS_MAX_BYTES)
    except FileNotFoundError:
        raise ConfigError(
            f"PI_TRIGGERS_FILE {name}: file not found; accepted: a readable triggers.json "
            "(set PI_TRIGGERS_FILE to yours)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"PI_TRIGGERS_FILE {name}: cannot be read ({type(exc).__name__})") from None
    if raw is None:
        raise ConfigError(
            f"PI_TRIGGERS_FILE {name}: is not a regular file of at most {TRIGGERS_MAX_BYTES} bytes; "
            "accepted: a regular JSON file (not a FIFO, device or directory)"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"PI_TRIGGERS_FILE {name}: is not UTF-8; accepted: a UTF-8 JSON file") from None
    return parse_triggers(text, name, cron_floor_s=cron_floor_s)


def _parse(text: str, cron_floor_s: int) -> Rules:
    data = decode(text)
    if not isinstance(data, dict) or not isinstance(data.get("triggers"), list):
        raise TriggerRefusal('must be an object with a "triggers" array')
    for key in data:
        if key not in FILE_KEYS:
            raise TriggerRefusal(f"{key} {unknown_key(key, FILE_KEYS, '', 'at the top level')}")
    groups: dict[str, dict[str, Any]] = {
        k: {"label": [], "comment": None, "pull_request": [], "pr_close": [], "issue": []}
        for k in FORGE_KINDS
    }
    cron: list[CronRule] = []
    cron_ids: dict[str, int] = {}
    known_flows: set[str] = set()
    entries: list[TriggerEntry] = []
    for index, raw in enumerate(data["triggers"]):
        entry = _entry(index, raw)
        _refuse_unknown(entry, before_values=True)
        if entry.is_cron:
            cron.append(_cron(entry, cron_ids, cron_floor_s))
        else:
            slot, rule = _ON_PARSERS[entry.on_type](entry)
            if "disarmed" in entry.on:
                # A spent one-shot: validated in full, matched by nothing, its index kept (explain lists it).
                _refuse_unknown(entry, before_values=False)
                entries.append(entry)
                continue
            if rule.run.flow is not None:
                known_flows.add(rule.run.flow)
            _place(entry, groups[entry.kind], slot, rule)
        _refuse_unknown(entry, before_values=False)
        entries.append(entry)
    unsupported = [u for entry in entries for u in _unsupported(entry)]
    if unsupported:
        raise TriggerRefusal(unsupported_line(unsupported))
    built = {
        kind: ForgeGroup(
            label=tuple(g["label"]), comment=g["comment"], pull_request=tuple(g["pull_request"]),
            pr_close=tuple(g["pr_close"]), issue=tuple(g["issue"]),
            label_index=LabelIndex(tuple(g["label"])) if g["label"] else None,
            pr_by_action=pr_index(tuple(g["pull_request"])) if g["pull_request"] else None,
        )
        for kind, g in groups.items()
    }
    return Rules(groups=built, cron=tuple(cron), known_flows=frozenset(known_flows),
                 count=len(data["triggers"]))


def _refuse_unknown(e: TriggerEntry, *, before_values: bool) -> None:
    """Before the values: a key no entry of any type knows (a typo: named before the value check can
    misreport it as missing). After: a key another type knows but this one does not."""
    on_accepted = ON_KEYS[e.on_type]
    run_accepted = cron_run_keys() if e.is_cron else RUN_KEYS
    if before_values:
        on_known = {k for keys in ON_KEYS.values() for k in keys} | set(REFUSED_ON)
        run_known = set(RUN_KEYS) | set(cron_run_keys()) | set(REFUSED_RUN)
    else:
        on_known, run_known = set(on_accepted) | set(REFUSED_ON), set(run_accepted) | set(REFUSED_RUN)
    refuse_unknown_keys(e, on_known, on_accepted, run_known, run_accepted)


def _unsupported(e: TriggerEntry) -> list[Unsupported]:
    """Every field of a valid entry this build does not act on yet: all of them, not the first."""
    if e.on_type in REFUSED_ON_TYPES:
        return [e.unsupported(f"on.type {e.on_type}", REFUSED_ON_TYPES[e.on_type], "remove the entry")]
    return e.listed("on", REFUSED_ON) + unsupported_run(e)


def warn_if_empty(rules: Rules, file: str) -> None:
    """An empty list loads (the rules may come after the router) but routes nothing: said at each load."""
    if rules.count == 0:
        get_logger().warning("triggers_empty", file=file)


def _place(e: TriggerEntry, group: dict[str, Any], slot: str, rule: Rule) -> None:
    if slot != "comment":
        group[slot].append(rule)
        return
    # One comment rule per forge: a second would be silently unreachable.
    if group["comment"] is not None:
        e.fail("on.type", f"comment is already used by triggers[{group['comment'].index}]; "
                          f"accepted: at most one comment trigger per run.kind ({e.kind})")
    group["comment"] = rule


def _entry(index: int, raw: Any) -> TriggerEntry:
    if not isinstance(raw, dict):
        raise TriggerRefusal(f"triggers[{index}] must be an object with object 'on' and object 'run'")
    for key in raw:
        if key not in ENTRY_KEYS:
            problem = unknown_key(key, ENTRY_KEYS, "", "in a trigger")
            raise TriggerRefusal(f"triggers[{index}].{key} {problem}")
    on, run = raw.get("on"), raw.get("run")
    if not isinstance(on, dict):
        raise TriggerRefusal(f"triggers[{index}].on must be an object")
    if not isinstance(run, dict):
        raise TriggerRefusal(f"triggers[{index}].run must be an object")
    entry = TriggerEntry(index, on, run)
    # "disarmed" is what a spent one-shot normalises to, never a type an operator writes.
    if on.get("type") not in ON_TYPES:
        entry.fail("on.type", f"must be one of {', '.join(ON_TYPES)}")
    if run.get("kind") not in RUN_KINDS:
        entry.fail("run.kind", f"must be one of {', '.join(RUN_KINDS)}")
    # The on x run matrix is the trust boundary: webhook input must never produce a local run.
    if entry.is_cron != (run["kind"] == LOCAL_KIND):
        entry.fail("run.kind", "must be local for a cron trigger and a forge kind for every other type")
    return entry


def _cron(e: TriggerEntry, seen: dict[str, int], floor_s: int) -> CronRule:
    cron_id = e.on.get("id")
    if not nonblank(cron_id):
        e.fail("on.id", "must be a non-empty string")
    if ":" in cron_id:
        e.fail("on.id", "must not contain ':' (it separates the scheduler's occurrence ids)")
    if not ID_RE.fullmatch(cron_id):
        e.fail("on.id", "must be letters, digits, dot, dash and underscore")
    if cron_id in seen:
        e.fail("on.id", f"{cron_id!r} is already used by triggers[{seen[cron_id]}]; accepted: unique ids")
    seen[cron_id] = e.index
    pattern = e.on.get("pattern")
    if not nonblank(pattern) or not valid_pattern(trim(pattern)):
        e.fail("on.pattern", "must be a cron pattern of 5 or 6 space-separated fields (minute hour day month "
                             "weekday, or seconds first)")
    problem = pattern_problem(trim(pattern), floor_s, int(time.time() * 1000))
    if problem is not None:
        e.fail("on.pattern", problem)
    _one_shot(e, capable=False)
    return CronRule(index=e.index, id=cron_id, pattern=pattern, run=cron_run(e))


def _label(e: TriggerEntry) -> tuple[str, Rule]:
    predicate = _predicate(e, require_positive=True)
    _one_shot(e, capable=False)
    return "label", LabelRule(index=e.index, predicate=predicate, run=webhook_run(e))


def _comment(e: TriggerEntry) -> tuple[str, Rule]:
    if not nonblank(e.on.get("phrase")):
        e.fail("on.phrase", "must be a non-empty string")
    _one_shot(e, capable=False)
    return "comment", CommentRule(index=e.index, phrase=e.on["phrase"], run=webhook_run(e))


def _issue(e: TriggerEntry) -> tuple[str, Rule]:
    if e.kind not in ISSUE_ACTIONS:
        # An Azure work item's close is a template-specific state the payload subset does not carry.
        e.fail("on.type", f"issue is not supported for run.kind {e.kind}; accepted: "
                          f"{', '.join(ISSUE_ACTIONS)}")
    actions = _actions(e, ISSUE_ACTIONS[e.kind])
    _refuse_selectors(e, "an issue trigger (it fires on the close, never on labels)")
    number, once = _one_shot(e, capable=True)
    return "issue", CloseRule(index=e.index, actions=actions, number=number, once=once, run=webhook_run(e))


def _pull_request(e: TriggerEntry) -> tuple[str, Rule]:
    actions = _actions(e, PR_ACTIONS[e.kind])
    close = PR_CLOSE_WORD.get(e.kind)
    is_close = close in actions
    # A close rule gates on the closer, every other PR rule on the author: one rule cannot do both.
    if is_close and actions != {close}:
        e.fail("on.action", f"mixes {close!r} with other actions; accepted: a close-only list")
    review_states = _review_states(e, actions)
    refused = route_of(forges.by_name(e.kind)).pr_selectors_refused
    if refused is not None:
        _refuse_selectors(e, refused)
    if is_close:
        _refuse_selectors(e, "a close-only pull_request trigger (it matches the action and number only)")
    predicate = _predicate(e, require_positive=PR_LABEL_ACTION.get(e.kind) in actions)
    number, once = _one_shot(e, capable=is_close)
    run = webhook_run(e)
    if is_close:
        return "pr_close", CloseRule(index=e.index, actions=actions, number=number, once=once, run=run)
    return "pull_request", PullRequestRule(
        index=e.index, actions=actions, predicate=predicate, review_states=review_states, run=run
    )


_ON_PARSERS: dict[str, Callable[[TriggerEntry], tuple[str, Rule]]] = {
    "label": _label, "comment": _comment, "pull_request": _pull_request, "issue": _issue,
}


def _actions(e: TriggerEntry, vocabulary: frozenset[str]) -> frozenset[str]:
    raw = e.on.get("action")
    if not isinstance(raw, list) or not raw or not all(isinstance(a, str) for a in raw):
        e.fail("on.action", "must be a non-empty array of strings")
    unknown = sorted(set(raw) - vocabulary)
    if unknown:
        e.fail("on.action", f"has {unknown[0]!r}; accepted for {e.kind}: {', '.join(sorted(vocabulary))}")
    return frozenset(raw)


def _review_states(e: TriggerEntry, actions: frozenset[str]) -> frozenset[str] | None:
    if "reviewState" not in e.on:
        return None
    if not route_of(forges.by_name(e.kind)).review_states:
        accepted = " or ".join(f.name for f in FORGES if route_of(f).review_states)
        e.fail("on.reviewState", f"is refused for run.kind {e.kind}; accepted: only on {accepted} rules")
    if REVIEW_ACTION not in actions:
        e.fail("on.reviewState", f"requires on.action to include {REVIEW_ACTION!r} (otherwise it narrows "
                                 "nothing)")
    states = e.on["reviewState"]
    if not isinstance(states, list) or not states or not all(s in REVIEW_STATES for s in states):
        e.fail("on.reviewState", f"must be a non-empty array of {', '.join(REVIEW_STATES)}")
    return frozenset(states)


def _refuse_selectors(e: TriggerEntry, where: str) -> None:
    for field in SELECTORS:
        if field in e.on:
            e.fail(f"on.{field}", f"is refused on {where}")


def _predicate(e: TriggerEntry, *, require_positive: bool) -> Predicate:
    selectors: dict[str, tuple[str, ...]] = {}
    for field in SELECTORS:
        if field not in e.on:
            continue
        value = e.on[field]
        if not isinstance(value, list) or not all(nonblank(v) for v in value):
            e.fail(f"on.{field}", "must be an array of non-empty strings")
        selectors[field] = tuple(value)
    predicate = Predicate(**selectors)
    # Where the label is the approval, a none-only rule would match almost everything.
    if require_positive and not predicate.has_positive:
        e.fail("on", "needs a non-empty any or all (a none-only label rule is refused)")
    return predicate


def _one_shot(e: TriggerEntry, *, capable: bool) -> tuple[int | None, bool]:
    """``on.number`` / ``on.once`` / ``on.disarmed``: legal only on close rules (issue, close-only PR)."""
    if not capable:
        where = "a cron trigger" if e.is_cron else f"this {e.on_type} trigger"
        if "number" in e.on:
            e.fail("on.number", f"is refused on {where}; accepted: only on issue and close-only pull_request "
                                "triggers")
        for field in ("once", "disarmed"):
            if field in e.on:
                e.fail(f"on.{field}", f"is refused on {where}; accepted: only on issue and close-only "
                                      "pull_request triggers")
        return None, False
    number = None
    if "number" in e.on:
        number = integer(e.on["number"])
        if number is None or number < 1:
            notes = "".join(f"; {note}" for f in FORGES if (note := route_of(f).item_number_note))
            e.fail("on.number", f"must be an integer >= 1 (the forge's item number{notes})")
    once = e.on.get("once", False)
    if not isinstance(once, bool):
        e.fail("on.once", "must be true or false")
    if once and number is None:
        # Without a number two items closing in one window would race for the one shot.
        e.fail("on.once", "true requires on.number")
    if once and "replicas" in e.run:
        e.fail("on.once", "true is refused beside run.replicas (one run cannot be N racing runs)")
    if "disarmed" in e.on:
        _disarmed(e)
    return number, once


def _disarmed(e: TriggerEntry) -> None:
    """The mark the worker writes on a spent one-shot (``at``, ``jobId``): the entry then matches nothing."""
    mark = e.on["disarmed"]
    if not isinstance(mark, dict):
        e.fail("on.disarmed", 'must be an object with a non-empty "at" and optionally a non-empty "jobId"')
    extra = sorted(set(mark) - {"at", "jobId"})
    if extra:
        e.fail("on.disarmed", f"has the unsupported key {extra[0]!r}; accepted: at, jobId")
    if not nonblank(mark.get("at")):
        e.fail("on.disarmed.at", "must be a non-empty string")
    if "jobId" in mark and not nonblank(mark["jobId"]):
        e.fail("on.disarmed.jobId", "must be a non-empty string")
    if e.on.get("once") is not True:
        e.fail("on.disarmed", "requires on.once true (only a one-shot can be spent)")
