"""Stand-in forge servers: small aiohttp apps on 127.0.0.1 speaking the documented API shapes our code calls.

One ``FakeForge`` per forge. Routes are registered by function (``register_github`` and friends), each
handler answers from ``forge.state`` like the real API would (checking the credential it documents), and
every request is kept in ``forge.requests`` for assertions. A test can script the next answers of a
route (``forge.script("permission", reply(502))``): a scripted reply wins over the handler, once each.

Later issues extend this module (token minting for jobs, comments, git over HTTP) by adding
``register_*`` functions and state keys; nothing here is specific to one test file.

Forge jobs (each forge's worker ``api``): every fake also serves its repository, branch, protection and
comment endpoints. ``set_repo(forge, key, ...)`` declares a repository (default branch, tip sha, the clone
URL to hand out, protected or not); an undeclared one answers 404 like the real API. Posted comments land
in ``forge.state["comments"]`` (``posted(forge)``); ``forge.answer(route, status)`` scripts a status.
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

from tests.support.gitserver import GitServer

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

    def answer(
        self, name: str, status: int, *, headers: dict[str, str] | None = None, times: int = 1
    ) -> None:
        """Shorthand: the next ``times`` calls of route ``name`` answer ``status`` with a small JSON body."""
        self.script(name, reply(status, {"message": f"scripted {status}"}, headers=headers, times=times))

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


# --- repositories for forge jobs (shared by every fake) ------------------------------------------------

TIP_SHA = "6dcb09b5b57875f334f61aebed695e2e4193db5e"  # the sha GitHub's own docs use


@dataclass
class FakeRepo:
    """One repository as the fake serves it. ``clone_url=None`` hands out the fake's own URL in the
    forge's shape; ``policies`` (Azure only) replaces the list ``protected`` would imply."""

    default_branch: str | None = "main"
    sha: str = TIP_SHA
    clone_url: str | None = None
    protected: bool = True
    branches: dict[str, str] = field(default_factory=dict)  # other branches: name -> sha
    path: str | None = None  # GitLab: path_with_namespace, also accepted in place of the id
    id: str = "3411ebc1-d5aa-464f-9615-0b527bc66719"  # Azure: the repository GUID
    policies: list[dict[str, Any]] | None = None

    def sha_of(self, branch: str) -> str | None:
        if branch == self.default_branch:
            return self.sha
        return self.branches.get(branch)


def set_repo(forge: FakeForge, key: Any, **fields: Any) -> FakeRepo:
    """Declare (or replace) a repository: ``owner/name`` on GitHub and Forgejo, the project id on GitLab
    (``path=`` for its path), ``project/repository`` on Azure."""
    repo = FakeRepo(**fields)
    forge.state.setdefault("repos", {})[key] = repo
    return repo


def posted(forge: FakeForge) -> list[dict[str, Any]]:
    """Comments posted so far: {repo, on (issue | pull_request), number, body}."""
    return list(forge.state.get("comments", []))


def _record_comment(forge: FakeForge, repo: Any, on: str, number: str, body: Any) -> None:
    entry = {"repo": repo, "on": on, "number": int(number), "body": body}
    forge.state.setdefault("comments", []).append(entry)


