"""``.pi-dispatch/dev.json``: how the CLI verbs run in a `pi-dispatch dev` folder find that dev.

`dev` writes the file (mode 0600) once its services are up and removes it when it stops. A verb run in
the folder takes the file's values for the variables the operator did not set, so no ``export`` is needed.
Only the CLI verbs read it (``cli.main``); the services never do: their configuration is their environment.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Collection, Mapping, MutableMapping
from pathlib import Path
from typing import TextIO

import msgspec

from pidispatch.common.redis import redis_location

STATE_DIR = ".pi-dispatch"
STATE_FILE = "dev.json"
# What a verb needs to see dev's deployment: its Redis, its rules, its run records, its key prefix, and
# what its jobs run in and talk to (so `doctor` in the folder judges the job image and model dev uses).
SHARED = ("REDIS_URL", "PI_LOGS_DIR", "PI_TRIGGERS_FILE", "PD_KEY_PREFIX", "PI_JOB_IMAGE", "PI_EGRESS",
          "PI_PROVIDER", "PI_MODEL", "PI_MODEL_BASE_URL")
# Credentials dev made itself (its webhook secret, its stand-in forge's token, its stand-in model's key),
# so `doctor` in the folder checks what dev runs. Written only when dev made them, never an operator's own;
# never printed.
DEV_OWNED = ("WEBHOOK_SECRET", "GITHUB_AUTH_SOURCE", "GITHUB_PAT", "GITHUB_API_URL", "GROQ_API_KEY")
# A Redis named by either variable is the operator's explicit choice.
REDIS_VARS = ("REDIS_URL", "VALKEY_URL")


class DevState(msgspec.Struct, frozen=True):
    pid: int
    env: dict[str, str]


def merge(
    env: Mapping[str, str], state: DevState | None, alive: bool, where: str
) -> tuple[dict[str, str], list[str]]:
    """Pure: the variables to add to ``env`` from a dev state file, and the lines to say on stderr.

    Explicit wins: a set variable is kept, but a set Redis that differs from a live dev's is named (a stale
    ``export`` from an earlier dev is the usual cause)."""
    if state is None:
        return {}, []
    if not alive:
        return {}, [f"pi-dispatch: ignoring {where}: the dev that wrote it (pid {state.pid}) is not running"]
    notes = []
    explicit = next((env[v] for v in REDIS_VARS if env.get(v)), None)
    dev_redis = state.env.get("REDIS_URL")
    if explicit is not None and dev_redis and explicit != dev_redis:
        notes.append(
            f"pi-dispatch: REDIS_URL is set to {redis_location(explicit)} but the dev running here (pid "
            f"{state.pid}, {where}) uses {redis_location(dev_redis)}; using the set one "
            "(unset REDIS_URL to use dev's)"
        )
    added = {k: v for k, v in state.env.items() if (k in SHARED or k in DEV_OWNED) and not env.get(k)}
    if explicit is not None:
        added.pop("REDIS_URL", None)
    return added, notes


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but alive
    return True


def read_state(path: Path) -> DevState | None:
    """The file's state, or None when there is none (or it is unreadable: a verb must not fail on it)."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=DevState)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def apply(environ: MutableMapping[str, str], cwd: Path, err: TextIO = sys.stderr) -> None:
    """Fill ``environ`` from ``cwd/.pi-dispatch/dev.json``; a dead dev's file is said once, then removed."""
    path = cwd / STATE_DIR / STATE_FILE
    state = read_state(path)
    if state is None:
        return
    alive = pid_alive(state.pid)
    added, notes = merge(environ, state, alive, str(Path(STATE_DIR) / STATE_FILE))
    for line in notes:
        print(line, file=err)
    if not alive:
        path.unlink(missing_ok=True)
    environ.update(added)


def not_here(environ: Mapping[str, str], cwd: Path) -> str | None:
    """Why a verb found no deployment, when it looked only at the defaults: no Redis variable is set and no
    dev runs in ``cwd``. The sentence says what to do; None when the operator named a Redis."""
    if any(environ.get(name) for name in (*REDIS_VARS, "REDIS_SENTINELS")):
        return None
    if (cwd / STATE_DIR / STATE_FILE).exists():
        return None
    return (f"no pi-dispatch dev runs in this folder (no {STATE_DIR}/{STATE_FILE} here) and REDIS_URL is not "
            "set: cd to the folder where ./scripts/dev runs, or set REDIS_URL")


def write_state(
    state_dir: Path, env: Mapping[str, str], pid: int, own: Collection[str] = ()
) -> Path:
    """Write the file mode 0600 from creation (a new name, then renamed over any leftover): the shared
    variables, and of ``DEV_OWNED`` those in ``own`` (the ones dev made)."""
    path = state_dir / STATE_FILE
    tmp = state_dir / f".{STATE_FILE}.{pid}"
    tmp.unlink(missing_ok=True)
    names = [*SHARED, *(n for n in DEV_OWNED if n in own)]
    data = {"pid": pid, "env": {k: env[k] for k in names if env.get(k)}}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def remove_state(state_dir: Path, pid: int) -> None:
    """Remove the file if it is still this dev's (a second dev in the folder may have written its own)."""
    path = state_dir / STATE_FILE
    state = read_state(path)
    if state is not None and state.pid == pid:
        path.unlink(missing_ok=True)
