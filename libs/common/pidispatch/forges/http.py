"""HTTP to forge APIs, shared by every forge call (authority lookups, identity, token mints, job API).

One client, bounded requests, no redirects followed, and only 2xx bodies read.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
import msgspec
import yarl

# Forge API answers are small; a bigger one is refused rather than buffered.
MAX_BODY = 8 * 1024 * 1024
TRANSIENT_STATUSES = frozenset({408, 425, 429})


def is_transient_status(status: int | None, headers: Mapping[str, str] | None = None) -> bool:
    """Would the same request plausibly succeed later with nobody touching anything?

    No status (a network fault) is transient; so are 5xx, 408/425/429, and a 403 that is a rate limit
    (secondary: Retry-After; primary: ``x-ratelimit-remaining: 0``). Everything else is determinate.
    """
    if status is None or status <= 0 or status >= 500 or status in TRANSIENT_STATUSES:
        return True
    if status == 403:
        lowered = {k.lower(): v for k, v in (headers or {}).items()}
        return "retry-after" in lowered or lowered.get("x-ratelimit-remaining", "").strip() == "0"
    return False


def create_http() -> aiohttp.ClientSession:
    """The one HTTP client for forge APIs: no cookies carried between forges, a named User-Agent
    (GitHub refuses requests without one). Callers bound each request and refuse redirects."""
    return aiohttp.ClientSession(
        cookie_jar=aiohttp.DummyCookieJar(),
        headers={"User-Agent": "pi-dispatch"},
        raise_for_status=False,
    )




class BadBody(Exception):
    """A forge answered 2xx with a body that is not the JSON it documents (or is too large)."""


class Unreachable(Exception):
    """No HTTP answer at all; ``reason`` is ``network`` or ``timeout``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Reply(msgspec.Struct, frozen=True):
    """One forge answer. Only 2xx bodies are read: an error body can echo the request (and its token)."""

    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes = b""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> object:
        """Parsed JSON, or ``BadBody`` (the parser's message is dropped: it quotes the body)."""
        try:
            return msgspec.json.decode(self.body)
        except msgspec.DecodeError:
            raise BadBody("unparseable JSON") from None


async def call(
    http: aiohttp.ClientSession,
    method: str,
    url: str | yarl.URL,
    *,
    headers: Mapping[str, str],
    json: object = None,
    timeout_s: float,
    limit: int = MAX_BODY,
) -> Reply:
    """One bounded request that never follows a redirect (a 30x must not carry the token elsewhere).

    Raises ``Unreachable`` without an answer and ``BadBody`` for a 2xx body past ``limit``.
    """
    try:
        async with http.request(
            method, url, headers=dict(headers), json=json, allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            lowered = {k.lower(): v for k, v in resp.headers.items()}
            if not 200 <= resp.status < 300:
                return Reply(resp.status, lowered)
            chunks: list[bytes] = []
            total = 0
            async for chunk in resp.content.iter_chunked(64 * 1024):
                total += len(chunk)
                if total > limit:
                    raise BadBody("response too large")
                chunks.append(chunk)
            return Reply(resp.status, lowered, b"".join(chunks))
    except TimeoutError:
        raise Unreachable("timeout") from None
    except (aiohttp.ClientError, OSError):
        raise Unreachable("network") from None
