"""Scoped limits: job-count windows and a concurrency ceiling for one repository or folder
(``PI_SCOPED_LIMITS_FILE``).

    {"version": 1 | 2, "limits": [{"scope": "owner/name" | "<forge>:owner/name" | "/abs/folder",
                                   "day": 10, "week": 40, "month": 100, "concurrent": 2}]}

``scope`` is a forge job's repository on any forge (``owner/name``), on one forge (``<forge>:owner/name``,
version 2 only), or an absolute folder, which holds the local jobs of that folder and of every folder
beneath it. ``day``, ``week`` and ``month`` count jobs per UTC window like the fleet's caps; ``concurrent``
is how many of the scope's jobs run at once. A job counts against every row that holds it, narrowest
first (the repository row, or the deepest folder first). Every key is checked at load; a bad file refuses
the start (exit 2) and a bad edit keeps the last good limits.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence

import msgspec

from pidispatch import forges
from pidispatch.common.errors import ConfigError
from pidispatch.common.filewatch import read_config_file
from pidispatch.common.models import Job

VARIABLE = "PI_SCOPED_LIMITS_FILE"
VERSIONS = (1, 2)
WINDOWS = ("day", "week", "month")
_FILE_KEYS = frozenset({"version", "limits"})
_ROW_KEYS = frozenset({"scope", *WINDOWS, "concurrent"})
# Keys other deployments of this file format know; named apart so the refusal says they are not built.
_NOT_BUILT = frozenset({"dayUsd", "weekUsd", "monthUsd", "memory", "cpus", "hostShare", "minJobs"})
_REPO_RE = re.compile(r"^[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)+$")
# Upper bounds as for the fleet-wide caps (PI_DAILY_CAP and its siblings).
_MAX = {"day": 1_000_000, "week": 10_000_000, "month": 100_000_000, "concurrent": 10_000}
MAX_BYTES = 256 * 1024


class ScopedLimit(msgspec.Struct, frozen=True, kw_only=True):
    scope: str  # as written (a folder normalised), for log lines and the counters' names
    forge: str | None = None  # set for a forge-qualified repository
    repo: str | None = None  # casefolded owner/name for repository rows
    folder: str | None = None  # for folder rows
    day: int | None = None
    week: int | None = None
    month: int | None = None
    concurrent: int | None = None

    @property
    def digest(self) -> str:
        """16 hex digits naming this row's counters and leases: the same row on every host."""
        canon = self.folder or f"{self.forge or ''}:{self.repo}"
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    def holds(self, job: Job) -> bool:
        if self.folder is not None:
            if not job.is_local or not job.folder:
                return False
            folder = os.path.normpath(job.folder)
            return folder == self.folder or folder.startswith(self.folder.rstrip("/") + "/")
        if job.is_local or (self.forge is not None and job.kind != self.forge):
            return False
        return job.repo.casefold() == self.repo

    def caps(self) -> dict[str, int]:
        """The windows this row sets, day first."""
        found = {"day": self.day, "week": self.week, "month": self.month}
        return {name: cap for name, cap in found.items() if cap is not None}


def _narrowness(row: ScopedLimit) -> int:
    if row.folder is not None:
        return -row.folder.rstrip("/").count("/")  # the deepest folder first
    return 0 if row.forge is not None else 1  # one forge's repository before any forge's


def rows_for(limits: Sequence[ScopedLimit], job: Job) -> tuple[ScopedLimit, ...]:
    """Pure: the rows that hold ``job``, narrowest first."""
    return tuple(sorted((row for row in limits if row.holds(job)), key=_narrowness))


