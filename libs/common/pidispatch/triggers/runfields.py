"""The ``run`` half of a ``triggers.json`` entry: every field, its refusals and
the near-miss key sweeps, for webhook rules (a ``RunSpec``) and cron entries (a normalised dict).

A field that would load and silently do nothing is refused: that is the rule behind every check here.
So is every key this build does not know: a spelling of a field whose absence changes what a job does
(wait, venue, tools, model) names that field, any other key names the nearest accepted one.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

from pidispatch import forges
from pidispatch.common.configsyntax import image_ref_ok
from pidispatch.common.envnames import secret_name_refused
from pidispatch.common.models import FLOW_RE, LOCAL_KIND
from pidispatch.forges import FORGES
from pidispatch.forges.route import route_of
from pidispatch.triggers.modelref import model_fields
from pidispatch.triggers.refusal import (
    ID_RE,
    TriggerEntry,
    Unsupported,
    integer,
    js_length,
    nonblank,
    unpadded,
)
from pidispatch.triggers.rules import RunSpec
from pidispatch.triggers.waitfor import wait_for

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
INSTRUCTIONS_MAX = 2000
SECRETS_MAX = 16
REPLICAS_MIN, REPLICAS_MAX = 2, 3
# The venues this build can run a job in, name -> remote. One local venue today; a remote one would be
# refused on cron (a local job edits the operator's folder in place, which no remote daemon can see).
BACKENDS: dict[str, bool] = {"local": False}
# The pinned agent's built-in tools; it ignores unknown names silently, so only these can be excluded.
EXCLUDABLE_TOOLS = ("read", "bash", "powershell", "edit", "write", "grep", "find", "ls")

# The run keys of a webhook rule, in the order the documentation lists them.
RUN_KEYS = (
    "kind", "flow", "command", "image", "instructions", "repository", "replicas", "secrets", "secretsProfile",
    "backend", "excludeTools", "provider", "model", "maxTurns", "models", "maxCostUsd", "packages", "resume",
    "waitFor",
)
# Run fields a rule may carry but no worker acts on yet, and why: each is refused after the file validates.
REFUSED_RUN: dict[str, str] = {
    "skillsDir": "no worker mounts a skills folder into a job",
}
# Switches whose false is what every job here already gets (no staged packages, a cold start): false or
# absent loads and changes nothing; true asks for what no worker does, so it is refused like the above.
REFUSED_RUN_TRUE: dict[str, str] = {
    "packages": "no worker stages packages into a job",
    "resume": "no worker keeps an agent session to resume",
}
# Near misses: normalised spellings (non-alphanumerics removed, lower-cased) -> the field they mean. The exact
# field under ``run`` is legal; under ``on`` every spelling is refused (these are properties of the run).
_WAIT_SPELLINGS = {"waitfor": "run.waitFor"}
_BACKEND_SPELLINGS = dict.fromkeys(("backend", "backends"), "run.backend")
_EXCLUDE_SPELLINGS = dict.fromkeys(("excludetools", "excludetool", "excludedtools"), "run.excludeTools")
_MODEL_SPELLINGS = {
    **dict.fromkeys(("provider", "providers", "providerid", "providerids", "providername"), "run.provider"),
    **dict.fromkeys(("model", "modelid", "modelname"), "run.model"),
    **dict.fromkeys(("models", "modelids", "modelnames", "allowedmodels", "allowedmodel"), "run.models"),
    **dict.fromkeys(("maxturns", "maxturn"), "run.maxTurns"),
    **dict.fromkeys(("maxcostusd", "maxcost"), "run.maxCostUsd"),
}
# (spellings, exact keys legal under run, homoglyph rule): waitFor predates the homoglyph rule.
_SWEEPS: tuple[tuple[dict[str, str], frozenset[str], bool], ...] = (
    (_WAIT_SPELLINGS, frozenset({"waitFor"}), False),
    (_BACKEND_SPELLINGS, frozenset({"backend"}), True),
    (_EXCLUDE_SPELLINGS, frozenset({"excludeTools"}), True),
    (_MODEL_SPELLINGS, frozenset({"provider", "model", "maxTurns", "models", "maxCostUsd"}), True),
)
_NON_ALNUM_RE = re.compile(r"[^A-Za-z0-9]")
_PRINTABLE_ASCII_RE = re.compile(r"[\x20-\x7e]*")


def near_miss(key: str, spellings: Collection[str], *, homoglyphs: bool = True) -> str | None:
    """The spelling ``key`` means, or None. A non-ASCII key (a pasted homoglyph) loses its non-ASCII
    letters to normalisation, so it is matched as a subsequence of a spelling instead (floor 4 letters)."""
    normalised = _NON_ALNUM_RE.sub("", key).lower()
    if _PRINTABLE_ASCII_RE.fullmatch(key) or not homoglyphs:
        return normalised if normalised in spellings else None
    if len(normalised) < 4:
        return None
    return next((s for s in spellings if _is_subsequence(normalised, s)), None)


def _is_subsequence(needle: str, hay: str) -> bool:
    letters = iter(hay)
    return all(ch in letters for ch in needle)


def cron_run_keys() -> tuple[str, ...]:
    """A cron entry's run keys: its own, the shared ones but repository, and each forge's own (a function:
    the forge routes import this module, so they cannot be asked while it loads)."""
    shared = (k for k in RUN_KEYS[1:] if k not in ("repository", "waitFor"))
    forge_keys = (k for f in FORGES for k in route_of(f).cron_keys)
    return ("kind", "folder", "task", "portfolio", *shared, *forge_keys)


def refuse_unknown_keys(e: TriggerEntry, on_known: Collection[str], on_accepted: Sequence[str],
                        run_known: Collection[str], run_accepted: Sequence[str]) -> None:
    """Refuse the first key outside the known sets: a near miss of ``waitFor``, ``backend``,
    ``excludeTools`` or a model field names that field (under ``on`` too), any other the nearest accepted."""
    for where, source, known in (("run", e.run, run_known), ("on", e.on, on_known)):
        for key in source:
            if key in known:
                continue
            for spellings, exact, homoglyphs in _SWEEPS:
                if where == "run" and key in exact:
                    continue
                hit = near_miss(key, spellings, homoglyphs=homoglyphs)
                if hit is not None:
                    e.fail(f"{where}.{key}", f"is not a field; did you mean {spellings[hit]}?")
            if where == "run" and key in ("tools", "noTools"):
                # The agent's own option names: an allowlist would widen on every pin bump; narrowing only.
                e.fail(f"run.{key}", "is not a field; accepted: run.excludeTools (narrowing only)")
    e.refuse_unknown("run", run_known, run_accepted)
    e.refuse_unknown("on", on_known, on_accepted)


def flow_or_command(e: TriggerEntry) -> tuple[str | None, str | None]:
    """Exactly one of ``flow`` / ``command``, checked before either alone so each mistake gets its own
    message; the flow charset applies to webhook rules (a job-id and dedup-key slot)."""
    run = e.run
    if "flow" in run and "command" in run:
        e.fail("run", "has both flow and command; accepted: exactly one")
    if "command" in run:
        command = run["command"]
        if not unpadded(command) or command.startswith("/") or _CONTROL_RE.search(command):
            e.fail("run.command", "must be a non-empty string without surrounding spaces, a leading / or "
                                  "control characters")
        if e.is_cron and "task" in run:
            e.fail("run.command", "is refused beside run.task (a command job's prompt is the command line)")
        if not e.is_cron and "instructions" in run:
            e.fail("run.instructions", "is refused beside run.command (a command job has no prompt "
                                       "envelope to render them in)")
        if run.get("resume") is True:
            e.fail("run.resume", "true is refused beside run.command")
        return None, command
    flow = run.get("flow")
    if not nonblank(flow):
        e.fail("run.flow", "must be a non-empty string (or use run.command)")
    if not e.is_cron and not FLOW_RE.fullmatch(flow):
        e.fail("run.flow", f"{flow!r} is refused; accepted: 1-64 of a-z 0-9 - _, starting and ending "
                           "with a letter or digit")
    return flow, None


def strict_bool(e: TriggerEntry, field: str) -> bool | None:
    if field not in e.run:
        return None
    if not isinstance(e.run[field], bool):
        e.fail(f"run.{field}", "must be true or false")
    return e.run[field]  # type: ignore[no-any-return]


def _image(e: TriggerEntry) -> str | None:
    if "image" not in e.run:
        return None
    image = e.run["image"]
    # The worker's own rule for PI_JOB_IMAGE, so a reference that loads here is one it will run.
    if not isinstance(image, str) or not image_ref_ok(image):
        e.fail("run.image", "must be an image reference without spaces, control characters or a leading dash")
    return image


def _skills_dir(e: TriggerEntry) -> str | None:
    if "skillsDir" in e.run and not unpadded(e.run["skillsDir"]):
        e.fail("run.skillsDir", "must be a non-blank string without surrounding spaces")
    return e.run.get("skillsDir")


def _instructions(e: TriggerEntry) -> str | None:
    if "instructions" not in e.run:
        return None
    text = e.run["instructions"]
    if e.is_cron:
        e.fail("run.instructions", "is refused on a cron trigger; accepted: put it at the top of run.task")
    if not nonblank(text) or js_length(text) > INSTRUCTIONS_MAX:
        e.fail("run.instructions", f"must be a non-blank string of at most {INSTRUCTIONS_MAX} characters")
    return text


def _packages(e: TriggerEntry) -> bool | None:
    """Validated, then always None: false is a no-op here and true is refused once the file validates,
    so a rule's jobs are byte-identical with or without the key."""
    strict_bool(e, "packages")
    return None


