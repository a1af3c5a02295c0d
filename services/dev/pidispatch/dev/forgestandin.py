"""A stand-in GitHub for ``pi-dispatch dev``: the few API calls a forge job makes, git over HTTP, and the
signed delivery that fires dev's sample rule.

The first run of ``dev`` has no GitHub credentials and no repository, yet a forge job must mint a token,
read the default branch's tip, check its protection, clone it and answer on the issue. This serves
``demo/hello`` from a bare repository under ``.pi-dispatch/demo-forge/`` on 127.0.0.1, with a generated
token that the worker uses like a personal access token. It is only ever started by ``dev``, and only
when no GitHub credentials are configured (``credentials_set``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import secrets
import shlex
from base64 import b64decode
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

# The label the sample rule of `pi-dispatch dev` fires on; the stand-in's demo issue is made for it.
DEMO_LABEL = "pi:demo"


REPO = "demo/hello"
BRANCH = "main"
USER_ID = 1000
README = """# hello

A demo repository served by `pi-dispatch dev`'s stand-in GitHub. The demo agent lists this folder and
prints this file, so its captured output shows that the job ran on a clone of the repository.
"""
_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}


async def _git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> bytes:
    proc = await asyncio.create_subprocess_exec(
        "git", *args, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {err.decode(errors='replace').strip()[:200]}")
    return out


def _base_env(home: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **_GIT_ENV}


def _token_and_state(root: Path) -> tuple[str, bool]:
    """The demo token (kept across runs) and whether the repository still has to be seeded."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    token_file = root / "token"
    if not token_file.exists():
        token_file.write_text("demo_" + secrets.token_hex(20) + "\n")
        token_file.chmod(0o600)
    return token_file.read_text().strip(), not (root / "repos" / f"{REPO}.git").exists()


async def prepare(root: Path) -> str:
    """Create the bare repository with one commit on first use; returns the demo token."""
    token, unseeded = await asyncio.to_thread(_token_and_state, root)
    if unseeded:
        env = _base_env(root)
        bare, work = root / "repos" / f"{REPO}.git", root / "seed"
        await _git("init", "-q", "--bare", f"--initial-branch={BRANCH}", str(bare), env=env)
        await _git("init", "-q", f"--initial-branch={BRANCH}", str(work), env=env)
        await asyncio.to_thread((work / "README.md").write_text, README)
        await _git("add", "README.md", cwd=work, env=env)
        await _git("-c", "user.name=pi-dispatch dev", "-c", "user.email=dev@pi-dispatch.invalid",
                   "commit", "-qm", "Say hello", cwd=work, env=env)
        await _git("push", "-q", str(bare), f"HEAD:{BRANCH}", cwd=work, env=env)
        await _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare, env=env)
    return token


