"""The stand-in GitHub's webhook deliveries: it delivers as GitHub does (signed POSTs to the webhook URL),
keeps each attempt in a delivery log it serves in GitHub's shapes, and redelivers on request.

Written from GitHub's REST documentation ("Webhooks" → "List deliveries for an app webhook", "for a
repository webhook", "Redeliver a delivery"), not from our client: ``GET /app/hook/deliveries`` (the App's
JWT) and ``GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries`` (a token), newest first, ``per_page``
(default 30, at most 100) and an opaque ``cursor`` named in the ``Link`` header's ``rel="next"``; a
redelivery ``POST …/deliveries/{delivery_id}/attempts`` answers 202 and then POSTs the logged delivery
again, the same body and headers (so the same signature and ``X-GitHub-Delivery``), as a new attempt
with ``redelivery: true``. An attempt nobody answered is logged with ``status_code`` 0.

``register_delivery_log(forge)`` adds the routes to a ``FakeForge`` made by ``github_forge``. State:
``hook_url`` (where deliveries go), ``webhook_secret``, ``delivery_logs`` {log: [attempts, oldest first]}
where a log is ``app`` or ``owner/repo:hook_id``, ``rate_remaining``, ``hold_redeliveries`` (an
``asyncio.Event``: redeliveries wait until it is set; set by default).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import web

from tests.support.forges import FakeForge, not_found, unauthorized, verify_app_jwt

APP_LOG = "app"
DEFAULT_PER_PAGE, MAX_PER_PAGE = 30, 100


@dataclass
class Attempt:
    """One attempt as GitHub logs it, with what it sent (for a redelivery)."""

    id: int
    guid: str
    event: str
    action: str | None
    delivered_at: datetime
    status_code: int
    redelivery: bool
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The item GitHub lists (``delivered_at`` in its ``2019-06-03T00:57:16Z`` shape)."""
        at, code = self.delivered_at.strftime("%Y-%m-%dT%H:%M:%SZ"), self.status_code
        status = "OK" if 200 <= code < 300 else f"Invalid HTTP Response: {code}" if code else "timed out"
        return {
            "id": self.id, "guid": self.guid, "delivered_at": at, "redelivery": self.redelivery,
            "duration": 0.03, "status": status, "status_code": code, "event": self.event,
            "action": self.action, "installation_id": 777, "repository_id": 1296269, "throttled_at": None,
        }


def hook_log(repo: str, hook_id: int) -> str:
    return f"{repo}:{hook_id}"