def _resume(e: TriggerEntry) -> bool | None:
    """As ``_packages``; true is first checked against the original's pairings (a wrong pair is a
    malformed rule, whatever this build supports)."""
    if strict_bool(e, "resume") and e.is_cron:
        e.fail("run.resume", "true is refused on a cron trigger; accepted: false or absent")
    return None


def _repository(e: TriggerEntry) -> str | None:
    """Only where the forge's item names no repository (``RouterForge.repository_on``), and there always."""
    needed = e.on_type in route_of(forges.by_name(e.kind)).repository_on
    if "repository" not in e.run:
        if needed:
            e.fail("run.repository", f"is required on an {e.kind} {e.on_type} trigger (a work item names no "
                                     "repository)")
        return None
    if not needed:
        where = " or ".join(f"{f.name} {' and '.join(types)}" for f in FORGES
                            if (types := route_of(f).repository_on))
        e.fail("run.repository", f"is refused here; accepted: only on {where} triggers")
    value = e.run["repository"]
    if not unpadded(value) or "/" in value:
        e.fail("run.repository", "must be a repository name without '/' or surrounding spaces")
    return value


def _replicas(e: TriggerEntry) -> int | None:
    if "replicas" not in e.run:
        return None
    if e.is_cron:
        e.fail("run.replicas", "is refused on a cron trigger (replicas would edit one folder in place)")
    value = integer(e.run["replicas"])
    if value is None or not REPLICAS_MIN <= value <= REPLICAS_MAX:
        e.fail("run.replicas", f"must be an integer from {REPLICAS_MIN} to {REPLICAS_MAX}")
    if e.run.get("resume") is True:
        e.fail("run.replicas", "is refused beside run.resume true")
    return value


