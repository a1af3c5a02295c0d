"""The model knobs of a ``run``: ``provider``, ``model``, ``maxTurns``, ``models`` and
``maxCostUsd``. Pure value grammar; ``null`` is absent for all five (a hand-written ``"model": null`` has
always meant the deployment default). Refusals name the field, never the value.
"""

from __future__ import annotations

import re
from typing import Any

from pidispatch.common.dollars import USD_ACCEPTED, usd_micros
from pidispatch.common.models import MODEL_RE
from pidispatch.triggers.refusal import JS_MAX_SAFE_INTEGER, TriggerEntry, integer

# Applied after lower-casing (the case as written is what the job runs with: model ids are case-sensitive).
PROVIDER_RE = re.compile(r"(?=.{1,64}$)[a-z0-9][a-z0-9._-]*", re.ASCII)
# Checked on the value as written, before lower-casing: lower-casing is not closed over ASCII (the Kelvin sign
# becomes a plain "k"), so a homoglyph would otherwise pass and name a model nobody listed.
_PRINTABLE_ASCII_RE = re.compile(r"[\x21-\x7e]+")
MODELS_MAX = 16

PROVIDER_ACCEPTED = ("a provider id of 1 to 64 characters: letters, digits, dot, dash and underscore, "
                     "starting with a letter or digit")
MODEL_ACCEPTED = ("a model id of 1 to 64 characters: letters, digits and . _ - : / @, starting with a "
                  "letter or digit (or ~ or @ then one)")


def provider_ok(value: Any) -> bool:
    return (isinstance(value, str) and bool(_PRINTABLE_ASCII_RE.fullmatch(value))
            and bool(PROVIDER_RE.fullmatch(value.lower())))


def model_ok(value: Any) -> bool:
    return (isinstance(value, str) and bool(_PRINTABLE_ASCII_RE.fullmatch(value))
            and bool(MODEL_RE.fullmatch(value.lower())))


def split_model_entry(entry: Any) -> tuple[str, str] | None:
    """``provider/model`` split at the first ``/`` (a model id may carry more), original case, or None."""
    if not isinstance(entry, str) or "/" not in entry:
        return None
    provider, model = entry.split("/", 1)
    return (provider, model) if provider_ok(provider) and model_ok(model) else None


def models_problem(models: Any) -> str | None:
    """Why an allowed-model list is refused, or None; the position is named, never the entry text."""
    if not isinstance(models, list):
        return "must be an array of provider/model strings"
    if not 1 <= len(models) <= MODELS_MAX:
        # Empty is neither "unrestricted" nor "nothing allowed": leave the field out for no restriction.
        return f"must have 1 to {MODELS_MAX} entries (leave it out for no restriction)"
    seen: set[str] = set()
    for position, entry in enumerate(models, start=1):
        if split_model_entry(entry) is None:
            return (f"entry {position} must be provider/model: a provider id, a slash, then a model id "
                    "(each 1 to 64 characters, no spaces)")
        if entry.lower() in seen:
            return f"entry {position} repeats an earlier entry (compared ignoring case)"
        seen.add(entry.lower())
    return None


def model_fields(e: TriggerEntry) -> dict[str, Any]:
    """The five fields that are set (not absent, not null), validated, under their ``RunSpec`` names."""
    run, out = e.run, {}
    provider, model = run.get("provider"), run.get("model")
    if provider is not None:
        if not provider_ok(provider):
            e.fail("run.provider", f"must be {PROVIDER_ACCEPTED}")
        out["provider"] = provider
    if model is not None:
        if not model_ok(model):
            e.fail("run.model", f"must be {MODEL_ACCEPTED}")
        out["model"] = model
    if run.get("maxTurns") is not None:
        turns = integer(run["maxTurns"])
        if turns is None or not 1 <= turns <= JS_MAX_SAFE_INTEGER:
            e.fail("run.maxTurns", "must be a positive integer")
        out["max_turns"] = turns
    if run.get("models") is not None:
        problem = models_problem(run["models"])
        if problem is not None:
            e.fail("run.models", problem)
        # The file alone answers whether its own model is allowed; a default-filled one is the worker's.
        if provider is not None and model is not None and f"{provider}/{model}" not in run["models"]:
            e.fail("run.models", "does not list this trigger's own run.provider/run.model, so every job "
                                 "it starts would be refused; accepted: a list naming it exactly")
        out["models"] = tuple(run["models"])
    if run.get("maxCostUsd") is not None:
        if usd_micros(run["maxCostUsd"]) is None:
            e.fail("run.maxCostUsd", f"must be {USD_ACCEPTED} (a string or a number)")
        # Carried as written: the worker parses the same text, so the two cannot disagree on rounding.
        out["max_cost_usd"] = run["maxCostUsd"]
    return out
