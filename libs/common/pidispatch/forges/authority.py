"""Asking a forge whether an actor may trigger work: the cache, the log line and the HTTP helpers here,
each forge's own question and lookup in its package (``RouterForge.authorize``).

Every answer is two-armed: ``Authorized(True/False)`` is determinate; ``Indeterminate(reason)`` means
the forge could not answer (network, 5xx, bad JSON, a failed token mint) and the router retries the
event later instead of dropping it. A 404, or a question that is malformed before any call, is a
determinate refusal. Redirects are never followed and every request is bounded.

Determinate verdicts are cached for a minute under a keyed hash of the question, so a burst of
deliveries by one actor costs one call and no login or email sits in the cache. Logs carry the forge
and a reason token, never the login, email, URL path or response body.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from typing import Protocol
from urllib.parse import quote

import aiohttp
import yarl

from pidispatch import forges
from pidispatch.common.log import get_logger
from pidispatch.common.runtime import MonotonicMsClock, monotonic_ms
from pidispatch.forges import FORGES
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.http import BadBody, Reply, Unreachable, call
from pidispatch.forges.route import RouterForge, TokenSources, route_of
from pidispatch.triggers.lookup import Authorized, Indeterminate, Question, Verdict

LOOKUP_TIMEOUT_S = 5.0
CACHE_TTL_MS = 60_000
CACHE_MAX = 1024
WRITE_PERMISSIONS = frozenset({"admin", "write"})
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


class LookupCounter(Protocol):
    """Where each lookup's result is counted (the router's metrics); the library owns no registry."""

    def looked_up(self, forge: str, result: str) -> None: ...


class CannotAnswer(Exception):
    """One lookup step could not answer (the verdict is ``Indeterminate``); carries the reason token."""

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
    """Answers ``Question``s against the configured forges. Create once; share the HTTP session.

    ``sources`` holds each forge's token source (``pidispatch.forges.route.token_sources``)."""

    def __init__(
        self,
        config: ForgeConfig,
        sources: TokenSources,
        http: aiohttp.ClientSession,
        clock: MonotonicMsClock = monotonic_ms,
        *,
        timeout_s: float = LOOKUP_TIMEOUT_S,
        cache_ttl_ms: int = CACHE_TTL_MS,
        metrics: LookupCounter | None = None,
    ) -> None:
        self.config, self.sources, self.http = config, sources, http
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.cache = VerdictCache(clock, cache_ttl_ms)
        self.log = get_logger()

    async def ask(self, question: Question, *, delivery: str | None = None) -> Verdict:
        route = self._route(question)
        key = self.cache.key(question)
        cached = self.cache.get(key)
        if cached is not None:
            self._count(route.name, "cached")
            return Authorized(cached)
        try:
            value = await route.authorize(question, self)
        except CannotAnswer as exc:
            fields = {"delivery": delivery} if delivery else {}
            self.log.warning(FAILED_EVENT[route.name], reason=exc.reason, **fields)
            self._count(route.name, "failed")
            return Indeterminate(exc.reason)
        self.cache.put(key, value)
        self._count(route.name, "allowed" if value is True else "denied")
        return Authorized(value)

    def _count(self, forge: str, result: str) -> None:
        if self.metrics is not None:
            self.metrics.looked_up(forge, result)

    @staticmethod
    def _route(question: Question) -> RouterForge:
        forge = forges.find(getattr(question, "forge", "")) if isinstance(question, Question) else None
        if forge is None:
            raise TypeError(f"not a lookup question: {type(question).__name__}")
        return route_of(forge)

    async def get(self, url: str | yarl.URL, headers: dict[str, str]) -> Reply:
        try:
            return await call(self.http, "GET", url, headers=headers, timeout_s=self.timeout_s)
        except Unreachable as exc:
            raise CannotAnswer(exc.reason) from None
        except BadBody:
            raise CannotAnswer("bad-json") from None

    @staticmethod
    def json(reply: Reply) -> object:
        try:
            return reply.json()
        except BadBody:
            raise CannotAnswer("bad-json") from None

    def permission(self, reply: Reply) -> bool:
        """The collaborator-permission answer several forges share: 404 refuses, admin/write authorise."""
        if reply.status == 404:
            return False
        if not reply.ok:
            raise CannotAnswer(f"status-{reply.status}")
        body = self.json(reply)
        permission = body.get("permission") if isinstance(body, dict) else None
        if not isinstance(permission, str) or not permission:
            # A 200 we do not understand is not a refusal: a schema change must not refuse everyone.
            raise CannotAnswer("no-permission")
        return permission in WRITE_PERMISSIONS
