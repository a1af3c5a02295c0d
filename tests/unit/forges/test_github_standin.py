"""The stand-in GitHub that ``pi-dispatch dev`` starts: the API calls a forge job makes, a clone, and the
signed delivery it prints."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import shlex
from pathlib import Path

import aiohttp

from pidispatch.common.models import Job, Target
from pidispatch.common.runtime import now_ms
from pidispatch.dev.forgestandin import REPO, demo_delivery, signed_curl, start_demo_forge
from pidispatch.forges.api import forge_api, start_forges
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.http import create_http
from pidispatch.worker.forgework.clone import clone_tip


def demo_job() -> Job:
    return Job(id="gh-demo", kind="github", repo=REPO, target=Target(type="issue", number=7))


async def test_a_forge_job_mints_reads_the_tip_clones_and_answers_against_the_demo(tmp_path: Path) -> None:
    forge, env = await start_demo_forge(tmp_path)
    http = create_http()
    try:
        config = load_forge_config(env)
        api = forge_api(demo_job(), start_forges(config, http, now_ms))
        token = await api.mint()
        tip = await api.tip(token)
        assert tip.default_branch == "main" and await api.protected(token, "main")
        workspace = tmp_path / "workspace"
        workspace.mkdir()
        assert await clone_tip(str(workspace), clone_url=tip.clone_url, sha=tip.sha, token=token,
                               username="x-access-token") is None
        git = await asyncio.create_subprocess_exec(
            "git", "-C", str(workspace), "rev-parse", "HEAD", stdout=asyncio.subprocess.PIPE
        )
        head = (await git.communicate())[0].decode().strip()
        assert head == tip.sha and (workspace / "README.md").exists()
        assert token not in (workspace / ".git" / "config").read_text()
        await api.comment(token, "Refused: a fixed sentence. Not run.")
        assert forge.comments == ["Refused: a fixed sentence. Not run."]
    finally:
        await http.close()
        await forge.close()


async def test_the_demo_refuses_without_its_token_and_never_accepts_a_push(tmp_path: Path) -> None:
    forge, env = await start_demo_forge(tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{forge.url}/repos/{REPO}") as resp:
                assert resp.status == 401
            wrong = {"Authorization": "token wrong"}
            async with http.get(f"{forge.url}/repos/{REPO}", headers=wrong) as resp:
                assert resp.status == 401
            push = f"{forge.url}/git/{REPO}.git/info/refs?service=git-receive-pack"
            auth = {"Authorization": aiohttp.encode_basic_auth("x-access-token", env["GITHUB_PAT"])}
            async with http.get(push, headers=auth) as resp:
                assert resp.status == 403
    finally:
        await forge.close()


async def test_the_token_and_repository_survive_a_restart(tmp_path: Path) -> None:
    first, env1 = await start_demo_forge(tmp_path)
    await first.close()
    second, env2 = await start_demo_forge(tmp_path)
    await second.close()
    assert env1["GITHUB_PAT"] == env2["GITHUB_PAT"]
    assert (tmp_path / "demo-forge" / "token").stat().st_mode & 0o777 == 0o600


def test_printed_curl_is_signed_over_exactly_the_bytes_it_sends() -> None:
    body = demo_delivery()
    argv = shlex.split(signed_curl("http://127.0.0.1:3000/github", "s3cret", body, "d-1"))
    sent = argv[argv.index("--data-binary") + 1].encode()
    headers = [argv[i + 1] for i, a in enumerate(argv) if a == "-H"]
    sig = next(h.split(": ", 1)[1] for h in headers if h.startswith("X-Hub-Signature-256"))
    assert sent == body
    assert sig == "sha256=" + hmac.new(b"s3cret", sent, hashlib.sha256).hexdigest()
    assert "X-GitHub-Delivery: d-1" in headers
    assert "X-GitHub-Event: issues" in headers