def _repo_state(forge: FakeForge) -> None:
    forge.state.setdefault("repos", {})
    forge.state.setdefault("comments", [])


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

    _repo_state(forge)

    def token_ok(request: web.Request) -> bool:
        token = _bearer(request)
        return token is not None and (
            token == forge.state["pat"] or token in forge.state["installation_tokens"]
        )

    def repo_of(request: web.Request) -> tuple[str, FakeRepo] | None:
        """The repository a token may see: an installation token scoped to names sees only those."""
        m = request.match_info
        scope = forge.state["installation_tokens"].get(_bearer(request) or "", {}).get("repositories")
        if scope is not None and m["repo"] not in scope:
            return None
        key = f"{m['owner']}/{m['repo']}"
        found = forge.state["repos"].get(key)
        return None if found is None else (key, found)

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
        body = await request.json() if request.body_exists else {}  # aiohttp keeps the read body
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
        # A classic token's scopes, as GitHub reports them on every answer (``scopes`` None: not sent).
        scopes = forge.state.get("scopes")
        headers = {} if scopes is None else {"X-OAuth-Scopes": scopes}
        return web.json_response({"login": "pi-bot", "id": forge.state["user_id"], "type": "User"},
                                 headers=headers)

    async def repository(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        if (found := repo_of(request)) is None:
            return not_found()
        key, repo = found
        clone_url = repo.clone_url or f"{forge.url}/{key}.git"
        return web.json_response({"id": 1296269, "name": key.split("/")[1], "full_name": key,
                                  "private": False, "default_branch": repo.default_branch,
                                  "clone_url": clone_url, "html_url": f"{forge.url}/{key}"})

    async def branch(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        found = repo_of(request)
        sha = found[1].sha_of(request.match_info["branch"]) if found else None
        if found is None or sha is None:
            return web.json_response({"message": "Branch not found"}, status=404)
        return web.json_response({"name": request.match_info["branch"], "commit": {"sha": sha},
                                  "protected": found[1].protected})

    async def protection(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        found = repo_of(request)
        if found is None:
            return not_found()
        if not found[1].protected or found[1].sha_of(request.match_info["branch"]) is None:
            return web.json_response({"message": "Branch not protected"}, status=404)
        return web.json_response({
            "required_pull_request_reviews": {"required_approving_review_count": 1},
            "enforce_admins": {"enabled": True}, "allow_force_pushes": {"enabled": False},
        })

    async def comment(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        if (found := repo_of(request)) is None:
            return not_found()
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return web.json_response({"message": "Invalid request."}, status=422)
        _record_comment(forge, found[0], "issue", request.match_info["number"], body["body"])
        return web.json_response({"id": len(forge.state["comments"]), "body": body["body"]}, status=201)

    forge.route("GET", prefix + "/repos/{owner}/{repo}/collaborators/{login}/permission", "permission",
                permission)
    forge.route("GET", prefix + "/repos/{owner}/{repo}", "repo", repository)
    forge.route("GET", prefix + "/repos/{owner}/{repo}/branches/{branch}", "branch", branch)
    forge.route("GET", prefix + "/repos/{owner}/{repo}/branches/{branch}/protection", "protection",
                protection)
    forge.route("POST", prefix + r"/repos/{owner}/{repo}/issues/{number:\d+}/comments", "comment", comment)
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

    _repo_state(forge)

    def project_of(request: web.Request) -> tuple[int, FakeRepo] | None:
        ref = request.match_info["project"]  # the id, or the URL-encoded path (decoded here)
        for key, repo in forge.state["repos"].items():
            if str(key) == ref or (repo.path is not None and repo.path == ref):
                return key, repo
        return None

    def refused(request: web.Request) -> web.Response | None:
        if not token_ok(request):
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        return None

    async def project(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (no := refused(request)) is not None:
            return no
        if (found := project_of(request)) is None:
            return web.json_response({"message": "404 Project Not Found"}, status=404)
        key, repo = found
        path = repo.path or f"group/project-{key}"
        return web.json_response({
            "id": key, "path_with_namespace": path, "default_branch": repo.default_branch,
            "http_url_to_repo": repo.clone_url or f"{forge.url}/{path}.git",
        })

    async def branch(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (no := refused(request)) is not None:
            return no
        found = project_of(request)
        sha = found[1].sha_of(request.match_info["branch"]) if found else None
        if sha is None:
            return web.json_response({"message": "404 Branch Not Found"}, status=404)
        return web.json_response({"name": request.match_info["branch"], "commit": {"id": sha},
                                  "protected": found[1].protected if found else False})

    async def protected_branch(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (no := refused(request)) is not None:
            return no
        found = project_of(request)
        if found is None or not found[1].protected or found[1].sha_of(request.match_info["branch"]) is None:
            return web.json_response({"message": "404 Not found"}, status=404)
        return web.json_response({"id": 1, "name": request.match_info["branch"],
                                  "push_access_levels": [{"access_level": 40}], "allow_force_push": False})

    def note(on: str) -> Handler:
        async def handler(forge: FakeForge, request: web.Request) -> web.StreamResponse:
            if (no := refused(request)) is not None:
                return no
            if (found := project_of(request)) is None:
                return web.json_response({"message": "404 Project Not Found"}, status=404)
            body = await request.json()
            if not isinstance(body, dict) or not isinstance(body.get("body"), str):
                return web.json_response({"error": "body is missing"}, status=400)
            _record_comment(forge, found[0], on, request.match_info["iid"], body["body"])
            return web.json_response({"id": len(forge.state["comments"]), "body": body["body"]}, status=201)
        return handler

    projects = "/api/v4/projects/{project}"
    forge.route("GET", r"/api/v4/projects/{project:\d+}/members/all/{user:\d+}", "member", member)
    forge.route("GET", "/api/v4/user", "user", user)
    forge.route("GET", projects, "project", project)
    forge.route("GET", projects + "/repository/branches/{branch}", "branch", branch)
    forge.route("GET", projects + "/protected_branches/{branch}", "protected_branch", protected_branch)
    forge.route("POST", projects + r"/issues/{iid:\d+}/notes", "issue_note", note("issue"))
    forge.route("POST", projects + r"/merge_requests/{iid:\d+}/notes", "mr_note", note("pull_request"))


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

    _repo_state(forge)
    missing = {"message": "The target couldn't be found."}

    def repo_of(request: web.Request) -> tuple[str, FakeRepo] | None:
        key = f"{request.match_info['owner']}/{request.match_info['repo']}"
        found = forge.state["repos"].get(key)
        return None if found is None else (key, found)

    async def repository(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        if (found := repo_of(request)) is None:
            return web.json_response(missing, status=404)
        key, repo = found
        return web.json_response({"id": 5, "full_name": key, "default_branch": repo.default_branch,
                                  "clone_url": repo.clone_url or f"{forge.url}/{key}.git", "empty": False})

    async def branch(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        found = repo_of(request)
        sha = found[1].sha_of(request.match_info["branch"]) if found else None
        if found is None or sha is None:
            return web.json_response(missing, status=404)
        return web.json_response({"name": request.match_info["branch"], "commit": {"id": sha},
                                  "protected": found[1].protected})

    async def branch_protection(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        found = repo_of(request)
        if found is None or not found[1].protected or found[1].sha_of(request.match_info["name"]) is None:
            return web.json_response(missing, status=404)
        return web.json_response({"rule_name": request.match_info["name"], "enable_push": False,
                                  "required_approvals": 1})

    async def comment(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if not token_ok(request):
            return unauthorized()
        if (found := repo_of(request)) is None:
            return web.json_response(missing, status=404)
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return web.json_response({"message": "[Body]: Required"}, status=422)
        _record_comment(forge, found[0], "issue", request.match_info["index"], body["body"])
        return web.json_response({"id": len(forge.state["comments"]), "body": body["body"]}, status=201)

    repos = "/api/v1/repos/{owner}/{repo}"
    forge.route("GET", repos + "/collaborators/{login}/permission", "permission", permission)
    forge.route("GET", "/api/v1/user", "user", user)
    forge.route("GET", repos, "repo", repository)
    forge.route("GET", repos + "/branches/{branch}", "branch", branch)
    forge.route("GET", repos + "/branch_protections/{name}", "branch_protection", branch_protection)
    forge.route("POST", repos + r"/issues/{index:\d+}/comments", "comment", comment)


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

    def check(request: web.Request, version: str = "7.1-preview.1") -> web.Response | None:
        sent = request.headers.get("Authorization", "")
        if not hmac.compare_digest(sent, azure_basic(forge.state["token"])):
            return web.Response(status=401)
        if request.query.get("api-version") != version:
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

    _repo_state(forge)
    register_azure_repos(forge, org, check)

    base = f"/{org}/_apis"
    forge.route("GET", f"{base}/connectionData", "connection", connection)
    forge.route("GET", f"{base}/graph/descriptors/{{key}}", "descriptor", descriptor)
    forge.route("GET", f"{base}/graph/users", "users", users)
    forge.route("GET", f"{base}/graph/memberships/{{descriptor}}", "memberships", memberships)


def register_azure_repos(
    forge: FakeForge, org: str, check: Callable[..., web.Response | None]
) -> None:
    """Git repositories, refs, branch policies and comments under ``/{org}/{project}/_apis``."""
    missing = {"message": "TF401019: The Git repository does not exist or you do not have permissions."}

    def repo_of(request: web.Request) -> tuple[str, FakeRepo] | None:
        key = f"{request.match_info['project']}/{request.match_info['repository']}"
        found = forge.state["repos"].get(key)
        return None if found is None else (key, found)

    async def repository(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request, "7.1")) is not None:
            return refused
        if (found := repo_of(request)) is None:
            return web.json_response(missing, status=404)
        key, repo = found
        project, name = key.split("/")
        # Azure's remoteUrl names the organisation as a user: https://org@dev.azure.com/org/project/_git/name
        remote = repo.clone_url or forge.url.replace("://", f"://{org}@", 1) + f"/{org}/{project}/_git/{name}"
        return web.json_response({
            "id": repo.id, "name": name,
            "project": {"id": "6ce954b1-ce1f-45d1-b94d-e6bf2464ba2c", "name": project},
            "defaultBranch": None if repo.default_branch is None else f"refs/heads/{repo.default_branch}",
            "remoteUrl": remote, "webUrl": f"{forge.url}/{org}/{project}/_git/{name}",
        })

    async def refs(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request, "7.1")) is not None:
            return refused
        if (found := repo_of(request)) is None:
            return web.json_response(missing, status=404)
        repo = found[1]
        heads = dict(repo.branches)
        if repo.default_branch is not None:
            heads[repo.default_branch] = repo.sha
        wanted = "refs/" + request.query.get("filter", "")
        value = [{"name": f"refs/heads/{b}", "objectId": sha} for b, sha in sorted(heads.items())
                 if f"refs/heads/{b}".startswith(wanted)]  # a prefix match, as Azure's filter is
        return web.json_response({"value": value, "count": len(value)})

    async def policies(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request, "7.1")) is not None:
            return refused
        project = request.match_info["project"]
        rid, ref = request.query.get("repositoryId"), request.query.get("refName", "")
        value: list[dict[str, Any]] = []
        for key, repo in forge.state["repos"].items():
            if key.split("/")[0] != project or repo.id != rid:
                continue
            if repo.policies is not None:
                value = repo.policies
            elif repo.protected and ref == f"refs/heads/{repo.default_branch}":
                scope = [{"refName": ref, "matchKind": "exact", "repositoryId": rid}]
                value = [{"id": 1, "isEnabled": True, "isBlocking": True,
                          "type": {"displayName": "Minimum number of reviewers"},
                          "settings": {"minimumApproverCount": 1, "scope": scope}}]
        return web.json_response({"value": value, "count": len(value)})

    async def workitem_comment(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request, "7.1-preview.4")) is not None:
            return refused
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("text"), str):
            return web.json_response({"message": "text is required"}, status=400)
        _record_comment(forge, request.match_info["project"], "issue", request.match_info["id"], body["text"])
        return web.json_response({"id": len(forge.state["comments"]), "text": body["text"]})

    async def pr_thread(forge: FakeForge, request: web.Request) -> web.StreamResponse:
        if (refused := check(request, "7.1")) is not None:
            return refused
        if (found := repo_of(request)) is None:
            return web.json_response(missing, status=404)
        body = await request.json()
        comments = body.get("comments") if isinstance(body, dict) else None
        if not isinstance(comments, list) or len(comments) != 1 or not isinstance(comments[0], dict) \
                or not isinstance(comments[0].get("content"), str):
            return web.json_response({"message": "comments are required"}, status=400)
        _record_comment(forge, found[0], "pull_request", request.match_info["id"], comments[0]["content"])
        return web.json_response({"id": len(forge.state["comments"]), "comments": comments,
                                  "status": body.get("status")})

    apis = f"/{org}/{{project}}/_apis"
    repo = apis + "/git/repositories/{repository}"
    forge.route("GET", repo, "repository", repository)
    forge.route("GET", repo + "/refs", "refs", refs)
    forge.route("GET", apis + "/policy/configurations", "policies", policies)
    forge.route("POST", apis + r"/wit/workItems/{id:\d+}/comments", "workitem_comment", workitem_comment)
    forge.route("POST", repo + r"/pullRequests/{id:\d+}/threads", "pr_thread", pr_thread)


def azure_forge(org: str = "fabrikam") -> FakeForge:
    forge = FakeForge("azure")
    register_azure(forge, org)
    return forge


def user_descriptor(email: str) -> str:
    """A descriptor shaped like Azure's (``aad.<base64>``), stable per address."""
    return "aad." + base64.urlsafe_b64encode(hashlib.sha256(email.encode()).digest()[:18]).decode()


PAT = "ghp_test"  # the stand-in GitHub's accepted personal token
ISSUE_REPO = "Codertocat/Hello-World"  # the repository of the octokit issues.labeled example


@dataclass
class GithubStandIn:
    """A stand-in GitHub (API) and the git server its clone URLs point at, holding the repository of
    ``tests.support.worker.issue_job`` with one commit on a protected ``main``."""

    forge: FakeForge
    git: GitServer
    sha: str

    def env(self) -> dict[str, str]:
        return {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": PAT, "GITHUB_API_URL": self.forge.url}
