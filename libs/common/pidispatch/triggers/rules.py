"""The validated, normalised trigger rules: what ``triggers.py`` produces and the
per-forge filters consume. Pure values; one ``Rules`` is one version of the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from pidispatch.triggers.match.predicate import Predicate


class RunSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The execution fields a webhook rule hands to its job (absent = None, never a default).

    Field names are the Job's (``pidispatch.common.models.Job``), so a job copies them one to one.
    """

    flow: str | None = None
    command: str | None = None
    packages: bool | None = None
    image: str | None = None
    backend: str | None = None
    exclude_tools: tuple[str, ...] | None = None
    provider: str | None = None
    model: str | None = None
    max_turns: int | None = None
    models: tuple[str, ...] | None = None
    max_cost_usd: str | float | None = None
    skills_dir: str | None = None
    instructions: str | None = None
    resume: bool | None = None
    secrets: dict[str, str] | None = None
    secrets_profile: str | None = None
    wait_for: tuple[dict[str, str], ...] | None = None
    replicas: int | None = None
    # Azure label/comment rules only: the repository a work item's job clones.
    repository: str | None = None


class LabelRule(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    predicate: Predicate
    run: RunSpec


class LabelIndex:
    """Label rules by the labels that can make each one hold, so an event's cost follows its labels,
    not the rule count. A rule with ``any`` holds only if one of them is present, else only if its first
    ``all`` is; one with neither (none at load, but a hand-built group may) is a candidate for every event.
    """

    __slots__ = ("_always", "_by_label", "rules")

    def __init__(self, rules: tuple[LabelRule, ...]) -> None:
        self.rules = rules
        by_label: dict[str, list[int]] = {}
        always: list[int] = []
        for position, rule in enumerate(rules):
            keys = rule.predicate.any or rule.predicate.all[:1]
            if not keys:
                always.append(position)
            for label in keys:
                by_label.setdefault(label, []).append(position)
        self._by_label = {label: tuple(positions) for label, positions in by_label.items()}
        self._always = tuple(always)

    def __eq__(self, other: object) -> bool:  # derived from the rules: equal rules, equal index
        return isinstance(other, LabelIndex) and other.rules == self.rules

    __hash__ = None  # type: ignore[assignment]

    def candidates(self, labels: Iterable[str]) -> list[LabelRule]:
        """The rules that may hold over ``labels``, in file order: every other rule cannot."""
        positions = set(self._always)
        for label in labels:
            positions.update(self._by_label.get(label, ()))
        return [self.rules[p] for p in sorted(positions)]


class CommentRule(msgspec.Struct, frozen=True, kw_only=True):
    """``run.flow`` is the default flow; a known flow named after the phrase overrides it."""

    index: int
    phrase: str
    run: RunSpec


class PullRequestRule(msgspec.Struct, frozen=True, kw_only=True):
    """A pull_request rule without the close word. ``review_states`` only on GitHub review rules."""

    index: int
    actions: frozenset[str]
    predicate: Predicate
    review_states: frozenset[str] | None
    run: RunSpec


class CloseRule(msgspec.Struct, frozen=True, kw_only=True):
    """An ``issue`` rule, or a close-only ``pull_request`` rule; ``number`` arms it for one item.
    ``once`` rides the job's ``matched.once``: the worker disarms the entry after the job's run."""

    index: int
    actions: frozenset[str]
    number: int | None
    once: bool
    run: RunSpec


class CronRule(msgspec.Struct, frozen=True, kw_only=True):
    """A validated cron entry: each worker whose disk has ``run["folder"]`` serves it (worker
    ``schedules``); the router only validates it."""

    index: int
    id: str
    pattern: str
    run: dict[str, Any]


class ForgeGroup(msgspec.Struct, frozen=True, kw_only=True):
    label: tuple[LabelRule, ...] = ()
    comment: CommentRule | None = None
    pull_request: tuple[PullRequestRule, ...] = ()
    pr_close: tuple[CloseRule, ...] = ()
    issue: tuple[CloseRule, ...] = ()
    # Built once at load (triggers); a group built by hand is indexed when it is read.
    label_index: LabelIndex | None = None
    pr_by_action: Mapping[str, tuple[PullRequestRule, ...]] | None = None

    def labels(self) -> LabelIndex:
        return self.label_index if self.label_index is not None else LabelIndex(self.label)

    def pull_requests(self, action: object, *, every: bool) -> tuple[PullRequestRule, ...]:
        """The pull request rules to try for ``action``, in file order: only those naming it, unless
        ``every`` (explain records each rule's verdict, "action-not-in-rule" included)."""
        if every or not isinstance(action, str):
            return self.pull_request
        index = self.pr_by_action if self.pr_by_action is not None else pr_index(self.pull_request)
        return index.get(action, ())

    def has_rules(self) -> bool:
        return bool(self.label or self.comment or self.pull_request or self.pr_close or self.issue)


def pr_index(rules: tuple[PullRequestRule, ...]) -> dict[str, tuple[PullRequestRule, ...]]:
    """Pull request rules by each action they name, in file order."""
    by_action: dict[str, list[PullRequestRule]] = {}
    for rule in rules:
        for action in rule.actions:
            by_action.setdefault(action, []).append(rule)
    return {action: tuple(found) for action, found in by_action.items()}


class Rules(msgspec.Struct, frozen=True, kw_only=True):
    """Every forge has a group, used or not, so a filter never needs a presence check; ``groups`` is keyed
    by forge name and everyone reads ``group(name)``, so a new forge needs no field here.

    Every entry but a cron or a disarmed one is in exactly one group (cron entries are in ``cron``,
    and a disarmed one keeps its index in ``count`` only).
    """

    groups: Mapping[str, ForgeGroup]
    cron: tuple[CronRule, ...]
    known_flows: frozenset[str]
    count: int

    def group(self, kind: str) -> ForgeGroup:
        return self.groups[kind]


class RulesRef:
    """The live rules in one mutable reference: hot reload swaps them in one step, and readers take
    ``current`` once per event, so one event never sees two files."""

    __slots__ = ("current",)

    def __init__(self, rules: Rules) -> None:
        self.current = rules
