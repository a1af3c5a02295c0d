"""git, run hardened: a repository's own files may be read but never run (see "Local jobs" and "Forge
jobs" in docs/worker.md).

A local folder's ``.git`` is writable by every job that ran there before, and a cloned repository's content
is untrusted, so git may read them but never run what they name (hooks, fsmonitor, filter drivers,
pagers, credential helpers, the ext transport).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Mapping

from pidispatch.common.outcome import InfraFault

GIT_TIMEOUT_S = 10.0
GIT_HARDENING = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.fsmonitor=false",
    "-c", "protocol.ext.allow=never",
    "-c", "credential.helper=",
)
# A full commit id, in either object format (SHA-1 or SHA-256).
SHA_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
# Retried faults; tokens only, the folder's path never travels in them.
GIT_UNAVAILABLE = "git-unavailable"
GIT_TIMEOUT = "git-timeout"


def git_env(base: Mapping[str, str], folder: str) -> dict[str, str]:
    """Pure: git's environment. Every inherited ``GIT_*`` goes (a stray ``GIT_DIR`` or
    ``GIT_CONFIG_PARAMETERS`` would point git elsewhere or re-arm what the flags disarm), git never
    prompts, never takes optional locks, and never looks for a repository above the folder."""
    env = {k: v for k, v in base.items() if not k.startswith("GIT_")}
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        GIT_CEILING_DIRECTORIES=os.path.dirname(folder.rstrip("/")) or "/",
    )
    return env


async def git(
    folder: str, *args: str | bytes, config: tuple[str | bytes, ...] = (),
    timeout_s: float | None = GIT_TIMEOUT_S, env: Mapping[str, str] | None = None, with_stderr: bool = False,
) -> tuple[int, bytes]:
    """Run one hardened git command in ``folder``; returns (exit code, stdout, plus stderr when
    ``with_stderr``). Output is never logged: it may echo URLs or paths.

    ``safe.directory`` names the folder so a worker account can read a folder the operator owns. ``env``
    replaces ``git_env(os.environ, folder)``. git runs in its own session, so a timeout or a cancel kills
    its helpers (remote-https, index-pack) too. Raises ``InfraFault`` when git cannot be started or does
    not finish in time.
    """
    argv = ["git", *GIT_HARDENING, "-c", f"safe.directory={folder}", *config, "--no-pager", "-C", folder]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT if with_stderr else asyncio.subprocess.DEVNULL,
            env=dict(env) if env is not None else git_env(os.environ, folder), start_new_session=True,
        )
    except OSError:
        raise InfraFault(GIT_UNAVAILABLE) from None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        raise InfraFault(GIT_TIMEOUT) from None
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    # Killed by a signal reads as a negative code: a failure like any other.
    return (proc.returncode if proc.returncode is not None else -1), out


async def neutral_filters(folder: str) -> tuple[bytes, ...] | None:
    """``-c`` pairs that switch off every filter driver the repository's own config declares (``git
    status`` runs a driver's clean command on files whose stat changed). The operator's global and
    system drivers (git-lfs) stay. None when a driver's name cannot be written as a ``-c`` key."""
    code, out = await git(folder, "config", "-z", "--show-scope", "--name-only", "--get-regexp", r"^filter\.")
    if code in (0, 1):
        fields = out.split(b"\0")
        scoped = list(zip(fields[0::2], fields[1::2], strict=False))
    else:
        # A git older than --show-scope (2.26): switch off every driver, whoever declared it.
        code, out = await git(folder, "config", "-z", "--name-only", "--get-regexp", r"^filter\.")
        scoped = [(b"local", key) for key in out.split(b"\0")] if code == 0 else []
    names = {key[len(b"filter."):].rpartition(b".")[0] for scope, key in scoped
             if key.startswith(b"filter.") and scope not in (b"system", b"global")}
    pairs: list[bytes] = []
    for name in sorted(names):
        if not name:
            continue  # ``filter.<var>`` without a driver name declares no driver
        if b"=" in name:
            return None
        for var, value in ((b"clean", b""), (b"smudge", b""), (b"process", b""), (b"required", b"false")):
            pairs += [b"-c", b"filter." + name + b"." + var + b"=" + value]
    return tuple(pairs)
