"""Pure checks of what a forge's API answered and of a forge job's address (no I/O).

A determinate problem is a ``JobConfigRefused`` (the worker records ``config-refused``); a garbled answer
that a retry may fix is an ``InfraFault``. No message quotes a token, URL, repository name or body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

from pidispatch.common.models import Job
from pidispatch.common.outcome import InfraFault, JobConfigRefused
from pidispatch.forges.http import is_transient_status

# Reason tokens of retried forge faults.
UNAVAILABLE = "forge-unavailable"
RATE_LIMITED = "forge-rate-limited"
SHA_RE = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_REF_FORBIDDEN = frozenset(" ~^:?*[\\\x7f")
TARGET_TYPES = ("issue", "pull_request")


def failure(
    forge: str, status: int, headers: Mapping[str, str], what: str, variables: str
) -> JobConfigRefused | InfraFault:
    """The exception for a non-2xx answer: rate limits and outages are retried, the rest is refused."""
    lowered = {k.lower(): v for k, v in headers.items()}
    if status == 429 or (status == 403 and is_transient_status(status, lowered)):
        return InfraFault(RATE_LIMITED)
    if is_transient_status(status, lowered):
        return InfraFault(UNAVAILABLE)
    return JobConfigRefused(
        f"the {forge} API refused {what} (HTTP {status}); check {variables} and that "
        "those credentials can read this repository"
    )


def check_branch(name: object, forge: str) -> str:
    """A branch name git would accept as a ref component and that cannot pass as an option."""
    if not isinstance(name, str) or not (
        0 < len(name) <= 255 and name.isprintable() and not set(name) & _REF_FORBIDDEN
        and not name.startswith(("-", "/", ".")) and not name.endswith(("/", ".", ".lock"))
        and not any(bad in name for bad in ("..", "//", "@{", "/.")) and name != "@"
    ):
        raise JobConfigRefused(
            f"the {forge} API named a default branch that is not a usable branch name; the "
            "repository's default branch must be an ordinary git branch"
        )
    return name


def check_sha(value: object) -> str:
    if not isinstance(value, str) or not SHA_RE.match(value):
        raise InfraFault(UNAVAILABLE)  # the documented answer always has one: a garbled body
    return value


def check_clone_url(raw: object, api_base: str, forge: str) -> str:
    """http(s), a host, no credentials, query or fragment; https unless the API itself is plain http."""
    schemes = ("http", "https") if urlsplit(api_base).scheme == "http" else ("https",)
    try:
        parts = urlsplit(raw) if isinstance(raw, str) else None
        host = parts.hostname if parts is not None else None
        if parts is not None:
            parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        parts, host = None, None
    if (
        parts is None or not isinstance(raw, str) or not host or parts.scheme not in schemes
        or "@" in parts.netloc or "?" in raw or "#" in raw or not raw.isprintable() or " " in raw
    ):
        accepted = " or ".join(f"{s}://host/path" for s in schemes)
        raise JobConfigRefused(
            f"the {forge} API answered a clone URL that is refused; accepted: {accepted} "
            "without credentials, query or fragment"
        )
    return raw


def target_of(job: Job) -> tuple[str, int]:
    """(type, number) of the item to comment on; a job without one has nowhere to be answered."""
    t = job.target
    if (
        t is None or t.type not in TARGET_TYPES or isinstance(t.number, bool)
        or not isinstance(t.number, int) or t.number < 1
    ):
        raise JobConfigRefused("this job names no issue or pull request to comment on")
    return t.type, t.number


def seg(value: str) -> str:
    return quote(value, safe="")


def segment_ok(value: object) -> bool:
    return (isinstance(value, str) and value not in ("", ".", "..") and value.isprintable()
            and not any(c in "/?#" or c.isspace() for c in value))


def owner_name(job: Job) -> tuple[str, str]:
    owner, sep, name = job.repo.partition("/") if isinstance(job.repo, str) else ("", "", "")
    if not sep or not segment_ok(owner) or not segment_ok(name):
        raise JobConfigRefused(f"a {job.kind} job needs its repository as owner/name; this job's is unusable")
    return owner, name


def dig(data: object, *path: str) -> object:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def default_branch_of(value: object, forge: str) -> str:
    if value is None:
        raise JobConfigRefused(
            f"the {forge} repository has no default branch (is it empty?); nothing to run on"
        )
    return check_branch(value, forge)
