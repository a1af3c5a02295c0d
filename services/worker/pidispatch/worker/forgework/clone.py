"""A forge job's ``/workspace``: a hardened, one-commit clone of the repository (see "Forge jobs" in
docs/worker.md).

The token reaches git only through a throw-away askpass script in a fresh temp folder outside the job
folder; the script holds no secret either, it prints ``GIT_ASKPASS_TOKEN`` from git's environment. So the
token is never in argv, the URL, ``.git/config`` or any file the agent can read. Every git call is
hardened by ``git.py`` and sees no system, user or inherited git configuration: the repository
content is untrusted, and so is whatever the worker's account has configured for its own use.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from urllib.parse import urlsplit

from pidispatch.common.log import get_logger
from pidispatch.common.outcome import InfraFault, JobConfigRefused, JobRefusal
from pidispatch.worker.forgework.git import SHA_RE, git, git_env

CLONE_FAILED = "clone-failed"
SHA_GONE = "sha-gone"
CLONE_TIMEOUT_S = 120.0
# What git says when the commit is no longer on the forge (force-pushed away, deleted branch).
SHA_GONE_MARKERS = (
    b"couldn't find remote ref",
    b"not our ref",
    b"unadvertised object",
    b"did not send all necessary objects",
    b"reference is not a tree",
)
ASKPASS_NAME = "askpass"
# git asks "Username for '<url>': " then "Password for '<url>': "; answers come from git's own environment.
ASKPASS_SCRIPT = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$GIT_ASKPASS_USERNAME" ;;
  *) printf '%s\\n' "$GIT_ASKPASS_TOKEN" ;;
esac
"""
# Not followed: a redirect to another host would be answered with the token too.
_FETCH_CONFIG = ("-c", "http.followRedirects=false")
_CHECKOUT_CONFIG = ("-c", "advice.detachedHead=false")


def _printable(value: str) -> bool:
    return all(0x20 < ord(c) < 0x7F for c in value)


