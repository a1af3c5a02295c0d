"""GitHub's webhook delivery log, for the healer (``router.heal``): read it back, ask for a redelivery.

Two logs: a GitHub App's (``GET /app/hook/deliveries``, authenticated as the App with its JWT) and each
repository webhook's named in ``GITHUB_HEAL_HOOKS`` (``GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries``,
with the configured token). Both list the newest first, ``per_page`` at most 100, the next page's
``cursor`` in the ``Link`` header; a redelivery is ``POST …/deliveries/{id}/attempts``, answered 202.
An item's ``guid`` is the ``X-GitHub-Delivery`` header the receiver remembers. The parsing, the paging
and the pacing are pure functions; ``DeliveryLog`` does the HTTP. No token, JWT or body reaches a log.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Mapping
from urllib.parse import parse_qs, quote, urlsplit

import aiohttp
import msgspec

from pidispatch.common.keys import HEAL_PAGE, HEAL_PAUSE_MAX_S, HEAL_TIMEOUT_S
from pidispatch.forges.github.auth import (
    GithubAuth,
    GithubAuthRefused,
    GithubAuthUnavailable,
    api_headers,
    time_ms,
)
from pidispatch.forges.github.config import GithubForge
from pidispatch.forges.http import BadBody, Unreachable, call, is_transient_status

# Calls left in the hour below which a pass stops: the router's lookups and the workers' jobs share the
# token, and a healer must never be what starves them.
RATE_RESERVE = 200
_NEXT_RE = re.compile(r'<([^>]*)>\s*;\s*rel="?next"?')


class LoggedDelivery(msgspec.Struct, frozen=True):
    """One attempt in the log: ``id`` names the attempt (redeliveries have their own), ``guid`` the
    delivery (the same on every attempt), ``delivered_at`` epoch ms, ``status_code`` 0 when no answer."""

    id: int
    guid: str
    delivered_at: int
    redelivery: bool
    status_code: int
    event: str
    action: str | None = None


class LogSource(msgspec.Struct, frozen=True):
    """One delivery log: ``name`` is how reports name it (``app``, ``owner/repo:hook_id``), ``path`` its
    API path under the base URL, ``repo`` the repository whose token reads it (None: the App's JWT)."""

    name: str
    path: str
    repo: str | None = None


class LogUnread(Exception):
    """A log call got no usable answer: ``reason`` a short token (``status-404``, ``network``,
    ``rate-limited``, ``bad-json``, ``credentials``); ``transient``: the same call may work later."""

    def __init__(self, reason: str, transient: bool) -> None:
        super().__init__(reason)
        self.reason, self.transient = reason, transient


def sources_of(config: GithubForge) -> tuple[LogSource, ...]:
    """Pure: the logs the configuration can read: the App's (``GITHUB_AUTH_SOURCE=app``), then each hook."""
    found = [LogSource("app", "/app/hook")] if config.auth_source == "app" else []
    for repo, hook in config.heal_hooks:
        owner, _, name = repo.partition("/")
        found.append(LogSource(f"{repo}:{hook}", f"/repos/{quote(owner)}/{quote(name)}/hooks/{hook}", repo))
    return tuple(found)


def parse_page(body: object) -> list[LoggedDelivery]:
    """Pure: the items of one page GitHub documents, in its order; an item missing a field it must have
    is skipped (a page is never refused for one odd item)."""
    if not isinstance(body, list):
        raise BadBody("not a list of deliveries")
    found = []
    for item in body:
        if not isinstance(item, dict):
            continue
        ident, guid, event = item.get("id"), item.get("guid"), item.get("event")
        at, code = time_ms(item.get("delivered_at")), item.get("status_code")
        if (not isinstance(ident, int) or isinstance(ident, bool) or not isinstance(guid, str) or not guid
                or not isinstance(event, str) or at is None):
            continue
        action = item.get("action")
        found.append(LoggedDelivery(
            id=ident, guid=guid, delivered_at=at, redelivery=item.get("redelivery") is True,
            status_code=code if isinstance(code, int) and not isinstance(code, bool) else 0, event=event,
            action=action if isinstance(action, str) else None,
        ))
    return found


def next_cursor(link: str | None) -> str | None:
    """Pure: the ``cursor`` of the ``rel="next"`` URL in a ``Link`` header; None on the last page."""
    for part in (link or "").split(","):
        m = _NEXT_RE.search(part)
        if m is not None:
            cursor = parse_qs(urlsplit(m.group(1)).query).get("cursor")
            return cursor[0] if cursor and cursor[0] else None
    return None


def older_than(page: list[LoggedDelivery], since_ms: int) -> bool:
    """Pure: whether the log, newest first, has passed ``since_ms`` on this page (nothing older is read)."""
    return bool(page) and page[-1].delivered_at < since_ms


def pause_s(headers: Mapping[str, str], pace_s: float, now_s: float) -> float | None:
    """Pure: how long to wait before the next call after an answer with ``headers`` (names lower-cased):
    ``Retry-After`` when given, the limit's reset when none is left, else ``pace_s``; None when the pass
    should stop (the wait passes ``HEAL_PAUSE_MAX_S``, or fewer than ``RATE_RESERVE`` calls are left)."""
    wait = pace_s
    retry = headers.get("retry-after", "").strip()
    remaining = headers.get("x-ratelimit-remaining", "").strip()
    if retry.isdigit():
        wait = max(wait, float(retry))
    elif remaining.isdigit() and int(remaining) < RATE_RESERVE:
        if int(remaining) > 0:
            return None  # the reserve is the others'
        reset = headers.get("x-ratelimit-reset", "").strip()
        wait = max(wait, float(reset) - now_s) if reset.isdigit() else HEAL_PAUSE_MAX_S + 1
    return None if wait > HEAL_PAUSE_MAX_S else wait


def attempt_verdict(status: int | None, headers: Mapping[str, str]) -> str:
    """Pure: a redelivery request's answer: ``asked`` (2xx), ``retry`` (transient: not asked, the next pass
    asks again), ``stop`` (the credentials were refused: every other request would be too), or ``gone``
    (GitHub refuses this one delivery: 404, 422...; never asked again)."""
    if status is not None and 200 <= status < 300:
        return "asked"
    if is_transient_status(status, headers):
        return "retry"
    return "stop" if status in (401, 403) else "gone"


class DeliveryLog:
    """Reads and redelivers through one ``GithubAuth``: the App's JWT for the App's log, a token for the
    repository of a hook's."""

    def __init__(self, http: aiohttp.ClientSession, auth: GithubAuth) -> None:
        self.http, self.auth = http, auth
        self.api_url = auth.config.api_url

    async def _headers(self, source: LogSource) -> dict[str, str]:
        try:
            credential = await (self.auth.jwt() if source.repo is None else self.auth.token(source.repo))
        except GithubAuthRefused:
            raise LogUnread("credentials", transient=False) from None
        except GithubAuthUnavailable as exc:
            raise LogUnread(exc.reason, transient=True) from None
        return api_headers(credential)

    async def page(self, source: LogSource, cursor: str | None) -> tuple[list[LoggedDelivery], str | None,
                                                                          dict[str, str]]:
        """One page: its items, the next page's cursor (None: the last), the answer's headers."""
        url = f"{self.api_url}{source.path}/deliveries?per_page={HEAL_PAGE}"
        if cursor is not None:
            url += f"&cursor={quote(cursor, safe='')}"
        try:
            headers = await self._headers(source)
            reply = await call(self.http, "GET", url, headers=headers, timeout_s=HEAL_TIMEOUT_S)
            if not reply.ok:
                transient = is_transient_status(reply.status, reply.headers)
                limited = transient and reply.status in (403, 429)
                raise LogUnread("rate-limited" if limited else f"status-{reply.status}", transient)
            return parse_page(reply.json()), next_cursor(reply.headers.get("link")), reply.headers
        except Unreachable as exc:
            raise LogUnread(exc.reason, transient=True) from None
        except BadBody:
            raise LogUnread("bad-json", transient=True) from None

    async def pages(
        self, source: LogSource, since_ms: int
    ) -> AsyncGenerator[tuple[list[LoggedDelivery], dict[str, str]], None]:
        """The log's pages, newest first, until one reaches past ``since_ms`` or the last."""
        cursor: str | None = None
        while True:
            items, cursor, headers = await self.page(source, cursor)
            yield [d for d in items if d.delivered_at >= since_ms], headers
            if cursor is None or older_than(items, since_ms):
                return

    async def redeliver(self, source: LogSource, delivery_id: int) -> tuple[str, dict[str, str]]:
        """Ask GitHub to deliver attempt ``delivery_id`` again: ``attempt_verdict``'s word, the headers."""
        url = f"{self.api_url}{source.path}/deliveries/{delivery_id}/attempts"
        try:
            reply = await call(self.http, "POST", url, headers=await self._headers(source),
                               timeout_s=HEAL_TIMEOUT_S)
        except Unreachable:
            return "retry", {}
        return attempt_verdict(reply.status, reply.headers), reply.headers
