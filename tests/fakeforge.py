"""Stand-in forge servers: small aiohttp apps on 127.0.0.1 speaking the documented API shapes our code calls.

One ``FakeForge`` per forge. Routes are registered by function (``register_github`` and friends), each
handler answers from ``forge.state`` like the real API would (checking the credential it documents), and
every request is kept in ``forge.requests`` for assertions. A test can script the next answers of a
route (``forge.script("permission", reply(502))``): a scripted reply wins over the handler, once each.

Later issues extend this module (token minting for jobs, comments, git over HTTP) by adding
``register_*`` functions and state keys; nothing here is specific to one test file.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

_UNSET: Any = object()


@dataclass
class Recorded:
    """One request as the fake saw it (header names lower-cased)."""

    route: str
    method: str
    path: str  # raw, still percent-encoded
    query: dict[str, str]
    headers: dict[str, str]
    body: Any = None  # parsed JSON, when the request had a JSON body


@dataclass
class Scripted:
    """A canned answer: a status with a JSON or raw body, a redirect, or a dropped connection."""

    status: int = 200
    json: Any = _UNSET
    text: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    disconnect: bool = False
    times: int = 1  # how many calls this answer serves before the next one (or the handler) takes over


def reply(
    status: int = 200, json: Any = _UNSET, *, headers: dict[str, str] | None = None, times: int = 1
) -> Scripted:
    return Scripted(status=status, json=json, headers=headers or {}, times=times)


def raw(text: str, status: int = 200) -> Scripted:
    """A body that is not JSON (a proxy's HTML page, a truncated answer)."""
    return Scripted(status=status, text=text, headers={"Content-Type": "application/json"})


def redirect(location: str = "http://127.0.0.1:9/elsewhere", status: int = 302) -> Scripted:
    return Scripted(status=status, headers={"Location": location})


def disconnect(times: int = 3) -> Scripted:
    """Close the connection without answering: the client sees a network error. aiohttp re-sends an
    idempotent request once on a dropped connection, so by default this serves a few calls."""
    return Scripted(disconnect=True, times=times)


Handler = Callable[["FakeForge", web.Request], Awaitable[web.StreamResponse]]


class FakeForge:
    def __init__(self, name: str) -> None:
        self.name = name
        self.app = web.Application()
        self.requests: list[Recorded] = []
        self.state: dict[str, Any] = {}
        self._scripts: dict[str, deque[Scripted]] = defaultdict(deque)
        self._runner: web.AppRunner | None = None
        self.url = ""

    def route(self, method: str, path: str, name: str, handler: Handler) -> None:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            body = None
            if request.can_read_body:
                text = await request.text()
                try:
                    body = json.loads(text)
                except ValueError:
                    body = text
            self.requests.append(Recorded(
                route=name, method=request.method, path=request.raw_path.split("?", 1)[0],
                query=dict(request.query), headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
            ))
            queue = self._scripts[name]
            if queue:
                answer = queue[0]
                answer.times -= 1
                if answer.times <= 0:
                    queue.popleft()
                return self._answer(request, answer)
            return await handler(self, request)

        self.app.router.add_route(method, path, wrapped, name=name)

    def script(self, name: str, *answers: Scripted) -> None:
        """The next calls of route ``name`` get these answers, in order, instead of the handler's."""
        self._scripts[name].extend(answers)

    def calls(self, name: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if name is None or r.route == name]

    @staticmethod
    def _answer(request: web.Request, answer: Scripted) -> web.StreamResponse:
        if answer.disconnect:
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        if answer.text is not None:
            return web.Response(status=answer.status, text=answer.text, headers=answer.headers)
        if answer.json is not _UNSET:
            return web.json_response(answer.json, status=answer.status, headers=answer.headers)
        return web.Response(status=answer.status, headers=answer.headers)

    async def start(self) -> str:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeForge:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


def not_found() -> web.Response:
    return web.json_response({"message": "Not Found"}, status=404)


def unauthorized() -> web.Response:
    return web.json_response({"message": "Bad credentials"}, status=401)


def _bearer(request: web.Request) -> str | None:
    value = request.headers.get("Authorization", "")
    return value[7:] if value.startswith("Bearer ") else None


# --- GitHub (REST v3; also GitHub Enterprise Server under /api/v3) -------------------------------------


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verify_app_jwt(token: str, public_key: rsa.RSAPublicKey, app_id: str) -> dict[str, Any] | None:
    """GitHub's checks on an App JWT: RS256 over header.payload, the App as issuer, at most 10 minutes."""
    try:
        head, payload, signature = token.split(".")
        header = json.loads(_b64url_decode(head))
        claims = json.loads(_b64url_decode(payload))
        public_key.verify(_b64url_decode(signature), f"{head}.{payload}".encode(), padding.PKCS1v15(),
                          hashes.SHA256())
    except (ValueError, InvalidSignature):
        return None
    now = int(time.time())
    if (
        header.get("alg") != "RS256"
        or str(claims.get("iss")) != str(app_id)
        or not claims.get("iat", now + 1) <= now < claims.get("exp", 0)
        or claims["exp"] - claims["iat"] > 600
    ):
        return None
    return claims


def register_github(forge: FakeForge, prefix: str = "") -> None:
    """State: ``pat`` (a user token), ``user_id``, ``permissions`` {(repo, login): level}, and for an App
    ``app_id``, ``app_public_key``, ``installation_id``, ``app_slug``, ``bot_id``; minted tokens land in
    ``installation_tokens`` {token: request body}."""
    forge.state.update({
        "pat": "ghp_test", "user_id": 4242, "permissions": {}, "app_id": "12345", "app_public_key": None,
        "installation_id": 777, "app_slug": "pi-harness", "bot_id": 9001, "installation_tokens": {},
    })
    counter = itertools.count(1)

    def token_ok(request: web.Request) -> bool:
        token = _bearer(request)
        return token is not None and (
            token == forge.state["pat"] or token in forge.state["installation_tokens"]
        )

    def jwt_ok(request: web.Request) -> bool:
        token, key = _bearer(request), forge.state["app_public_key"]
        return token is not None and key is not None and verify_app_jwt(
            token, key, forge.state["app_id"]) is not None

    async def permission(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        m = request.match_info
        level = forge.state["permissions"].get((f"{m['owner']}/{m['repo']}", m["login"]))
        if level is None:
            return not_found()
        return web.json_response({"permission": level, "role_name": level, "user": {"login": m["login"]}})

    async def access_tokens(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not jwt_ok(request):
            return unauthorized()
        if request.match_info["installation"] != str(forge.state["installation_id"]):
            return not_found()
        token = f"ghs_minted{next(counter)}"
        body = await request.json() if request.can_read_body else {}  # aiohttp keeps the read body
        forge.state["installation_tokens"][token] = body
        expires = datetime.now(UTC) + timedelta(hours=1)
        return web.json_response({
            "token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "permissions": body.get("permissions", {"metadata": "read", "issues": "write"}),
            "repository_selection": "selected" if "repositories" in body else "all",
        }, status=201)

    async def app(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not jwt_ok(request):
            return unauthorized()
        return web.json_response({"id": int(forge.state["app_id"]), "slug": forge.state["app_slug"],
                                  "name": "Pi Harness"})

    async def users(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        if request.match_info["username"] != f"{forge.state['app_slug']}[bot]":
            return not_found()
        return web.json_response({"login": request.match_info["username"], "id": forge.state["bot_id"],
                                  "type": "Bot"})

    async def user(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if _bearer(request) != forge.state["pat"]:
            return unauthorized()
        return web.json_response({"login": "pi-bot", "id": forge.state["user_id"], "type": "User"})

    forge.route("GET", prefix + "/repos/{owner}/{repo}/collaborators/{login}/permission", "permission",
                permission)
    forge.route("POST", prefix + "/app/installations/{installation}/access_tokens", "access_tokens",
                access_tokens)
    forge.route("GET", prefix + "/app", "app", app)
    forge.route("GET", prefix + "/users/{username}", "users", users)
    forge.route("GET", prefix + "/user", "user", user)


def github_forge(prefix: str = "") -> FakeForge:
    forge = FakeForge("github")
    register_github(forge, prefix)
    return forge


# --- GitLab (REST v4) ------------------------------------------------------------------------------------


def register_gitlab(forge: FakeForge) -> None:
    """State: ``token`` (PRIVATE-TOKEN), ``user_id`` (the token's user),
    ``members`` {(project, user): access level}."""
    forge.state.update({"token": "glpat-test", "user_id": 31, "members": {}})

    def token_ok(request: web.Request) -> bool:
        return request.headers.get("PRIVATE-TOKEN") == forge.state["token"]

    async def member(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        m = request.match_info
        level = forge.state["members"].get((int(m["project"]), int(m["user"])))
        if level is None:
            return web.json_response({"message": "404 Not found"}, status=404)
        return web.json_response({"id": int(m["user"]), "username": "someone", "access_level": level,
                                  "state": "active"})

    async def user(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        return web.json_response({"id": forge.state["user_id"], "username": "pi-bot", "bot": True})

    forge.route("GET", r"/api/v4/projects/{project:\d+}/members/all/{user:\d+}", "member", member)
    forge.route("GET", "/api/v4/user", "user", user)


def gitlab_forge() -> FakeForge:
    forge = FakeForge("gitlab")
    register_gitlab(forge)
    return forge


# --- Forgejo / Gitea (REST v1) ---------------------------------------------------------------------------


def register_forgejo(forge: FakeForge) -> None:
    """State: ``token`` (``Authorization: token``), ``user_id``, ``permissions`` {(repo, login): level}."""
    forge.state.update({"token": "fj-test", "user_id": 17, "permissions": {}})

    def token_ok(request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"token {forge.state['token']}"

    async def permission(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        m = request.match_info
        level = forge.state["permissions"].get((f"{m['owner']}/{m['repo']}", m["login"]))
        if level is None:
            return web.json_response({"message": "The target couldn't be found."}, status=404)
        return web.json_response({"permission": level, "role_name": level, "user": {"login": m["login"]}})

    async def user(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        return web.json_response({"id": forge.state["user_id"], "login": "pi-bot"})

    forge.route("GET", "/api/v1/repos/{owner}/{repo}/collaborators/{login}/permission", "permission",
                permission)
    forge.route("GET", "/api/v1/user", "user", user)


def forgejo_forge() -> FakeForge:
    forge = FakeForge("forgejo")
    register_forgejo(forge)
    return forge


# --- Azure DevOps (organisation API and Graph, one fake for both hosts) ---------------------------------


def azure_basic(token: str) -> str:
    return "Basic " + base64.b64encode(f":{token}".encode()).decode()


def register_azure(forge: FakeForge, org: str = "fabrikam") -> None:
    """Serves ``/{org}/_apis/connectionData`` and the Graph under ``/{org}/_apis/graph``.

    State: ``token`` (Basic ``:<PAT>``), ``descriptors`` {storage key (GUID): descriptor},
    ``users`` [{principalName, mailAddress, descriptor}], ``page_size``,
    ``memberships`` {descriptor: [container descriptors]},
    ``self_id`` / ``self_account`` for connectionData.
    """
    forge.state.update({
        "token": "az-pat", "descriptors": {}, "users": [], "page_size": 100, "memberships": {},
        "self_id": "6c3a1b9e-0000-4000-8000-00000000b07a", "self_account": "Pi-Bot@Example.com",
    })

    def check(request: web.Request) -> web.Response | None:
        sent = request.headers.get("Authorization", "")
        if not hmac.compare_digest(sent, azure_basic(forge.state["token"])):
            return web.Response(status=401)
        if request.query.get("api-version") != "7.1-preview.1":
            return web.json_response({"message": "api-version missing"}, status=400)
        return None

    async def connection(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request)) is not None:
            return refused
        return web.json_response({"authenticatedUser": {
            "id": forge.state["self_id"], "providerDisplayName": "Pi Bot",
            "properties": {"Account": {"$type": "System.String", "$value": forge.state["self_account"]}},
        }})

    async def descriptor(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request)) is not None:
            return refused
        value = forge.state["descriptors"].get(request.match_info["key"])
        if value is None:
            return web.json_response({"message": "VS860016: identity not found"}, status=404)
        return web.json_response({"value": value})

    async def users(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request)) is not None:
            return refused
        if request.query.get("subjectTypes") != "aad,msa":
            return web.json_response({"message": "unexpected subjectTypes"}, status=400)
        # An opaque-looking cursor that needs encoding on the way back (like Azure's).
        cursor = request.query.get("continuationToken")
        start = int(base64.b64decode(cursor).decode().split("+")[1]) if cursor else 0
        size = forge.state["page_size"]
        page = forge.state["users"][start:start + size]
        headers = {}
        if start + size < len(forge.state["users"]):
            headers["X-MS-ContinuationToken"] = base64.b64encode(f"page+{start + size}".encode()).decode()
        return web.json_response({"count": len(page), "value": page}, headers=headers)

    async def memberships(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request)) is not None:
            return refused
        if request.query.get("direction") != "up":
            return web.json_response({"message": "direction must be up"}, status=400)
        subject = request.match_info["descriptor"]
        value = [{"containerDescriptor": c, "memberDescriptor": subject}
                 for c in forge.state["memberships"].get(subject, [])]
        return web.json_response({"count": len(value), "value": value})

    base = f"/{org}/_apis"
    forge.route("GET", f"{base}/connectionData", "connection", connection)
    forge.route("GET", f"{base}/graph/descriptors/{{key}}", "descriptor", descriptor)
    forge.route("GET", f"{base}/graph/users", "users", users)
    forge.route("GET", f"{base}/graph/memberships/{{descriptor}}", "memberships", memberships)


def azure_forge(org: str = "fabrikam") -> FakeForge:
    forge = FakeForge("azure")
    register_azure(forge, org)
    return forge


def user_descriptor(email: str) -> str:
    """A descriptor shaped like Azure's (``aad.<base64>``), stable per address."""
    return "aad." + base64.urlsafe_b64encode(hashlib.sha256(email.encode()).digest()[:18]).decode()