def _secrets(e: TriggerEntry) -> dict[str, str] | None:
    if "secrets" not in e.run:
        return None
    secrets = e.run["secrets"]
    if not isinstance(secrets, dict) or not 1 <= len(secrets) <= SECRETS_MAX:
        e.fail("run.secrets", f"must be an object of 1 to {SECRETS_MAX} references")
    for name, reference in secrets.items():
        if secret_name_refused(name):
            e.fail("run.secrets", f"name {name!r} is refused; accepted: [A-Za-z_][A-Za-z0-9_]*, not "
                                  "__proto__ and not a name the runtime sets or steers (PI_*, LD_*, PATH, "
                                  "NODE_OPTIONS, *_BASE_URL, a forge token, ...)")
        # The reference is the resolver's first argument: a leading dash would parse as a flag.
        if not unpadded(reference) or reference.startswith("-"):
            e.fail(f"run.secrets.{name}", "must be a non-blank reference without surrounding spaces or a "
                                          "leading dash")
    if e.run.get("resume") is True:
        e.fail("run.secrets", "is refused beside run.resume true (a resumed transcript would keep values)")
    return dict(secrets)


def _secrets_profile(e: TriggerEntry) -> str | None:
    if "secretsProfile" not in e.run:
        return None
    profile = e.run["secretsProfile"]
    if not isinstance(profile, str) or not ID_RE.fullmatch(profile):
        e.fail("run.secretsProfile", "must be a non-empty name of letters, digits, dot, dash and underscore")
    if "secrets" not in e.run:
        e.fail("run.secretsProfile", "requires run.secrets")
    return profile


def _backend(e: TriggerEntry) -> str | None:
    if "backend" not in e.run:
        return None
    name = e.run["backend"]
    if not isinstance(name, str) or not ID_RE.fullmatch(name) or name not in BACKENDS:
        e.fail("run.backend", f"must name a backend this build knows; accepted: {', '.join(BACKENDS)}")
    if e.is_cron and BACKENDS[name]:
        e.fail("run.backend", "names a remote backend, refused on a cron trigger (its folder is edited in "
                              "place on this machine)")
    return name


