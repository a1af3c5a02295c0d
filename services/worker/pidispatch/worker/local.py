"""Local jobs: ``pi-dispatch run <folder>`` queues a job on an operator's git folder, and the worker checks
that folder before anything is spent (see "Local jobs" in docs/worker.md).

The folder itself is the job's writable ``/workspace`` and the container runs as the folder's owner, so
what the job writes belongs to the operator, never to root. Every git call goes through ``git.py``, which
lets git read the folder's ``.git`` but never run what it names.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shlex
import stat
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from redis.exceptions import AuthenticationError, RedisError

from pidispatch.common.configsyntax import image_ref_ok, parse_job_user
from pidispatch.common.errors import ConfigError, InfraError
from pidispatch.common.keys import REDIS_OP_TIMEOUT_S, Keys
from pidispatch.common.models import FLOW_RE, LOCAL_KIND, MODEL_RE, Job, text
from pidispatch.common.outcome import InfraFault, JobRefusal
from pidispatch.common.redis import auth_refused, bounded, redis_for, redis_where
from pidispatch.common.runtime import EpochMsClock, now_ms
from pidispatch.common.scripts import enqueue_call
from pidispatch.common.settings import PROVIDER_RE, Settings, load_settings
from pidispatch.worker.forgework.git import (
    GIT_TIMEOUT,
    GIT_TIMEOUT_S,
    GIT_UNAVAILABLE,
    SHA_RE,
    git,
    neutral_filters,
)
from pidispatch.worker.replica import own_stream_settings

if TYPE_CHECKING:
    from pidispatch.common.redis import Redis

_PRINTABLE_ASCII_RE = re.compile(r"^[\x21-\x7e]+$")
MAX_TURNS_RANGE = (1, 10_000)
_MINUTE_FORMAT = "%Y%m%d%H%M"
# The dedup key of a local job is its own id, so only an identical run within the minute is swallowed.
LOCAL_DEDUP_PREFIX = "local:"

NOT_A_REPO = "local-folder-not-a-repo"
NO_COMMIT = "local-folder-no-commit"
UNREADABLE_REPO = "local-folder-unreadable-repo"
USER_UNMAPPABLE = "job-user-unmappable"
# A retried fault; a token only, the folder's path never travels in it.
FOLDER_UNREACHABLE = "local-folder-unreachable"


@dataclass(frozen=True)
class FolderFacts:
    """What the worker learned about a local folder: the commit at HEAD and who owns the folder."""

    sha: str
    uid: int
    gid: int
    basename: str


def local_user(facts: FolderFacts) -> str:
    """The container user of a local job: the folder's owner, so its files stay the operator's."""
    return f"{facts.uid}:{facts.gid}"


def _stat_repo(folder: str) -> os.stat_result | None:
    """The folder's stat, or None when it is missing, not a folder, or has no ``.git`` (stat follows
    symlinks, so a ``.git`` file of a linked work tree counts). Other ``OSError`` propagates."""
    try:
        st = os.stat(folder)
        if not stat.S_ISDIR(st.st_mode):
            return None
        os.stat(os.path.join(folder, ".git"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st


async def inspect_folder(folder: str) -> FolderFacts | JobRefusal:
    """The worker's gate on a local job's folder (ladder row 15, local part), before any spend.

    Refusals, in order: no folder or no ``.git`` (``local-folder-not-a-repo``), git refuses the repository
    (``local-folder-unreadable-repo``), no commit at HEAD (``local-folder-no-commit``), folder owned by
    uid 0 or gid 0 (``job-user-unmappable``: a job never runs as root). Raises ``InfraFault`` (retried)
    for any other filesystem error and when git cannot run.
    """
    if not os.path.isabs(folder):
        return JobRefusal(NOT_A_REPO)
    try:
        st = await asyncio.to_thread(_stat_repo, folder)
    except OSError:
        raise InfraFault(FOLDER_UNREACHABLE) from None
    if st is None:
        return JobRefusal(NOT_A_REPO)
    code, _ = await git(folder, "rev-parse", "--git-dir")
    if code != 0:
        return JobRefusal(UNREADABLE_REPO)
    code, out = await git(folder, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    sha = out.decode(errors="replace").strip()
    if code != 0 or not SHA_RE.match(sha):
        return JobRefusal(NO_COMMIT)
    if st.st_uid == 0 or st.st_gid == 0:
        return JobRefusal(USER_UNMAPPABLE)
    return FolderFacts(sha=sha, uid=st.st_uid, gid=st.st_gid, basename=os.path.basename(folder.rstrip("/")))


def local_job_id(
    folder: str,
    *,
    flow: str | None,
    task: str | None,
    model: str | None,
    image: str | None,
    now_ms: int,
    provider: str | None = None,
    max_turns: int | None = None,
) -> str:
    """Pure: ``local-<sha256[:16]>-<YYYYMMDDHHMM>`` (UTC). The same run asked twice within one minute gets
    the same id (so it is queued once); any other input, or another minute, gives another id."""
    material = json.dumps([folder, flow, task, model, image, provider, max_turns], ensure_ascii=False)
    digest = hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    minute = datetime.fromtimestamp(now_ms // 1000, UTC).strftime(_MINUTE_FORMAT)
    return f"local-{digest}-{minute}"


def follow_hint(job_id: str) -> str:
    """Pure: how to follow a job once it is queued. ``run`` returns at once and a worker runs the job, so
    without this line the operator is left to guess which verb shows it."""
    return (f"follow it: pi-dispatch status (queued and running), then pi-dispatch runs (its record once "
            f"it ends); stop it: pi-dispatch cancel {job_id}")


def queued_minute(job_id: str) -> str:
    """Pure but for the local zone: the ``HH:MM`` (this machine's time) a local job id was made in."""
    stamp = datetime.strptime(job_id.rsplit("-", 1)[-1], _MINUTE_FORMAT).replace(tzinfo=UTC)
    return stamp.astimezone().strftime("%H:%M")


# --- pi-dispatch run ---------------------------------------------------------------------------------

_REFUSAL_TEXT = {
    NOT_A_REPO: "folder {shown} is not the top folder of a git repository (it has no .git); "
                "pass the repository's top folder, or run git init and commit there",
    UNREADABLE_REPO: "git cannot read the repository in folder {shown}; run git status there to see why",
    NO_COMMIT: "the git repository in folder {shown} has no commit yet; commit first (a job starts at HEAD)",
    USER_UNMAPPABLE: "folder {shown} is owned by root (uid or gid 0), and a local job runs as its folder's "
                     "owner, never as root; give it to the job user: chown -R {user} {path} (PI_JOB_USER, "
                     "default 1000:1000), then run again",
}


def _job_user() -> str:
    """``uid:gid`` for a root-owned folder: PI_JOB_USER as the worker reads it, else its default."""

    try:
        return parse_job_user(os.environ.get("PI_JOB_USER", "").strip() or Settings().job_user)
    except ConfigError:
        return Settings().job_user
_FAULT_TEXT = {
    FOLDER_UNREACHABLE: "folder {shown} cannot be read by this account; check its permissions",
    GIT_UNAVAILABLE: "git cannot be started; install git or put it on PATH",
    GIT_TIMEOUT: f"git did not answer within {GIT_TIMEOUT_S:g} s in folder {{shown}}; try again",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """The ``run`` verb's arguments; the caller sets what it runs."""
    p = sub.add_parser(
        "run", help="queue a job on a local git folder (the folder is the job's /workspace)",
        description="Queue a job that edits a local git folder in place (mounted as the job's /workspace) "
        "on this host's worker, or run a cron trigger now with --trigger.",
    )
    p.add_argument("folder", nargs="?", help="the top folder of a git repository with at least one commit")
    p.add_argument("--trigger", metavar="ID", help="run the cron trigger with this on.id now, on this host")
    p.add_argument("--task", help="what the agent should do (required)")
    p.add_argument("--flow", help="the skill the agent should use")
    p.add_argument("--provider", help="provider id (default PI_PROVIDER)")
    p.add_argument("--model", help="model id (default PI_MODEL)")
    p.add_argument("--max-turns", metavar="N", help="turn budget (default PI_MAX_TURNS)")
    p.add_argument("--image", help="job image (default PI_JOB_IMAGE)")
    p.add_argument("--force", action="store_true", help="queue even when the folder has uncommitted changes")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def argument_problem(args: argparse.Namespace) -> str | None:
    """Pure: why the arguments are refused (one line naming the fix), or None."""
    task = args.task
    if task is None or not task.strip():
        return "--task is required: say what the agent should do"
    if any(0xD800 <= ord(c) <= 0xDFFF for c in task):
        return "--task is not valid UTF-8 text"
    if args.flow is not None and not FLOW_RE.fullmatch(args.flow):
        return (f"--flow {args.flow!r} is refused; accepted: 1-64 of a-z 0-9 - _, starting and ending with "
                "a letter or digit")
    if args.provider is not None and not PROVIDER_RE.match(args.provider):
        return f"--provider {args.provider!r} is refused; accepted: a lower-case provider id (anthropic)"
    model = args.model
    if model is not None and not (_PRINTABLE_ASCII_RE.match(model) and MODEL_RE.fullmatch(model.lower())):
        return (f"--model {model!r} is refused; accepted: 1-64 of letters, digits and . _ - : / @, starting "
                "with a letter or digit")
    if args.max_turns is not None and _max_turns(args.max_turns) is None:
        return f"--max-turns {args.max_turns!r} is refused; accepted: a whole number from 1 to 10000"
    if args.image is not None and not image_ref_ok(args.image):
        return (f"--image {args.image!r} is refused; accepted: an image reference without spaces, control "
                "characters or a leading dash")
    return None


def _max_turns(raw: str | None) -> int | None:
    if raw is None or not raw.isascii() or not raw.isdigit():
        return None
    value = int(raw)
    return value if MAX_TURNS_RANGE[0] <= value <= MAX_TURNS_RANGE[1] else None



async def check_folder(path: str, shown: str, *, force: bool) -> FolderFacts | str:
    """The CLI's folder checks, in order: exists, is a repository's top folder with a commit, is readable
    by git, is not owned by root, and has no uncommitted changes (unless ``force``). Returns the folder's
    facts, or one line naming the problem and its fix (``shown`` is the folder as the operator typed it)."""
    if not await asyncio.to_thread(os.path.isdir, path):
        return f"folder {shown} does not exist (or is not a folder); pass the path of a git repository"
    facts = await inspect_folder(path)
    if isinstance(facts, JobRefusal):
        return _REFUSAL_TEXT[facts.reason].format(shown=shown, user=_job_user(), path=shlex.quote(path))
    code, out = await git(path, "rev-parse", "--show-toplevel")
    top = out.decode(errors="replace").strip()
    if code != 0 or await asyncio.to_thread(os.path.realpath, top) != path:
        return f"folder {shown} is not the top folder of its git work tree; pass the top folder"
    overrides = await neutral_filters(path)
    if overrides is None:
        return (f"the git config in folder {shown} declares a filter driver whose name has an '=' (it could "
                "not be switched off); rename or remove it")
    # Submodules are compared by commit only: looking inside them would run their own config's drivers.
    code, out = await git(
        path, "status", "--porcelain", "--untracked-files=normal", "--ignore-submodules=dirty",
        config=overrides,
    )
    if code != 0:
        return _REFUSAL_TEXT[UNREADABLE_REPO].format(shown=shown)
    if out.strip() and not force:
        return f"folder {shown} has uncommitted changes; commit or stash your changes, or pass --force"
    return facts


def build_local_job(args: argparse.Namespace, folder: str, basename: str, now_ms: int) -> Job:
    """Pure: the job ``pi-dispatch run`` queues. It carries no target, so no title or body."""
    provider = args.provider
    max_turns = _max_turns(args.max_turns)
    job_id = local_job_id(
        folder, flow=args.flow, task=args.task, model=args.model, image=args.image, now_ms=now_ms,
        provider=provider, max_turns=max_turns,
    )
    return Job(
        id=job_id, kind=LOCAL_KIND, repo=f"local:{basename}", folder=folder, task=args.task, flow=args.flow,
        provider=provider, model=args.model, max_turns=max_turns, image=args.image, enqueued_at=now_ms,
    )


def _fail(problem: str) -> int:
    print(f"pi-dispatch run: {problem}", file=sys.stderr)
    return 1


async def run_main(args: argparse.Namespace, clock: EpochMsClock) -> int:
    """Every argument and folder check first, then settings, then Redis: a refused run touches nothing."""
    if args.folder is None:
        return _fail("a folder is required: the top folder of a git repository (or --trigger <id>)")
    problem = argument_problem(args)
    if problem is not None:
        return _fail(problem)
    shown = args.folder
    path = await asyncio.to_thread(os.path.realpath, args.folder)
    try:
        facts = await check_folder(path, shown, force=args.force)
    except InfraFault as fault:
        return _fail(_FAULT_TEXT.get(fault.reason, "git failed in folder {shown}").format(shown=shown))
    if isinstance(facts, str):
        return _fail(facts)


    settings = await own_stream_settings(load_settings())
    keys = Keys(settings.key_prefix)
    stream = keys.host_jobs(settings.worker_name) if settings.worker_name_declared else keys.jobs
    job = build_local_job(args, path, facts.basename, clock())
    status, job_id, state = await enqueue_local(settings, keys, stream, job)
    if status == "queued":
        if args.json:
            print(json.dumps({"status": "queued", "jobId": job_id, "folder": facts.basename,
                              "stream": stream}))
        else:
            print(f"queued {job_id} for folder {facts.basename}")
            print(follow_hint(job_id))
        return 0
    at = queued_minute(job_id)
    if args.json:
        print(json.dumps({"status": "duplicate", "jobId": job_id, "state": state, "queuedAt": at}))
    else:
        print(f"an identical run was queued at {at} as {job_id} ({state}); nothing new was queued.")
        print(follow_hint(job_id))
    return 0


async def enqueue_local(settings: Settings, keys: Keys, stream: str, job: Job) -> tuple[str, str, str]:
    """Queue ``job`` once through the ENQUEUE script; returns (``queued``|``duplicate``, job id, state).

    Raises ``InfraError`` naming where Redis was looked for when it does not answer. The script is atomic
    and the id exact, so a retry of the same command within the minute can never queue the run twice.
    """
    redis = redis_for(settings)
    try:
        return await bounded(enqueue_once(redis, keys, stream, job), 2 * REDIS_OP_TIMEOUT_S)
    except AuthenticationError:
        raise auth_refused(settings.redis_url) from None
    except (RedisError, OSError, TimeoutError) as exc:
        raise InfraError(
            f"Redis at {redis_where(settings)} did not answer ({type(exc).__name__}); check that Redis "
            "is running there"
        ) from None
    finally:
        await redis.aclose()


async def enqueue_once(redis: Redis, keys: Keys, stream: str, job: Job) -> tuple[str, str, str]:
    """The ENQUEUE call on an open client: (``queued``|``duplicate``, job id, state). Redis errors
    propagate. The job id is the dedup key, so every caller racing with the same id queues one job."""
    # No pd:events entry made a local job: its state hash keeps eventEntry ''.
    script, names, args = enqueue_call(
        keys, job, keys.dedup(LOCAL_DEDUP_PREFIX + job.id), stream, "", job.enqueued_at or now_ms()
    )
    reply = await script(redis, names, args)
    status, value = text(reply[0]), text(reply[1])
    if status == "queued":
        return "queued", job.id, "queued"
    raw = await redis.hget(keys.job(value), "state")
    return "duplicate", value, text(raw) if raw else "queued"