class DemoForge:
    def __init__(self, root: Path, token: str) -> None:
        self.root, self.token = root, token
        self.url = ""
        self.comments: list[str] = []
        self._runner: web.AppRunner | None = None

    def _api_ok(self, request: web.Request) -> bool:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        known = self.token.encode()
        return scheme.lower() in ("bearer", "token") and hmac.compare_digest(value.encode(), known)

    def _git_ok(self, request: web.Request) -> bool:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            _, _, password = b64decode(value).decode().partition(":")
        except ValueError:
            return False
        return hmac.compare_digest(password.encode(), self.token.encode())

    async def _tip(self) -> str:
        bare = self.root / "repos" / f"{REPO}.git"
        return (await _git("rev-parse", BRANCH, cwd=bare, env=_base_env(self.root))).decode().strip()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/git/"):
            if not self._git_ok(request):
                return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="demo"'})
        elif not self._api_ok(request):
            return web.json_response({"message": "Bad credentials"}, status=401)
        return await handler(request)

    async def _user(self, _: web.Request) -> web.Response:
        return web.json_response({"id": USER_ID, "login": "pi-dispatch-demo", "type": "User"})

    async def _repo(self, _: web.Request) -> web.Response:
        return web.json_response({
            "full_name": REPO, "default_branch": BRANCH, "private": True,
            "clone_url": f"{self.url}/git/{REPO}.git",
        })

    async def _branch(self, request: web.Request) -> web.Response:
        if request.match_info["branch"] != BRANCH:
            return web.json_response({"message": "Branch not found"}, status=404)
        return web.json_response({"name": BRANCH, "commit": {"sha": await self._tip()}, "protected": True})

    async def _protection(self, request: web.Request) -> web.Response:
        if request.match_info["branch"] != BRANCH:
            return web.json_response({"message": "Branch not protected"}, status=404)
        return web.json_response({"required_pull_request_reviews": {"required_approving_review_count": 1}})

    async def _comment(self, request: web.Request) -> web.Response:
        body = await request.json()
        text = body.get("body") if isinstance(body, dict) else None
        if not isinstance(text, str):
            return web.json_response({"message": "Validation Failed"}, status=422)
        self.comments.append(text)
        print(f"demo forge: comment on {REPO}#{request.match_info['number']}: {text}", flush=True)
        return web.json_response({"id": len(self.comments), "body": text}, status=201)

    async def _git_http(self, request: web.Request) -> web.StreamResponse:
        """Smart HTTP through ``git http-backend`` (CGI), read-only: receive-pack is refused."""
        if "receive-pack" in request.path or request.query.get("service") == "git-receive-pack":
            return web.Response(status=403)
        env = {
            **_base_env(self.root), "GIT_PROJECT_ROOT": str(self.root / "repos"), "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": request.path.removeprefix("/git"), "QUERY_STRING": request.query_string,
            "REQUEST_METHOD": request.method, "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "REMOTE_USER": "demo", "GIT_PROTOCOL": request.headers.get("Git-Protocol", ""),
        }
        proc = await asyncio.create_subprocess_exec(
            "git", "http-backend", env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate(await request.read())
        head, _, body = out.partition(b"\r\n\r\n")
        if not _:
            head, _, body = out.partition(b"\n\n")
        response = web.Response(body=body)
        for line in head.decode(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                response.set_status(int(value.strip().split()[0]))
            elif name:
                response.headers[name.strip()] = value.strip()
        return response

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host`` (loopback for ``dev``; the deploy check gives Docker's bridge address, where
        containers reach the host) and ``port`` (0: any free one)."""
        app = web.Application(middlewares=[self._auth], client_max_size=64 * 1024**2)
        owner, name = REPO.split("/")
        base = f"/repos/{owner}/{name}"
        app.router.add_get("/user", self._user)
        app.router.add_get(base, self._repo)
        app.router.add_get(base + "/branches/{branch}", self._branch)
        app.router.add_get(base + "/branches/{branch}/protection", self._protection)
        app.router.add_post(base + "/issues/{number:[0-9]+}/comments", self._comment)
        app.router.add_route("*", "/git/{tail:.*}", self._git_http)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def start_demo_forge(
    state_dir: Path, host: str = "127.0.0.1"
) -> tuple[DemoForge, dict[str, str]]:
    """Start the stand-in; returns it and the variables that point a worker and a router at it."""
    root = state_dir / "demo-forge"
    token = await prepare(root)
    forge = DemoForge(root, token)
    url = await forge.start(host)
    return forge, {"GITHUB_AUTH_SOURCE": "pat", "GITHUB_PAT": token, "GITHUB_API_URL": url}


def credentials_set(env: Mapping[str, str]) -> bool:
    """Whether the operator configured GitHub; then ``dev`` uses it and starts no stand-in."""
    return bool(env.get("GITHUB_AUTH_SOURCE"))


def demo_delivery(number: int = 1) -> bytes:
    """A compact ``issues.labeled`` delivery that fires the sample rule."""
    payload = {
        "action": "labeled",
        "issue": {
            "number": number,
            "title": "Say hello",
            "body": "A demo issue: the agent should leave a file in its workspace.",
            "labels": [{"name": DEMO_LABEL}],
        },
        "label": {"name": DEMO_LABEL},
        "repository": {"full_name": REPO},
        "sender": {"id": 1, "login": "demo"},
    }
    return json.dumps(payload, separators=(",", ":")).encode()


def signed_headers(secret: str, body: bytes, delivery: str) -> dict[str, str]:
    """The headers GitHub sends with an ``issues`` delivery, HMAC-SHA256 over the raw body."""
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"Content-Type": "application/json", "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": signature}


def signed_curl(url: str, secret: str, body: bytes, delivery: str) -> str:
    """A ``curl`` that posts ``body`` as GitHub would: its event and delivery headers, HMAC-SHA256 signed."""
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return " ".join([
        "curl -sS -i", shlex.quote(url),
        "-H 'Content-Type: application/json'",
        "-H 'X-GitHub-Event: issues'",
        "-H", shlex.quote(f"X-GitHub-Delivery: {delivery}"),
        "-H", shlex.quote(f"X-Hub-Signature-256: {signature}"),
        "--data-binary", shlex.quote(body.decode()),
    ])