def _exclude_tools(e: TriggerEntry) -> tuple[str, ...] | None:
    if "excludeTools" not in e.run:
        return None
    names = e.run["excludeTools"]
    if not isinstance(names, list) or not names:
        e.fail("run.excludeTools", "must be a non-empty array of tool names")
    for position, name in enumerate(names):
        if name not in EXCLUDABLE_TOOLS:
            e.fail(f"run.excludeTools[{position}]",
                   f"must name a tool; accepted: {', '.join(EXCLUDABLE_TOOLS)}")
        if name in names[:position]:
            e.fail(f"run.excludeTools[{position}]", "repeats an earlier tool; accepted: each tool once")
    return tuple(names)


def _shared_fields(e: TriggerEntry) -> dict[str, Any]:
    """The fields every kind carries, checked in one fixed order, under their ``RunSpec`` names."""
    return {
        "packages": _packages(e),
        "image": _image(e),
        "skills_dir": _skills_dir(e),
        "instructions": _instructions(e),
        "resume": _resume(e),
        "repository": None if e.is_cron else _repository(e),
        "replicas": _replicas(e),
        "secrets": _secrets(e),
        "secrets_profile": _secrets_profile(e),
        "backend": _backend(e),
        "wait_for": wait_for(e),
        "exclude_tools": _exclude_tools(e),
        **model_fields(e),
    }


def webhook_run(e: TriggerEntry) -> RunSpec:
    """The validated ``run`` of a label/comment/pull_request/issue entry. ``run.portfolio`` is refused by
    name (forge text must not steer a budget plan); other keys are the key check's."""
    if "portfolio" in e.run:
        e.fail("run.portfolio", "is refused on webhook triggers; accepted: only on cron triggers")
    flow, command = flow_or_command(e)
    return RunSpec(flow=flow, command=command, **_shared_fields(e))


def cron_run(e: TriggerEntry) -> dict[str, Any]:
    """The validated ``run`` of a cron entry in the file's own (camelCase) names, for the scheduler."""
    flow, command = flow_or_command(e)
    run = e.run
    if not nonblank(run.get("folder")):
        e.fail("run.folder", "must be a non-empty string")
    if command is None and not nonblank(run.get("task")):
        e.fail("run.task", "must be a non-empty string beside run.flow")
    # Fields only a forge defines (its credentials for the local job, say), checked before the rest.
    forge_fields = {k: v for f in FORGES for k, v in route_of(f).cron_fields(e).items()}
    fields = _shared_fields(e)
    portfolio = strict_bool(e, "portfolio")
    if portfolio and command is not None:
        e.fail("run.portfolio", "true is refused beside run.command (a plan is written by a flow)")
    spec = RunSpec(flow=flow, command=command, **fields)
    out = {"kind": LOCAL_KIND, "folder": run["folder"], "task": run.get("task"), **forge_fields,
           "portfolio": portfolio, **_camel(spec)}
    return {k: v for k, v in out.items() if v is not None}


def refused_cron_true() -> dict[str, str]:
    """Cron run switches the local job does not act on yet: true is refused (false or absent loads). A
    function: the forges' router halves import this module."""
    forge_keys = {k: "no local job is given forge credentials" for f in FORGES for k in route_of(f).cron_keys}
    return {**forge_keys, "portfolio": "no worker writes a budget plan for a scheduled job"}


def unsupported_run(e: TriggerEntry) -> list[Unsupported]:
    """Every run field of the entry this build does not act on, in the file's order."""
    switches = {**REFUSED_RUN_TRUE, **(refused_cron_true() if e.is_cron else {})}
    found = []
    for key, value in e.run.items():
        if key in REFUSED_RUN:
            found.append(e.unsupported(f"run.{key}", REFUSED_RUN[key], "remove it"))
        elif key in switches and value is True:
            found.append(e.unsupported(f"run.{key} true", switches[key], "accepted: false or absent"))
    return found


_CAMEL = {"skills_dir": "skillsDir", "secrets_profile": "secretsProfile", "wait_for": "waitFor",
          "exclude_tools": "excludeTools", "max_turns": "maxTurns", "max_cost_usd": "maxCostUsd"}


def _camel(spec: RunSpec) -> dict[str, Any]:
    return {_CAMEL.get(f, f): getattr(spec, f) for f in spec.__struct_fields__}
