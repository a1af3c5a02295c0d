"""``triggers.json``: load, validate whole, group per forge (spec ingest §3).

The file is the operator's reviewed allowlist, so any doubt refuses the whole file with one line naming
the entry index, the field and what is accepted. A rule's identity is its raw array index (cron entries
counted), reported on every job as ``trigger.matched.index``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any, NoReturn

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.router.match.predicate import Predicate

ON_TYPES = ("cron", "label", "comment", "pull_request", "issue")
FORGE_KINDS = ("github", "gitlab", "forgejo", "azure")
RUN_KINDS = ("local", *FORGE_KINDS)

# Each forge's own action words (spec §3.2): a word from another forge would load and never fire.
PR_ACTIONS: dict[str, frozenset[str]] = {
    "github": frozenset({"labeled", "opened", "synchronize", "reopened", "review_submitted", "closed"}),
    "gitlab": frozenset({"open", "update", "reopen", "approved", "close"}),
    "forgejo": frozenset({"label_updated", "opened", "synchronized", "reopened", "closed"}),
    "azure": frozenset({"created", "updated"}),
}
PR_CLOSE_WORD = {"github": "closed", "gitlab": "close", "forgejo": "closed"}
ISSUE_ACTIONS: dict[str, frozenset[str]] = {
    "github": frozenset({"closed"}),
    "gitlab": frozenset({"close"}),
    "forgejo": frozenset({"closed"}),
}

FLOW_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROFILE_RE = re.compile(r"^[A-Za-z0-9._-]+$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_IMAGE_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
INSTRUCTIONS_MAX = 2000
SECRETS_MAX = 16
REPLICAS_MIN, REPLICAS_MAX = 2, 3
# Names the worker sets itself: a trigger binding one would override a minted token or a forge host.
RESERVED_SECRET_NAMES = frozenset({
    "GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "GL_TOKEN", "FORGEJO_TOKEN", "GITEA_SERVER_TOKEN",
    "AZURE_DEVOPS_EXT_PAT", "SYSTEM_ACCESSTOKEN", "GITLAB_HOST", "FORGEJO_HOST", "AZURE_DEVOPS_ORG_URL",
})
# Run knobs this version cannot honour yet: refusing them beats a job that silently ignores a cost cap
# or a wait condition the operator wrote (issue #4 validates and carries them).
DEFERRED_RUN_FIELDS = ("waitFor", "backend", "excludeTools", "provider", "model", "maxTurns", "models",
                       "maxCostUsd")
_ONE_SHOT_FIELDS = ("number", "once", "disarmed")


class RunSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The execution fields a webhook rule hands to its job (absent = None, never a default)."""

    flow: str | None = None
    command: str | None = None
    packages: bool | None = None
    image: str | None = None
    skills_dir: str | None = None
    instructions: str | None = None
    resume: bool | None = None
    secrets: dict[str, str] | None = None
    secrets_profile: str | None = None
    replicas: int | None = None
    repository: str | None = None