def register_delivery_log(forge: FakeForge, prefix: str = "") -> None:
    """The delivery log and redelivery routes (the App's and repository hooks'), on ``forge``."""
    hold = asyncio.Event()
    hold.set()
    forge.state.update({
        "hook_url": None, "webhook_secret": None, "delivery_logs": {}, "rate_remaining": 4999,
        "hold_redeliveries": hold, "redeliveries": [],
    })

    def token_ok(request: web.Request) -> bool:
        value = request.headers.get("Authorization", "")
        token = value[7:] if value.startswith("Bearer ") else ""
        return token == forge.state["pat"] or token in forge.state["installation_tokens"]

    def jwt_ok(request: web.Request) -> bool:
        value, key = request.headers.get("Authorization", ""), forge.state["app_public_key"]
        return value.startswith("Bearer ") and key is not None and verify_app_jwt(
            value[7:], key, forge.state["app_id"]) is not None

    def log_of(request: web.Request) -> str | None:
        """The log a request names, when its credential may read it; None: 401 or 404 answered."""
        m = request.match_info
        if "hook_id" not in m:
            return APP_LOG if jwt_ok(request) else None
        if not token_ok(request):
            return None
        return hook_log(f"{m['owner']}/{m['repo']}", int(m["hook_id"]))

    def limits() -> dict[str, str]:
        forge.state["rate_remaining"] = max(forge.state["rate_remaining"] - 1, 0)
        return {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": str(forge.state["rate_remaining"]),
                "X-RateLimit-Reset": str(int(datetime.now(UTC).timestamp()) + 3600)}

    def refused(request: web.Request) -> web.Response:
        return not_found() if token_ok(request) or jwt_ok(request) else unauthorized()

    async def deliveries(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        name = log_of(request)
        if name is None or name not in forge.state["delivery_logs"]:
            return refused(request)
        try:
            per_page = min(int(request.query.get("per_page", DEFAULT_PER_PAGE)), MAX_PER_PAGE)
        except ValueError:
            return web.json_response({"message": "Bad Request"}, status=400)
        newest_first = sorted(forge.state["delivery_logs"][name], key=lambda a: a.id, reverse=True)
        cursor = request.query.get("cursor")
        if cursor is not None:
            if not cursor.startswith("v1_") or not cursor[3:].isdigit():
                return web.json_response({"message": "Validation Failed"}, status=422)
            newest_first = [a for a in newest_first if a.id < int(cursor[3:])]
        page, rest = newest_first[:per_page], newest_first[per_page:]
        headers = limits()
        if rest:
            url = f"{forge.url}{request.path}?per_page={per_page}&cursor=v1_{page[-1].id}"
            headers["Link"] = f'<{url}>; rel="next"'
        return web.json_response([a.as_json() for a in page], headers=headers)

    async def attempts(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        name = log_of(request)
        if name is None or name not in forge.state["delivery_logs"]:
            return refused(request)
        wanted = int(request.match_info["delivery_id"])
        found = next((a for a in forge.state["delivery_logs"][name] if a.id == wanted), None)
        if found is None:
            return not_found()
        task = asyncio.get_running_loop().create_task(_redeliver(forge, name, found))
        forge.state["redeliveries"].append(task)
        return web.json_response({}, status=202, headers=limits())

    app = prefix + "/app/hook/deliveries"
    forge.route("GET", app, "app_deliveries", deliveries)
    forge.route("POST", app + r"/{delivery_id:\d+}/attempts", "app_redeliver", attempts)
    hook = prefix + r"/repos/{owner}/{repo}/hooks/{hook_id:\d+}/deliveries"
    forge.route("GET", hook, "hook_deliveries", deliveries)
    forge.route("POST", hook + r"/{delivery_id:\d+}/attempts", "hook_redeliver", attempts)


_ids = itertools.count(90_000_000_001)


async def _post(forge: FakeForge, body: bytes, headers: dict[str, str]) -> int:
    """One attempt at the webhook URL: its status, 0 when nothing answered (GitHub's 10 s at most)."""
    try:
        async with aiohttp.ClientSession() as session, session.post(
            forge.state["hook_url"], data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
        ) as resp:
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, OSError, TimeoutError):
        return 0


async def deliver(
    forge: FakeForge, event: str, body: bytes, *, log: str = APP_LOG, guid: str | None = None,
    action: str | None = "labeled",
) -> Attempt:
    """Deliver ``body`` as GitHub does (signed with ``webhook_secret``) and log the attempt in ``log``."""
    guid = guid or str(uuid.uuid4())
    signature = hmac.new(forge.state["webhook_secret"].encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/044aadd", "X-GitHub-Event": event,
        "X-GitHub-Delivery": guid, "X-GitHub-Hook-ID": "1", "X-Hub-Signature-256": f"sha256={signature}",
    }
    status = await _post(forge, body, headers)
    attempt = Attempt(next(_ids), guid, event, action, datetime.now(UTC), status, False, body, headers)
    forge.state["delivery_logs"].setdefault(log, []).append(attempt)
    return attempt


async def _redeliver(forge: FakeForge, log: str, original: Attempt) -> None:
    await forge.state["hold_redeliveries"].wait()
    status = await _post(forge, original.body, original.headers)
    forge.state["delivery_logs"][log].append(Attempt(
        next(_ids), original.guid, original.event, original.action, datetime.now(UTC), status, True,
        original.body, original.headers,
    ))


async def redelivered(forge: FakeForge) -> None:
    """Wait for every redelivery asked for so far to have been attempted."""
    await asyncio.gather(*forge.state["redeliveries"])