def parse_limits(text: str, name: str) -> tuple[ScopedLimit, ...]:
    """The rows of a file's text; ``ConfigError`` naming the file and the field otherwise."""
    shape = '{"version": 1 or 2, "limits": [...]}'
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError(f"{name} is not JSON; accepted: {shape}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: accepted: {shape}")
    if unknown := sorted(set(data) - _FILE_KEYS):
        raise ConfigError(f"{name}: {unknown[0]} is refused; accepted: version, limits")
    version = data.get("version")
    if isinstance(version, bool) or version not in VERSIONS:
        raise ConfigError(f"{name}: version is refused; accepted: 1 or 2")
    raw = data.get("limits")
    if not isinstance(raw, list):
        raise ConfigError(f"{name}: limits must be a list")
    rows = tuple(_row(r, f"{name}: limits[{i}]", version) for i, r in enumerate(raw))
    _no_duplicates(rows, name)
    return rows


def _row(raw: object, where: str, version: int) -> ScopedLimit:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be an object with scope and at least one of day, week, month, "
                          "concurrent")
    for key in sorted(set(raw) - _ROW_KEYS):
        built = "is not implemented" if key in _NOT_BUILT else "is refused"
        raise ConfigError(f"{where}.{key} {built}; accepted: {', '.join(sorted(_ROW_KEYS))}")
    counts = {key: _count(raw.get(key), f"{where}.{key}", key) for key in (*WINDOWS, "concurrent")}
    if all(v is None for v in counts.values()):
        raise ConfigError(f"{where} sets no limit; accepted: at least one of day, week, month, concurrent")
    forge, repo, folder = _scope(raw.get("scope"), f"{where}.scope", version)
    return ScopedLimit(
        scope=folder or (f"{forge}:{repo}" if forge else repo or ""), forge=forge,
        repo=repo.casefold() if repo else None, folder=folder, **counts,
    )


def _count(raw: object, where: str, key: str) -> int | None:
    if raw is None:
        return None
    low = 1 if key == "concurrent" else 0
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= _MAX[key]:
        raise ConfigError(f"{where} is refused; accepted: a whole number from {low} to {_MAX[key]}")
    return raw


def _scope(raw: object, where: str, version: int) -> tuple[str | None, str | None, str | None]:
    """(forge, repository, folder) of a scope, exactly one of repository and folder set."""
    qualified = "<forge>:owner/name" if version >= 2 else "(with version 2) <forge>:owner/name"
    accepted = f"accepted: owner/name, {qualified} with forge one of {', '.join(forges.names())}, " \
               "or an absolute folder"
    if not isinstance(raw, str) or not raw:
        raise ConfigError(f"{where} is refused; {accepted}")
    if raw.startswith("/"):
        if raw != os.path.normpath(raw):
            raise ConfigError(f"{where} is refused; accepted: an absolute folder written without . or .. "
                              "or a trailing /")
        return None, None, raw
    forge, sep, repo = raw.rpartition(":")
    if sep and (version < 2 or forge not in forges.names()):
        raise ConfigError(f"{where} is refused; {accepted}")
    if not _REPO_RE.match(repo):
        raise ConfigError(f"{where} is refused; {accepted}")
    return forge or None, repo, None


def _no_duplicates(rows: Sequence[ScopedLimit], name: str) -> None:
    """One row per scope; a repository's bare row beside a forge's row for it would count it twice."""
    folders: set[str] = set()
    bare: set[str] = set()
    qualified: set[tuple[str, str]] = set()
    for i, row in enumerate(rows):
        if row.folder is not None:
            repeated = row.folder in folders
            folders.add(row.folder)
        elif row.forge is None:
            repeated = row.repo in bare or any(repo == row.repo for _, repo in qualified)
            bare.add(row.repo or "")
        else:
            repeated = row.repo in bare or (row.forge, row.repo or "") in qualified
            qualified.add((row.forge, row.repo or ""))
        if repeated:
            raise ConfigError(f"{name}: limits[{i}].scope repeats an earlier row's scope; accepted: one row "
                              "per folder, and per repository either bare or forge-qualified")


def load_limits(path: str) -> tuple[ScopedLimit, ...]:
    """Read and validate ``path`` (blocking: call through a thread)."""
    text = read_config_file(path, VARIABLE, MAX_BYTES)
    return parse_limits(text, os.path.basename(path) or path)