def clone_problem(*, clone_url: str, sha: str, token: str, username: str) -> str | None:
    """Pure: why these clone inputs are refused (one line, never echoing the URL or token), or None."""
    if not SHA_RE.match(sha):
        return "clone sha is refused; accepted: 40 or 64 lower-case hex digits"
    try:
        parts = urlsplit(clone_url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return "clone URL does not parse; accepted: an http or https URL"
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        return "clone URL is refused; accepted: an http or https URL with a host"
    if "@" in parts.netloc:
        return "clone URL carries user information; accepted: a URL without user or token"
    if not _printable(clone_url) or parts.fragment:
        return "clone URL is refused; accepted: printable ASCII without spaces or a fragment"
    if not token.strip() or not _printable(token):
        return "forge token is empty or not printable; accepted: a non-empty token without spaces"
    if not _printable(username) or not username or ":" in username:
        return "git username is refused; accepted: a non-empty name without spaces or ':'"
    return None


def classify(output: bytes) -> JobRefusal | None:
    """Pure: a failed git call whose output says the commit is gone is ``sha-gone``; else None (retried)."""
    lowered = output.lower()
    return JobRefusal(SHA_GONE) if any(m in lowered for m in SHA_GONE_MARKERS) else None


def clone_env(base: Mapping[str, str], workspace: str, home: str) -> dict[str, str]:
    """Pure: git's environment for the clone. ``git.git_env`` drops every inherited ``GIT_*``; on top,
    no system config, ``HOME`` (so no user config) in the throw-away folder, and messages in English so
    ``classify`` can read them."""
    env = git_env(base, workspace)
    for name in ("LANGUAGE", "SSH_ASKPASS", "XDG_CONFIG_HOME"):
        env.pop(name, None)
    env.update(HOME=home, XDG_CONFIG_HOME=home, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    return env


def _make_askpass_home() -> str:
    home = tempfile.mkdtemp(prefix="pd-askpass-")
    try:
        os.chmod(home, 0o700)
        script = os.path.join(home, ASKPASS_NAME)
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(ASKPASS_SCRIPT)
        os.chmod(script, 0o700)  # the umask may have narrowed the create mode
    except BaseException:
        shutil.rmtree(home, ignore_errors=True)
        raise
    return home


def hand_over(workspace: str) -> None:
    """Make the clone the job user's, as ``workspace.py`` made the empty folder: as root, chown every
    entry to the folder's owner; otherwise open the modes (PI_JOBS_DIR above is 0700). Symlinks from the
    repository are never followed: one may point at any host file."""
    st = os.stat(workspace)
    as_root = os.geteuid() == 0

    def fail(exc: OSError) -> None:
        raise exc

    for top, dirs, files in os.walk(workspace, onerror=fail):
        for name in (*dirs, *files):
            path = os.path.join(top, name)
            if as_root:
                os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)
                continue
            entry = os.lstat(path)
            if stat.S_ISLNK(entry.st_mode):
                continue
            mode = stat.S_IMODE(entry.st_mode)
            wanted = 0o777 if stat.S_ISDIR(entry.st_mode) else mode | 0o666 | (0o111 if mode & 0o100 else 0)
            if wanted != mode:
                os.chmod(path, wanted)


def _fault(code: str | int) -> InfraFault:
    get_logger().warning("clone_failed", code=code)
    return InfraFault(CLONE_FAILED)


async def _clone(
    workspace: str, clone_url: str, sha: str, token: str, username: str, home: str
) -> JobRefusal | None:
    env = clone_env(os.environ, workspace, home)
    secret_env = {
        **env,
        "GIT_ASKPASS": os.path.join(home, ASKPASS_NAME),
        "GIT_ASKPASS_TOKEN": token,
        "GIT_ASKPASS_USERNAME": username,
    }
    object_format = ("--object-format=sha256",) if len(sha) == 64 else ()
    steps: tuple[tuple[Mapping[str, str], tuple[str, ...], tuple[str, ...]], ...] = (
        # No templates: nothing from the host's template folder (sample hooks, excludes) lands in .git.
        (env, ("init", "-q", "--template=", *object_format), ()),
        (env, ("remote", "add", "origin", clone_url), ()),
        # Only the fetch talks to the forge, so only the fetch carries the token.
        (secret_env, ("fetch", "--depth=1", "--no-tags", "--no-recurse-submodules", "origin", sha),
         _FETCH_CONFIG),
        (env, ("checkout", "--detach", "FETCH_HEAD"), _CHECKOUT_CONFIG),
    )
    for step_env, args, config in steps:
        try:
            # No per-call bound: clone_tip bounds the whole clone, and a cancel kills git's session.
            code, out = await git(
                workspace, *args, config=config, timeout_s=None, env=step_env, with_stderr=True
            )
        except InfraFault:
            raise _fault("git-unavailable") from None
        if code != 0:
            refusal = classify(out)
            if refusal is not None:
                return refusal
            raise _fault(code)
    try:
        await asyncio.to_thread(hand_over, workspace)
    except OSError:
        raise _fault("hand-over") from None
    return None


async def clone_tip(
    workspace: str,
    *,
    clone_url: str,
    sha: str,
    token: str,
    username: str,
    timeout_s: float = CLONE_TIMEOUT_S,
) -> JobRefusal | None:
    """Fill ``workspace`` (created and empty) with the commit ``sha`` of ``clone_url``, depth 1, detached.

    Returns ``JobRefusal("sha-gone")`` when the forge no longer has the commit, None on success. Raises
    ``JobConfigRefused`` for a malformed sha, URL (not http/https, or with user information), token or
    username, and ``InfraFault("clone-failed")`` (retried) for anything else, a timeout included.
    ``username`` is what git sends beside the token: ``x-access-token`` (GitHub), ``oauth2`` (GitLab),
    any name elsewhere.
    """
    problem = clone_problem(clone_url=clone_url, sha=sha, token=token, username=username)
    if problem is not None:
        raise JobConfigRefused(problem)
    try:
        home = await asyncio.to_thread(_make_askpass_home)
    except OSError:
        raise _fault("askpass") from None
    try:
        async with asyncio.timeout(timeout_s):
            return await _clone(workspace, clone_url, sha, token, username, home)
    except TimeoutError:
        raise _fault("timeout") from None
    finally:
        await asyncio.to_thread(shutil.rmtree, home, True)
