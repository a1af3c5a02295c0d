"""A local git smart-HTTP server for tests: ``git http-backend`` behind HTTP Basic auth, like a forge.

It serves one bare repository it creates and fills (``add_commit``), fetch-by-sha allowed as on GitHub,
and records every ``Authorization`` header it was sent so a test can see exactly how the token arrived.
``hold`` lets a test freeze authenticated fetch requests (to look at the client's processes mid-fetch).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import hmac
import os
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from aiohttp import web

REPO = "repo.git"
BRANCH = "main"


def isolated_git_env(home: Path) -> dict[str, str]:
    """git's environment for the server side: no system or user config, fixed identity, C locale."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Author",
        "GIT_COMMITTER_EMAIL": "author@example.invalid",
    }


async def run_git(env: Mapping[str, str], *args: str, stdin: bytes | None = None) -> bytes:
    """Run git; return stdout, or raise ``RuntimeError`` with its output when it fails."""
    proc = await asyncio.create_subprocess_exec(
        "git", *args, env=dict(env), stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin)
    if proc.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed ({proc.returncode}): {err.decode(errors='replace')}")
    return out


class GitServer:
    """One bare repository at ``url`` (``http://127.0.0.1:<port>/repo.git``), readable with Basic auth."""

    def __init__(self, root: Path, *, username: str, token: str) -> None:
        self.root = root
        self.username = username
        self.token = token
        self.projects = root / "projects"
        self.bare = self.projects / REPO
        self.work = root / "work"
        self.env = isolated_git_env(root / "home")
        self.authorizations: list[str | None] = []
        # When set, authenticated POSTs (the fetch itself) wait here before git answers them.
        self.hold: asyncio.Event | None = None
        self.held = asyncio.Event()
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        (self.root / "home").mkdir(parents=True)
        self.projects.mkdir()
        await run_git(self.env, "init", "-q", "--bare", f"--initial-branch={BRANCH}", str(self.bare))
        for key in ("uploadpack.allowReachableSHA1InWant", "uploadpack.allowAnySHA1InWant"):
            await run_git(self.env, "-C", str(self.bare), "config", key, "true")
        await run_git(self.env, "init", "-q", f"--initial-branch={BRANCH}", str(self.work))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/{REPO}"

    async def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def add_commit(
        self,
        files: Mapping[str, str | bytes],
        *,
        message: str = "change",
        symlinks: Mapping[str, str] | None = None,
    ) -> str:
        """Commit ``files`` (and ``symlinks``: path -> link target) on top of the branch; returns the sha."""
        for rel, content in files.items():
            path = self.work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.encode() if isinstance(content, str) else content)
        for rel, target in (symlinks or {}).items():
            path = self.work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
        work = str(self.work)
        await run_git(self.env, "-C", work, "add", "-A")
        await run_git(self.env, "-C", work, "commit", "-q", "-m", message)
        sha = (await run_git(self.env, "-C", work, "rev-parse", "HEAD")).decode().strip()
        await run_git(self.env, "-C", work, "push", "-q", str(self.bare), f"HEAD:refs/heads/{BRANCH}")
        return sha

    def _authorized(self, header: str | None) -> bool:
        expected = "Basic " + base64.b64encode(f"{self.username}:{self.token}".encode()).decode()
        return header is not None and hmac.compare_digest(header.encode(), expected.encode())

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        self.authorizations.append(header)
        if not self._authorized(header):
            return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="git"'})
        body = await request.read()
        if request.method == "POST" and self.hold is not None:
            self.held.set()
            await self.hold.wait()
        if body[:2] == b"\x1f\x8b":
            # The client gzips large requests; aiohttp may hand them over still compressed.
            body = gzip.decompress(body)
        env = {
            **self.env,
            "GIT_PROJECT_ROOT": str(self.projects),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": request.path,
            "QUERY_STRING": request.query_string,
            "REQUEST_METHOD": request.method,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": self.username,
            "REMOTE_ADDR": "127.0.0.1",
        }
        if "Git-Protocol" in request.headers:
            env["HTTP_GIT_PROTOCOL"] = request.headers["Git-Protocol"]
        proc = await asyncio.create_subprocess_exec(
            "git", "http-backend", env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate(body)
        return _cgi_response(out)


def _cgi_response(out: bytes) -> web.Response:
    """A CGI reply (headers, blank line, body) as an HTTP response; ``Status:`` sets the code."""
    match = re.search(rb"\r?\n\r?\n", out)
    head, payload = (out[: match.start()], out[match.end():]) if match else (out, b"")
    status = 200
    headers: dict[str, str] = {}
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            headers[name] = value.strip()
    headers.pop("Content-Length", None)
    return web.Response(status=status, headers=headers, body=payload)


@contextlib.asynccontextmanager
async def git_server(root: Path, *, username: str, token: str) -> AsyncIterator[GitServer]:
    """A started ``GitServer`` under ``root`` (an empty folder), closed on exit."""
    server = GitServer(root, username=username, token=token)
    await server.start()
    try:
        yield server
    finally:
        await server.close()
