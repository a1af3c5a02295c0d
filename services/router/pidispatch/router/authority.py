"""Asking a forge whether an actor may trigger work, one table row per forge.

Every answer is two-armed: ``Authorized(True/False)`` is determinate; ``Indeterminate(reason)`` means
the forge could not answer (network, 5xx, bad JSON, a failed token mint) and the router retries the
event later instead of dropping it. A 404, or a question that is malformed before any call, is a
determinate refusal. Redirects are never followed and every request is bounded.

Determinate verdicts are cached for a minute under a keyed hash of the question, so a burst of
deliveries by one actor costs one call and no login or email sits in the cache. Logs carry the forge
and a reason token, never the login, email, URL path or response body.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeGuard
from urllib.parse import quote

import aiohttp
import yarl

from pidispatch.common.log import get_logger
from pidispatch.common.runtime import MonotonicMsClock, monotonic_ms
from pidispatch.forges import FORGES
from pidispatch.forges.azure import FORGE as AZURE
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.forgejo import FORGE as FORGEJO
from pidispatch.forges.github import FORGE as GITHUB
from pidispatch.forges.github.auth import GithubAuth, api_headers
from pidispatch.forges.gitlab import FORGE as GITLAB
from pidispatch.forges.http import BadBody, Reply, Unreachable, call
from pidispatch.router.lookup import (
    Authorized,
    AzureMembership,
    ForgejoPermission,
    GithubCloser,
    GitlabMember,
    Indeterminate,
    Question,
    Verdict,
)

LOOKUP_TIMEOUT_S = 5.0
CACHE_TTL_MS = 60_000
CACHE_MAX = 1024
WRITE_PERMISSIONS = frozenset({"admin", "write"})
GITLAB_DEVELOPER = 30
AZURE_API_VERSION = "7.1-preview.1"
AZURE_MAX_USER_PAGES = 20
# Log event per forge when its lookup cannot be answered.
FAILED_EVENT = {f.name: f.lookup_failed_event for f in FORGES}



def bad_segment(value: object) -> bool:
    """True unless ``value`` is safe as one URL path segment: a slash, ``?``, ``#``, whitespace or a pure
    dot segment would make the request ask about something other than what we believe we ask."""
    return (
        not isinstance(value, str)
        or value in ("", ".", "..")
        or any(c in "/?#" or c.isspace() for c in value)
    )


def split_repo(repo: object) -> tuple[str, str] | None:
    """``owner/name`` as two safe path segments, or None."""
    if not isinstance(repo, str):
        return None
    owner, sep, name = repo.partition("/")
    if not sep or bad_segment(owner) or bad_segment(name):
        return None
    return owner, name


def seg(value: str) -> str:
    return quote(value, safe="")


def is_int(value: object) -> TypeGuard[int | float]:
    """JSON integer semantics (JavaScript's ``Number.isInteger``): no bools, integral floats count."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


class _Indeterminate(Exception):
    """Internal: one lookup step could not answer; carries the reason token."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class VerdictCache:
    """A small LRU of determinate verdicts, keyed by a per-process keyed hash of the question."""

    def __init__(
        self, clock: MonotonicMsClock, ttl_ms: int = CACHE_TTL_MS, max_entries: int = CACHE_MAX,
    ) -> None:
        self.clock, self.ttl_ms, self.max_entries = clock, ttl_ms, max_entries
        self._salt = os.urandom(16)
        self._entries: OrderedDict[bytes, tuple[bool, int]] = OrderedDict()

    def key(self, question: Question) -> bytes:
        text = f"{type(question).__name__}\0" + "\0".join(
            repr(getattr(question, f)) for f in question.__struct_fields__
        )
        return hashlib.blake2b(text.encode(), key=self._salt, digest_size=16).digest()

    def get(self, key: bytes) -> bool | None:
        hit = self._entries.get(key)
        if hit is None:
            return None
        if self.clock() >= hit[1]:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return hit[0]

    def put(self, key: bytes, value: bool) -> None:
        self._entries[key] = (value, self.clock() + self.ttl_ms)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


class Authority:
    """Answers ``Question``s against the configured forges. Create once; share the HTTP session."""

    def __init__(
        self,
        config: ForgeConfig,
        github_auth: GithubAuth | None,
        http: aiohttp.ClientSession,
        clock: MonotonicMsClock = monotonic_ms,
        *,
        timeout_s: float = LOOKUP_TIMEOUT_S,
        cache_ttl_ms: int = CACHE_TTL_MS,
    ) -> None:
        self.config, self.github_auth, self.http = config, github_auth, http
        self.timeout_s = timeout_s
        self.cache = VerdictCache(clock, cache_ttl_ms)
        self.log = get_logger()

    async def ask(self, question: Question, *, delivery: str | None = None) -> Verdict:
        forge, handler = self._route(question)
        key = self.cache.key(question)
        cached = self.cache.get(key)
        if cached is not None:
            return Authorized(cached)
        try:
            value = await handler(question)
        except _Indeterminate as exc:
            fields = {"delivery": delivery} if delivery else {}
            self.log.warning(FAILED_EVENT[forge], reason=exc.reason, **fields)
            return Indeterminate(exc.reason)
        self.cache.put(key, value)
        return Authorized(value)

    def _route(self, question: Question) -> tuple[str, Callable[[Any], Awaitable[bool]]]:
        if isinstance(question, GithubCloser):
            return GITHUB.name, self._github
        if isinstance(question, GitlabMember):
            return GITLAB.name, self._gitlab
        if isinstance(question, ForgejoPermission):
            return FORGEJO.name, self._forgejo
        if isinstance(question, AzureMembership):
            return AZURE.name, self._azure
        raise TypeError(f"not a lookup question: {type(question).__name__}")

    async def _get(self, url: str | yarl.URL, headers: dict[str, str]) -> Reply:
        try:
            return await call(self.http, "GET", url, headers=headers, timeout_s=self.timeout_s)
        except Unreachable as exc:
            raise _Indeterminate(exc.reason) from None
        except BadBody:
            raise _Indeterminate("bad-json") from None

    @staticmethod
    def _json(reply: Reply) -> object:
        try:
            return reply.json()
        except BadBody:
            raise _Indeterminate("bad-json") from None

    def _permission(self, reply: Reply) -> bool:
        """GitHub and Forgejo share the answer's shape: 404 refuses, admin/write authorise."""
        if reply.status == 404:
            return False
        if not reply.ok:
            raise _Indeterminate(f"status-{reply.status}")
        body = self._json(reply)
        permission = body.get("permission") if isinstance(body, dict) else None
        if not isinstance(permission, str) or not permission:
            # A 200 we do not understand is not a refusal: a schema change must not refuse everyone.
            raise _Indeterminate("no-permission")
        return permission in WRITE_PERMISSIONS

    # --- GitHub: only a close that a close rule wants ------------------------------------------------

    async def _github(self, q: GithubCloser) -> bool:
        repo = split_repo(q.repo)
        if repo is None or bad_segment(q.login):
            return False  # the payload named nothing we could ask about: determinate, no call
        if not self.config.github.configured or self.github_auth is None:
            raise _Indeterminate("not-configured")
        try:
            # App: scoped to the one repo and narrowed to metadata:read, so this token cannot write.
            token = await self.github_auth.token(q.repo, permissions={"metadata": "read"})
        except Exception:  # every mint failure, determinate or not: the closer's standing is unknown
            raise _Indeterminate("token-mint-failed") from None
        url = (f"{self.config.github.api_url}/repos/{seg(repo[0])}/{seg(repo[1])}"
               f"/collaborators/{seg(q.login)}/permission")
        return self._permission(await self._get(yarl.URL(url, encoded=True), api_headers(token)))

    # --- GitLab: every delivery, by numeric ids ------------------------------------------------------

    async def _gitlab(self, q: GitlabMember) -> bool:
        if not is_int(q.project_id) or not is_int(q.user_id) or q.project_id < 1 or q.user_id < 1:
            return False
        cfg = self.config.gitlab
        if cfg.token is None:
            raise _Indeterminate("not-configured")
        # members/all includes access inherited from parent groups, which is how most orgs grant it.
        url = f"{cfg.url}/api/v4/projects/{int(q.project_id)}/members/all/{int(q.user_id)}"
        reply = await self._get(url, {"PRIVATE-TOKEN": cfg.token.reveal()})
        if reply.status == 404:
            return False
        if not reply.ok:
            raise _Indeterminate(f"status-{reply.status}")
        body = self._json(reply)
        level = body.get("access_level") if isinstance(body, dict) else None
        if not is_int(level):
            raise _Indeterminate("no-access-level")
        return level >= GITLAB_DEVELOPER

    # --- Forgejo: every delivery, by login -----------------------------------------------------------

    async def _forgejo(self, q: ForgejoPermission) -> bool:
        repo = split_repo(q.repo)
        if repo is None or bad_segment(q.login):
            return False
        cfg = self.config.forgejo
        if cfg.token is None or cfg.url is None:
            raise _Indeterminate("not-configured")
        url = (f"{cfg.url}/api/v1/repos/{seg(repo[0])}/{seg(repo[1])}"
               f"/collaborators/{seg(q.login)}/permission")
        reply = await self._get(yarl.URL(url, encoded=True), {"Authorization": f"token {cfg.token.reveal()}"})
        return self._permission(reply)

    # --- Azure: project membership through the Graph -------------------------------------------------

    async def _azure(self, q: AzureMembership) -> bool:
        if not isinstance(q.project_id, str) or not q.project_id:
            return False
        cfg = self.config.azure
        if cfg.token is None or cfg.graph_url is None:
            raise _Indeterminate("not-configured")
        # A PAT authenticates as HTTP Basic with an empty user name.
        basic = base64.b64encode(f":{cfg.token.reveal()}".encode()).decode()
        headers = {"Authorization": f"Basic {basic}", "Accept": "application/json"}
        graph = f"{cfg.graph_url}/_apis/graph"

        descriptor = await self._azure_descriptor(q, graph, headers)
        if descriptor is None:
            return False
        scope = await self._azure_value(f"{graph}/descriptors/{seg(q.project_id)}", headers)
        container = scope.get("value") if isinstance(scope, dict) else None
        if not isinstance(container, str) or not container:
            raise _Indeterminate("no-project-descriptor")
        # direction=up is transitive: a member of a team inside the project is a project member.
        body = await self._azure_value(
            f"{graph}/memberships/{seg(descriptor)}", headers, {"direction": "up"}
        )
        memberships = body.get("value") if isinstance(body, dict) else None
        if not isinstance(memberships, list):
            raise _Indeterminate("no-array")
        return any(isinstance(m, dict) and m.get("containerDescriptor") == container for m in memberships)

    async def _azure_value(self, path: str, headers: dict[str, str],
                           query: dict[str, str] | None = None) -> object:
        return self._json(await self._azure_get(path, headers, query))

    async def _azure_get(self, path: str, headers: dict[str, str],
                         query: dict[str, str] | None = None) -> Reply:
        url = yarl.URL(path, encoded=True).update_query({**(query or {}), "api-version": AZURE_API_VERSION})
        reply = await self._get(url, headers)
        if not reply.ok:
            raise _Indeterminate(f"status-{reply.status}")
        return reply

    async def _azure_descriptor(self, q: AzureMembership, graph: str, headers: dict[str, str]) -> str | None:
        """The actor's subject descriptor: by GUID when the event had one, else by walking the user list
        for the email (Graph has no by-mail lookup). Running out of pages is indeterminate, not a no."""
        if isinstance(q.actor_id, str) and q.actor_id:
            body = await self._azure_value(f"{graph}/descriptors/{seg(q.actor_id)}", headers)
            value = body.get("value") if isinstance(body, dict) else None
            return value if isinstance(value, str) and value else None
        if not isinstance(q.actor_email, str) or not q.actor_email:
            return None
        wanted = q.actor_email.lower()
        continuation: str | None = None
        for _ in range(AZURE_MAX_USER_PAGES):
            query = {"subjectTypes": "aad,msa"}
            if continuation:
                query["continuationToken"] = continuation
            reply = await self._azure_get(f"{graph}/users", headers, query)
            body = self._json(reply)
            users = body.get("value") if isinstance(body, dict) else None
            if not isinstance(users, list):
                raise _Indeterminate("no-array")
            for user in users:
                if isinstance(user, dict) and wanted in (
                    str(user.get("principalName") or "").lower(), str(user.get("mailAddress") or "").lower()
                ):
                    found = user.get("descriptor")
                    return found if isinstance(found, str) and found else None
            continuation = reply.headers.get("x-ms-continuationtoken") or None
            if continuation is None:
                return None  # the whole directory was read: a determinate "not in this org"
        raise _Indeterminate("page-cap")