class LabelRule(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    predicate: Predicate
    run: RunSpec


class CommentRule(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    phrase: str
    run: RunSpec


class ActionRule(msgspec.Struct, frozen=True, kw_only=True):
    """A pull_request or issue rule; ``on`` is kept whole for the routes issue #4 adds."""

    index: int
    actions: frozenset[str]
    run: RunSpec
    on: dict[str, Any]


class CronRule(msgspec.Struct, frozen=True, kw_only=True):
    """Kept for its index only: cron belongs to the scheduler."""

    index: int
    on: dict[str, Any]
    run: dict[str, Any]


class ForgeGroup(msgspec.Struct, frozen=True, kw_only=True):
    label: tuple[LabelRule, ...] = ()
    comment: CommentRule | None = None
    pull_request: tuple[ActionRule, ...] = ()
    pr_close: tuple[ActionRule, ...] = ()
    issue: tuple[ActionRule, ...] = ()


class Rules(msgspec.Struct, frozen=True, kw_only=True):
    """Every forge has a group, used or not, so a filter never needs a presence check (spec §3.6)."""

    github: ForgeGroup
    gitlab: ForgeGroup
    forgejo: ForgeGroup
    azure: ForgeGroup
    cron: tuple[CronRule, ...]
    known_flows: frozenset[str]
    count: int

    def group(self, kind: str) -> ForgeGroup:
        return getattr(self, kind)  # type: ignore[no-any-return]


class RulesRef:
    """The live rules, held in one mutable reference so hot reload (issue #4) swaps them in one step;
    readers take ``current`` once per event, so one event never sees two files."""

    __slots__ = ("current",)

    def __init__(self, rules: Rules) -> None:
        self.current = rules


class _Refusal(Exception):
    pass


class _Entry:
    """One raw entry being validated; ``fail`` names its index and the field."""

    def __init__(self, index: int, on: dict[str, Any], run: dict[str, Any]) -> None:
        self.index, self.on, self.run = index, on, run
        self.kind: str = run.get("kind", "")

    def fail(self, field: str, problem: str) -> NoReturn:
        raise _Refusal(f"triggers[{self.index}].{field} {problem}")


def parse_triggers(text: str, name: str = "triggers.json") -> Rules:
    """Validate the whole file text and group it; any problem raises one ``ConfigError`` line."""
    try:
        return _parse(text)
    except _Refusal as exc:
        raise ConfigError(f"PI_TRIGGERS_FILE {name}: {exc}") from None


def load_triggers(path: str) -> Rules:
    """Read and parse the file (blocking: call through ``asyncio.to_thread`` on a loop)."""
    name = os.path.basename(path) or path
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(
            f"PI_TRIGGERS_FILE {name}: file not found; accepted: a readable triggers.json "
            "(set PI_TRIGGERS_FILE to yours)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"PI_TRIGGERS_FILE {name}: cannot be read ({type(exc).__name__})") from None
    return parse_triggers(text, name)


def _decode(text: str) -> Any:
    duplicates: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out and not duplicates:
                duplicates.append(key)
            out[key] = value
        return out

    def constant(word: str) -> NoReturn:
        raise ValueError(f"{word} is not JSON")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except ValueError as exc:
        where = f" (line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise _Refusal(f"is not valid JSON{where}; accepted: one JSON object") from None
    if duplicates:
        # A duplicated key is two intents with one silently winning: refuse rather than guess.
        raise _Refusal(f"key {duplicates[0]!r} is duplicated; accepted: each key once per object")
    return data


def _parse(text: str) -> Rules:
    data = _decode(text)
    if not isinstance(data, dict) or not isinstance(data.get("triggers"), list):
        raise _Refusal('must be an object with a "triggers" array')
    groups: dict[str, dict[str, Any]] = {
        k: {"label": [], "comment": None, "pull_request": [], "pr_close": [], "issue": []}
        for k in FORGE_KINDS
    }
    cron: list[CronRule] = []
    known_flows: set[str] = set()
    for index, raw in enumerate(data["triggers"]):
        entry = _entry(index, raw)
        if entry.on["type"] == "cron":
            cron.append(_cron(entry))
            continue
        run = _run_spec(entry)
        if run.flow is not None:
            known_flows.add(run.flow)
        _ON_PARSERS[entry.on["type"]](entry, run, groups[entry.kind])
    built = {
        kind: ForgeGroup(
            label=tuple(g["label"]), comment=g["comment"], pull_request=tuple(g["pull_request"]),
            pr_close=tuple(g["pr_close"]), issue=tuple(g["issue"]),
        )
        for kind, g in groups.items()
    }
    return Rules(**built, cron=tuple(cron), known_flows=frozenset(known_flows), count=len(data["triggers"]))


def _entry(index: int, raw: Any) -> _Entry:
    if not isinstance(raw, dict):
        raise _Refusal(f"triggers[{index}] must be an object with object 'on' and object 'run'")
    on, run = raw.get("on"), raw.get("run")
    if not isinstance(on, dict):
        raise _Refusal(f"triggers[{index}].on must be an object")
    if not isinstance(run, dict):
        raise _Refusal(f"triggers[{index}].run must be an object")
    entry = _Entry(index, on, run)
    if on.get("type") not in ON_TYPES:
        entry.fail("on.type", f"must be one of {', '.join(ON_TYPES)}")
    if run.get("kind") not in RUN_KINDS:
        entry.fail("run.kind", f"must be one of {', '.join(RUN_KINDS)}")
    # The on x run matrix is the trust boundary: webhook input must never produce a local run.
    if (on["type"] == "cron") != (run["kind"] == "local"):
        entry.fail("run.kind", "must be local for a cron trigger and a forge kind for every other type")
    return entry


def _cron(e: _Entry) -> CronRule:
    for field in ("id", "pattern"):
        if not _nonblank(e.on.get(field)):
            e.fail(f"on.{field}", "must be a non-empty string")
    return CronRule(index=e.index, on=e.on, run=e.run)


def _label(e: _Entry, run: RunSpec, group: dict[str, Any]) -> None:
    _refuse_one_shot(e)
    predicate = _predicate(e)
    if not predicate.has_positive:
        e.fail("on", "needs a non-empty any or all (a none-only label rule is refused)")
    group["label"].append(LabelRule(index=e.index, predicate=predicate, run=run))


def _comment(e: _Entry, run: RunSpec, group: dict[str, Any]) -> None:
    _refuse_one_shot(e)
    if not _nonblank(e.on.get("phrase")):
        e.fail("on.phrase", "must be a non-empty string")
    if group["comment"] is not None:
        e.fail("on.type", f"comment is already used by triggers[{group['comment'].index}]; "
                          f"accepted: at most one comment trigger per run.kind ({e.kind})")
    group["comment"] = CommentRule(index=e.index, phrase=e.on["phrase"], run=run)


def _pull_request(e: _Entry, run: RunSpec, group: dict[str, Any]) -> None:
    actions = _actions(e, PR_ACTIONS[e.kind])
    close = PR_CLOSE_WORD.get(e.kind)
    if close in actions and actions != {close}:
        e.fail("on.action", f"mixes {close!r} with other actions; accepted: a close-only list")
    rule = ActionRule(index=e.index, actions=actions, run=run, on=e.on)
    group["pr_close" if close in actions else "pull_request"].append(rule)


def _issue(e: _Entry, run: RunSpec, group: dict[str, Any]) -> None:
    if e.kind not in ISSUE_ACTIONS:
        e.fail("on.type", f"issue is not supported for run.kind {e.kind}")
    group["issue"].append(ActionRule(index=e.index, actions=_actions(e, ISSUE_ACTIONS[e.kind]), run=run,
                                     on=e.on))


_ON_PARSERS: dict[str, Callable[[_Entry, RunSpec, dict[str, Any]], None]] = {
    "label": _label, "comment": _comment, "pull_request": _pull_request, "issue": _issue,
}


def _refuse_one_shot(e: _Entry) -> None:
    for field in _ONE_SHOT_FIELDS:
        if field in e.on:
            e.fail(f"on.{field}", f"is refused on {e.on['type']} triggers; accepted: only on issue and "
                                  "close-only pull_request triggers")


def _actions(e: _Entry, vocabulary: frozenset[str]) -> frozenset[str]:
    raw = e.on.get("action")
    if not isinstance(raw, list) or not raw or not all(isinstance(a, str) for a in raw):
        e.fail("on.action", "must be a non-empty array of strings")
    unknown = sorted(set(raw) - vocabulary)
    if unknown:
        e.fail("on.action", f"has {unknown[0]!r}; accepted for {e.kind}: {', '.join(sorted(vocabulary))}")
    return frozenset(raw)


def _predicate(e: _Entry) -> Predicate:
    selectors: dict[str, tuple[str, ...]] = {}
    for field in ("any", "all", "none"):
        if field not in e.on:
            continue
        value = e.on[field]
        if not isinstance(value, list) or not all(_nonblank(v) for v in value):
            e.fail(f"on.{field}", "must be an array of non-empty strings")
        selectors[field] = tuple(value)
    return Predicate(**selectors)


def _nonblank(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _trimmed(value: Any) -> bool:
    return _nonblank(value) and value == value.strip()


def _run_spec(e: _Entry) -> RunSpec:
    """The common webhook ``run`` fields of spec §3.4 (those this version carries)."""
    run = e.run
    for field in ("portfolio", "tools", "noTools", *DEFERRED_RUN_FIELDS):
        if field in run:
            e.fail(f"run.{field}", "is not supported by this version; accepted: remove it")
    flow, command = _flow_or_command(e)
    resume = _strict_bool(e, "resume")
    if resume and command is not None:
        e.fail("run.resume", "true is refused beside run.command")
    instructions = run.get("instructions")
    if "instructions" in run:
        if not _nonblank(instructions) or len(instructions) > INSTRUCTIONS_MAX:
            e.fail("run.instructions", f"must be a non-blank string of at most {INSTRUCTIONS_MAX} characters")
        if command is not None:
            e.fail("run.instructions", "is refused beside run.command")
    image = run.get("image")
    if "image" in run and (not _trimmed(image) or image.startswith("-") or _IMAGE_CONTROL_RE.search(image)):
        e.fail("run.image", "must be an image reference without surrounding spaces, control characters "
                            "or a leading dash")
    skills = run.get("skillsDir")
    if "skillsDir" in run and not _trimmed(skills):
        e.fail("run.skillsDir", "must be a non-blank string without surrounding spaces")
    secrets, profile = _secrets(e, resume)
    return RunSpec(
        flow=flow, command=command, packages=_strict_bool(e, "packages"), image=image, skills_dir=skills,
        instructions=instructions, resume=resume, secrets=secrets, secrets_profile=profile,
        replicas=_replicas(e, resume), repository=_repository(e),
    )


def _flow_or_command(e: _Entry) -> tuple[str | None, str | None]:
    has_flow, has_command = "flow" in e.run, "command" in e.run
    if has_flow and has_command:
        e.fail("run", "has both flow and command; accepted: exactly one")
    if has_command:
        command = e.run["command"]
        if not _trimmed(command) or command.startswith("/") or _CONTROL_RE.search(command):
            e.fail("run.command", "must be a non-empty string without surrounding spaces, a leading / or "
                                  "control characters")
        return None, command
    flow = e.run.get("flow")
    if not _nonblank(flow):
        e.fail("run.flow", "must be a non-empty string (or use run.command)")
    if not FLOW_RE.match(flow):
        e.fail("run.flow", f"{flow!r} is refused; accepted: 1-64 of a-z 0-9 - _, starting and ending "
                           "with a letter or digit")
    return flow, None


def _strict_bool(e: _Entry, field: str) -> bool | None:
    if field not in e.run:
        return None
    if not isinstance(e.run[field], bool):
        e.fail(f"run.{field}", "must be true or false")
    return e.run[field]  # type: ignore[no-any-return]


def _replicas(e: _Entry, resume: bool | None) -> int | None:
    if "replicas" not in e.run:
        return None
    value = e.run["replicas"]
    if type(value) is not int or not REPLICAS_MIN <= value <= REPLICAS_MAX:
        e.fail("run.replicas", f"must be an integer from {REPLICAS_MIN} to {REPLICAS_MAX}")
    if resume:
        e.fail("run.replicas", "is refused beside run.resume true")
    if e.on.get("once") is True:
        e.fail("run.replicas", "is refused beside on.once true")
    return value


def _secrets(e: _Entry, resume: bool | None) -> tuple[dict[str, str] | None, str | None]:
    secrets = e.run.get("secrets")
    if "secrets" in e.run:
        if not isinstance(secrets, dict) or not 1 <= len(secrets) <= SECRETS_MAX:
            e.fail("run.secrets", f"must be an object of 1 to {SECRETS_MAX} references")
        for key, value in secrets.items():
            if not ENV_NAME_RE.match(key) or key == "__proto__" or key in RESERVED_SECRET_NAMES:
                e.fail("run.secrets", f"name {key!r} is refused; accepted: [A-Za-z_][A-Za-z0-9_]*, not a "
                                      "name the runtime sets itself")
            if not _trimmed(value) or value.startswith("-"):
                e.fail(f"run.secrets.{key}", "must be a non-blank reference without surrounding spaces "
                                             "or a leading dash")
        if resume:
            e.fail("run.secrets", "is refused beside run.resume true")
    profile = e.run.get("secretsProfile")
    if "secretsProfile" in e.run:
        if not isinstance(profile, str) or not PROFILE_RE.match(profile):
            e.fail("run.secretsProfile", "must be a non-empty name of [A-Za-z0-9._-]")
        if secrets is None:
            e.fail("run.secretsProfile", "requires run.secrets")
    return secrets, profile


def _repository(e: _Entry) -> str | None:
    needed = e.kind == "azure" and e.on["type"] in ("label", "comment")
    if "repository" not in e.run:
        if needed:
            e.fail("run.repository", "is required on azure label and comment triggers")
        return None
    if not needed:
        e.fail("run.repository", "is refused here; accepted: only on azure label and comment triggers")
    value = e.run["repository"]
    if not _trimmed(value) or "/" in value:
        e.fail("run.repository", "must be a repository name without '/' or surrounding spaces")
    return value  # type: ignore[no-any-return]
