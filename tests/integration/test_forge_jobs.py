"""Forge jobs end to end through a real worker, Redis and Docker against stand-in forges: a token minted for
the one repository, a clone of exactly the tip, the token only in its forge's container variables and nowhere
on disk or in any argv, and the fixed sentences on the item (one per terminal refusal, paid stop or failure;
nothing for a completed run or a retried attempt).

GitLab, Forgejo and Azure jobs are built by the router's own matchers from the real fixture payloads
(mutated only to steer the test agent), so the worker sees exactly the shape the router enqueues.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiodocker
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from structlog.testing import capture_logs

from pidispatch.common.keys import WORKER_GROUP, Keys
from pidispatch.common.models import Job
from pidispatch.common.redis import Redis
from pidispatch.common.settings import Settings
from pidispatch.forges.azure import match as match_azure
from pidispatch.forges.azure import payload as subset_azure
from pidispatch.forges.forgejo import match as match_forgejo
from pidispatch.forges.forgejo import payload as subset_forgejo
from pidispatch.forges.gitlab import match as match_gitlab
from pidispatch.forges.gitlab import payload as subset_gitlab
from pidispatch.triggers.decision import Fire
from pidispatch.triggers.lookup import SelfIds
from pidispatch.triggers.match.predicate import Predicate
from pidispatch.triggers.rules import CommentRule, ForgeGroup, LabelRule, PullRequestRule, Rules, RunSpec
from pidispatch.worker.engine.environment import FORGE_TOKEN_VARS
from pidispatch.worker.forgework import sentences
from tests.support.forges import (
    ISSUE_REPO,
    PAT,
    FakeForge,
    GithubStandIn,
    azure_forge,
    forgejo_forge,
    gitlab_forge,
    posted,
    set_repo,
)
from tests.support.gitserver import GitServer, git_server
from tests.support.payloads import WORKITEM_CREATED, load_fixture
from tests.support.polling import wait_for
from tests.support.worker import enqueue, issue_job, record, running_worker

Logs = list[dict[str, Any]]

# What each forge's git server insists on as the user name beside the token (GitHub and GitLab document
# these exact names; Forgejo and Azure take any name, and the worker sends its own).
GIT_USERS = {"github": "x-access-token", "gitlab": "oauth2", "forgejo": "pi-dispatch", "azure": "pi-dispatch"}
AZURE_ORG = "fabrikam"
APP_ID, INSTALLATION_ID = "12345", 777


# --- observations ----------------------------------------------------------------------------------------


def events(logs: Logs, name: str) -> Logs:
    return [e for e in logs if e["event"] == name]


def argv_holding(secret: bytes) -> list[int]:
    """Pids of every process on this machine whose argv (what ``ps`` shows anyone) holds ``secret``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if secret in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue  # gone between listing and reading
    return found


def files_holding(root: Path, secret: bytes) -> list[str]:
    """Every regular file under ``root`` (symlinks not followed) whose bytes hold ``secret``."""
    found = []
    for top, _, files in os.walk(root):
        for name in files:
            path = Path(top, name)
            if path.is_symlink() or not path.is_file():
                continue
            if secret in path.read_bytes():
                found.append(str(path.relative_to(root)))
    return found


def git_out(workspace: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", f"safe.directory={workspace}", "-C", str(workspace), *args],
        check=True, capture_output=True, text=True,
        env={"PATH": os.environ["PATH"], "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(workspace)},
    ).stdout.strip()


async def running_container(docker: aiodocker.Docker, job: Job) -> dict[str, Any]:
    """The job's container while it runs (its ``docker inspect``)."""
    filters = json.dumps({"label": [f"pd.job={job.id}"], "status": ["running"]})

    async def find() -> dict[str, Any] | None:
        for container in await docker.containers.list(filters=filters):
            with contextlib.suppress(aiodocker.DockerError):  # it may end between list and inspect
                return dict(await container.show())
        return None

    return await wait_for(find, 30, what=f"the running container of {job.id}")


def container_env(info: dict[str, Any]) -> dict[str, str]:
    return dict(item.partition("=")[::2] for item in info["Config"]["Env"])


def names_holding(env: dict[str, str], token: str) -> set[str]:
    return {name for name, value in env.items() if token in value}


def job_folder(settings: Settings) -> Path:
    folders = list(Path(settings.jobs_dir).glob("job-*"))
    assert len(folders) == 1, folders
    return folders[0]


@dataclass(frozen=True)
class Seen:
    """What the host and Docker showed while the agent slept."""

    env: dict[str, str]
    folder_leaks: list[str]
    git_config: bytes
    argv_pids: list[int]
    head: str
    depth: str
    origin: str


async def look_while_running(docker: aiodocker.Docker, settings: Settings, job: Job, token: str) -> Seen:
    info = await running_container(docker, job)
    folder = job_folder(settings)
    workspace = folder / "workspace"
    secret = token.encode()
    return Seen(
        env=container_env(info),
        folder_leaks=files_holding(folder, secret),
        git_config=(workspace / ".git" / "config").read_bytes(),
        argv_pids=argv_holding(secret),
        head=git_out(workspace, "rev-parse", "HEAD"),
        depth=git_out(workspace, "rev-list", "--count", "HEAD"),
        origin=git_out(workspace, "remote", "get-url", "origin"),
    )


def assert_token_kept(seen: Seen, token: str, kind: str, clone_url: str, tip: str) -> None:
    assert (seen.head, seen.depth) == (tip, "1")  # exactly the tip, one commit deep
    assert names_holding(seen.env, token) == set(FORGE_TOKEN_VARS[kind])
    assert all(seen.env[name] == token for name in FORGE_TOKEN_VARS[kind])
    others = {v for k, names in FORGE_TOKEN_VARS.items() if k != kind for v in names}
    assert not others & seen.env.keys()  # no other forge's variables at all (GITHUB_TOKEN included)
    assert seen.folder_leaks == []
    assert token.encode() not in seen.git_config and b"askpass" not in seen.git_config.lower()
    assert seen.origin == clone_url  # no user or token in the remote
    assert seen.argv_pids == []


async def seed_repository(git: GitServer) -> str:
    """Two commits, so a depth-1 clone of the tip is distinguishable from a full one."""
    await git.add_commit({"README.md": "first\n"}, message="first")
    return await git.add_commit({"README.md": "second\n", "src/app.txt": "tip\n"}, message="second")


# --- 1. a GitHub App job ---------------------------------------------------------------------------------


class InstallationGitServer(GitServer):
    """Git over HTTP as GitHub serves it to an App: ``x-access-token`` with an installation token the
    stand-in minted, scoped to include this repository; the PAT or any other token is refused."""

    def __init__(self, root: Path, forge: FakeForge, repo_name: str) -> None:
        super().__init__(root, username=GIT_USERS["github"], token="")
        self.forge, self.repo_name = forge, repo_name

    def _authorized(self, header: str | None) -> bool:
        if header is None or not header.startswith("Basic "):
            return False
        user, _, token = base64.b64decode(header[6:]).decode().partition(":")
        scope = self.forge.state["installation_tokens"].get(token)
        return user == self.username and scope is not None and self.repo_name in scope.get("repositories", ())


def pem_of(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


async def test_github_app_job_mints_for_its_repo_clones_the_tip_and_keeps_the_token_off_disk_and_argv(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, github: GithubStandIn,
    tmp_path: Path,
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    github.forge.state["app_public_key"] = key.public_key()
    app_env = {
        **{k: v for k, v in env.items() if k != "GITHUB_PAT"},
        "GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": APP_ID,
        "GITHUB_APP_INSTALLATION_ID": str(INSTALLATION_ID), "GITHUB_APP_PRIVATE_KEY": pem_of(key),
    }
    git = InstallationGitServer(tmp_path / "app-git", github.forge, "Hello-World")
    await git.start()
    try:
        tip = await seed_repository(git)
        set_repo(github.forge, ISSUE_REPO, sha=tip, clone_url=git.url, protected=True)
        job = issue_job("exit=0 sleep=2")
        git.hold = hold = asyncio.Event()
        with capture_logs() as logs:
            async with running_worker(app_env, redis, keys, docker) as (settings, _, _):
                await enqueue(redis, keys, job)
                # Mid-fetch, git and its helpers hold the token: ps must still not show it.
                await wait_for(git.held.is_set, 30, what="the clone's fetch")
                minted = list(github.forge.state["installation_tokens"])
                token = minted[0]
                fetching = argv_holding(token.encode())
                git_seen = argv_holding(git.url.encode())  # the scan does see the fetching git
                hold.set()
                seen = await look_while_running(docker, settings, job, token)
                rec = await record(settings, job)
    finally:
        await git.close()
    mints = github.forge.calls("access_tokens")
    assert len(minted) == 1  # one token per job, and a completed job mints no second one to comment
    assert [m.body for m in mints] == [{"repositories": ["Hello-World"]}]
    assert mints[0].path == f"/app/installations/{INSTALLATION_ID}/access_tokens"
    assert git_seen and fetching == []
    assert_token_kept(seen, token, "github", git.url, tip)
    assert (seen.env["GITHUB_TOKEN"], seen.env["GH_TOKEN"]) == (token, token)
    assert PAT not in seen.env.values()
    assert (rec["outcome"], rec["reason"], rec["attempt"], rec["exitCode"]) == ("completed", None, 1, 0)
    assert len(events(logs, "job_started")) == 1
    assert posted(github.forge) == [] and github.forge.calls("comment") == []  # completed says nothing


# --- 2, 4. refusals before spend on GitHub ---------------------------------------------------------------


async def run_to_answer(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, job: Job,
) -> tuple[dict[str, Any], Logs, Settings]:
    """Run ``job`` to its terminal record and its posted answer; the worker has stopped on return."""
    with capture_logs() as logs:
        async with running_worker(env, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            # The record is rewritten per attempt: the terminal one is read after the job finished.
            await wait_for(lambda: events(logs, "job_finished"), 30, what="the terminal attempt")
            rec = await record(settings, job)
            await wait_for(lambda: events(logs, "comment_posted"), 10, what="the answer on the issue")
    return rec, logs, settings


def assert_plain_sentence(text: str, job: Job, *extra: str) -> None:
    """No path, token, reference or payload text in what the forge shows everyone."""
    assert job.target is not None and job.target.title and job.target.body
    assert "/" not in text and "http" not in text
    for leak in (PAT, job.id, job.target.title, job.target.body, "Hello-World", *extra):
        assert leak not in text


async def test_an_unprotected_default_branch_is_refused_before_spend_with_exactly_one_comment(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, github: GithubStandIn,
    tmp_path: Path,
) -> None:
    set_repo(github.forge, ISSUE_REPO, sha=github.sha, clone_url=github.git.url, protected=False)
    job = issue_job("exit=0", number=3)
    rec, logs, settings = await run_to_answer(env, redis, keys, docker, job)
    assert (rec["outcome"], rec["reason"], rec["attempt"], rec["budgetReserved"]) == (
        "policy", "unprotected-branch", 1, False)
    assert not events(logs, "job_started") and github.git.authorizations == []  # nothing fetched or run
    text = sentences.refusal("unprotected-branch", local=False)
    assert posted(github.forge) == [{"repo": ISSUE_REPO, "on": "issue", "number": 3, "body": text}]
    assert_plain_sentence(text, job, str(tmp_path), settings.jobs_dir, github.sha)
    assert os.listdir(settings.jobs_dir) == []


async def test_a_tip_the_git_server_does_not_have_is_sha_gone_with_one_comment_and_no_retry(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, github: GithubStandIn,
    tmp_path: Path,
) -> None:
    gone = secrets.token_hex(20)
    set_repo(github.forge, ISSUE_REPO, sha=gone, clone_url=github.git.url, protected=True)
    job = issue_job("exit=0", number=4)
    rec, logs, settings = await run_to_answer({**env, "PI_RETRY_BASE_MS": "100"}, redis, keys, docker, job)
    assert (rec["outcome"], rec["reason"], rec["attempt"], rec["budgetReserved"]) == (
        "policy", "sha-gone", 1, False)
    assert github.git.authorizations  # the fetch was tried with the token and found nothing
    assert not events(logs, "job_started") and not events(logs, "job_retry_scheduled")
    assert await redis.zcard(keys.delayed) == 0
    assert (await redis.xpending(keys.jobs, WORKER_GROUP))["pending"] == 0
    text = sentences.refusal("sha-gone", local=False)
    assert posted(github.forge) == [{"repo": ISSUE_REPO, "on": "issue", "number": 4, "body": text}]
    assert_plain_sentence(text, job, gone, str(tmp_path))
    assert os.listdir(settings.jobs_dir) == []


# --- 5. a transient forge failure is retried -------------------------------------------------------------


async def test_a_forge_outage_on_the_repository_lookup_is_retried_silently_and_the_retry_runs(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, github: GithubStandIn,
) -> None:
    github.forge.answer("repo", 503)  # once: the next lookup is answered again
    # The only fetch is the second attempt's: held there, the first attempt's record is on disk.
    github.git.hold = hold = asyncio.Event()
    job = issue_job("exit=0", number=5)
    fast = {**env, "PI_RETRY_BASE_MS": "100"}
    with capture_logs() as logs:
        async with running_worker(fast, redis, keys, docker) as (settings, _, _):
            await enqueue(redis, keys, job)
            await wait_for(github.git.held.is_set, 30, what="the second attempt's fetch")
            first = await record(settings, job)
            said_before_retry = posted(github.forge)
            hold.set()
            await wait_for(lambda: events(logs, "job_finished"), 30, what="the second attempt")
            rec = await record(settings, job)
    assert (first["outcome"], first["reason"], first["attempt"], first["exitCode"]) == (
        "failed", "forge-unavailable", 1, None)
    assert said_before_retry == []
    assert [(e["attempt"], e["reason"]) for e in events(logs, "job_retry_scheduled")] == [
        (1, "forge-unavailable")]
    assert (rec["outcome"], rec["attempt"], rec["exitCode"]) == ("completed", 2, 0)
    assert len(github.forge.calls("repo")) == 2 and len(events(logs, "job_started")) == 1
    assert posted(github.forge) == []  # a retried attempt and a completed one say nothing


# --- 6. paid stops and terminal failures -----------------------------------------------------------------


async def test_a_paid_policy_stop_posts_the_stop_sentence_once(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, github: GithubStandIn,
) -> None:
    job = issue_job("exit=2", number=6)
    rec, logs, _ = await run_to_answer(env, redis, keys, docker, job)
    assert (rec["outcome"], rec["reason"], rec["exitCode"]) == ("policy", "runner-policy", 2)
    assert len(events(logs, "job_started")) == 1
    text = sentences.stopped("runner-policy")
    assert posted(github.forge) == [{"repo": ISSUE_REPO, "on": "issue", "number": 6, "body": text}]
    assert_plain_sentence(text, job)


async def test_a_terminal_failure_posts_one_failure_sentence_and_nothing_for_the_retried_attempt(
    env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, github: GithubStandIn,
) -> None:
    job = issue_job("exit=1", number=7)
    fast = {**env, "PI_RETRY_ATTEMPTS": "2", "PI_RETRY_BASE_MS": "100"}
    rec, logs, _ = await run_to_answer(fast, redis, keys, docker, job)
    assert (rec["outcome"], rec["reason"], rec["attempt"]) == ("failed", "container-exit-1", 2)
    assert [e["attempt"] for e in events(logs, "job_retry_scheduled")] == [1]
    assert len(events(logs, "job_started")) == 2
    # Both attempts failed alike: one sentence means the retried first attempt said nothing.
    failed = {"repo": ISSUE_REPO, "on": "issue", "number": 7, "body": sentences.FAILED}
    assert posted(github.forge) == [failed]
    assert len(events(logs, "comment_posted")) == 1


# --- 3. GitLab, Forgejo and Azure ------------------------------------------------------------------------


def rules_for(kind: str, group: ForgeGroup) -> Rules:
    groups = {k: group if k == kind else ForgeGroup() for k in ("github", "gitlab", "forgejo", "azure")}
    return Rules(groups=groups, cron=(), known_flows=frozenset({"fix"}), count=1)


def routed(decision: object) -> Job:
    assert isinstance(decision, Fire), decision
    return decision.job


def fix_run(**fields: Any) -> RunSpec:
    return RunSpec(flow="fix", **fields)


def gitlab_merge_request(delivery: str, steer: str) -> Job:
    p = load_fixture("gitlab/merge-request-event.json")
    p["object_attributes"]["description"] = f"pd-test {steer}"
    rule = PullRequestRule(index=0, actions=frozenset({"open"}), predicate=Predicate(), review_states=None,
                           run=fix_run())
    group = ForgeGroup(pull_request=(rule,))
    return routed(match_gitlab.decide(subset_gitlab.project(json.dumps(p)), rules_for("gitlab", group), None,
                                      delivery, True))


def gitlab_issue_note(delivery: str, steer: str) -> Job:
    p = load_fixture("gitlab/comment-issue-event.json")
    p["object_attributes"].update(note=f"@pi {steer}", action="create")
    group = ForgeGroup(comment=CommentRule(index=0, phrase="@pi", run=fix_run()))
    return routed(match_gitlab.decide(subset_gitlab.project(json.dumps(p)), rules_for("gitlab", group), None,
                                      delivery, True))


def forgejo_issue_label(delivery: str, steer: str) -> Job:
    p = load_fixture("gitea/issue-label-event.json")
    p["issue"]["body"] = f"pd-test {steer}"
    group = ForgeGroup(label=(LabelRule(index=0, predicate=Predicate(any=("bug",)), run=fix_run()),))
    return routed(match_forgejo.decide("issues", subset_forgejo.project(json.dumps(p)),
                                       rules_for("forgejo", group), None, delivery, True))


def forgejo_pull_request(delivery: str, steer: str) -> Job:
    p = load_fixture("gitea/pull-request-event.json")
    p["pull_request"]["body"] = f"pd-test {steer}"
    rule = PullRequestRule(index=0, actions=frozenset({"opened"}), predicate=Predicate(), review_states=None,
                           run=fix_run())
    return routed(match_forgejo.decide("pull_request", subset_forgejo.project(json.dumps(p)),
                                       rules_for("forgejo", ForgeGroup(pull_request=(rule,))), None, delivery,
                                       True))


def azure_pull_request(delivery: str, steer: str) -> Job:
    p = load_fixture("azuredevops/git.pullrequest.created.json")
    p["resource"]["description"] = f"pd-test {steer}"
    rule = PullRequestRule(index=0, actions=frozenset({"created"}), predicate=Predicate(), review_states=None,
                           run=fix_run())
    rules = rules_for("azure", ForgeGroup(pull_request=(rule,)))
    return routed(match_azure.decide(subset_azure.project(json.dumps(p)), rules, SelfIds(), delivery, True))


def azure_work_item(delivery: str, steer: str) -> Job:
    p = json.loads(WORKITEM_CREATED)
    p["resource"]["fields"].update({"System.Tags": "pi:go", "System.ChangedBy": "Dev <dev@example.com>",
                                    "System.Description": f"pd-test {steer}"})
    rule = LabelRule(index=0, predicate=Predicate(any=("pi:go",)), run=fix_run(repository="Fabrikam"))
    rules = rules_for("azure", ForgeGroup(label=(rule,)))
    return routed(match_azure.decide(subset_azure.project(json.dumps(p)), rules, SelfIds(), delivery, True))


@dataclass(frozen=True)
class Case:
    """One forge item: how the router builds its job, the repository as the stand-in keys it, and where
    an answer must land (the stand-in's route and its recorded comment)."""

    kind: str
    build: Callable[[str, str], Job]
    repo_key: Any
    repo_fields: dict[str, Any]
    route: str
    comment_repo: Any
    on: str
    number: int


GITLAB_MR = Case("gitlab", gitlab_merge_request, 1, {"path": "gitlabhq/gitlab-test"}, "mr_note", 1,
                 "pull_request", 1)
GITLAB_ISSUE = Case("gitlab", gitlab_issue_note, 5, {"path": "gitlab-org/gitlab-test"}, "issue_note", 5,
                    "issue", 17)
FORGEJO_ISSUE = Case("forgejo", forgejo_issue_label, "example/example", {}, "comment", "example/example",
                     "issue", 1)
FORGEJO_PR = Case("forgejo", forgejo_pull_request, "example/example", {}, "comment", "example/example",
                  "issue", 2)  # Forgejo numbers pull requests as issues and comments on them alike
AZURE_PR = Case("azure", azure_pull_request, "Fabrikam/Fabrikam",
                {"id": "4bc14d40-c903-45e2-872e-0462c7748079"}, "pr_thread", "Fabrikam/Fabrikam",
                "pull_request", 1)
AZURE_WORK_ITEM = Case("azure", azure_work_item, "FabrikamCloud/Fabrikam", {}, "workitem_comment",
                       "FabrikamCloud", "issue", 5)
COMMENT_ROUTES = {"gitlab": ("issue_note", "mr_note"), "forgejo": ("comment",),
                  "azure": ("workitem_comment", "pr_thread")}


@dataclass
class StandIn:
    kind: str
    forge: FakeForge
    token: str
    git: GitServer | None = None
    tip: str = ""

    def env(self) -> dict[str, str]:
        if self.kind == "gitlab":
            return {"GITLAB_URL": self.forge.url, "GITLAB_TOKEN": self.token}
        if self.kind == "forgejo":
            return {"FORGEJO_URL": self.forge.url, "FORGEJO_TOKEN": self.token}
        return {"AZURE_ORG_URL": f"{self.forge.url}/{AZURE_ORG}", "AZURE_TOKEN": self.token}

    def repo(self, case: Case, *, protected: bool) -> None:
        clone = {"sha": self.tip, "clone_url": self.git.url} if self.git is not None else {}
        set_repo(self.forge, case.repo_key, protected=protected, **case.repo_fields, **clone)


FAKES: dict[str, Callable[[], FakeForge]] = {
    "gitlab": gitlab_forge, "forgejo": forgejo_forge, "azure": lambda: azure_forge(AZURE_ORG),
}


@contextlib.asynccontextmanager
async def stand_in(kind: str, root: Path | None) -> AsyncIterator[StandIn]:
    """The forge's API with a fresh random token and, given ``root``, a git server requiring that token
    with the forge's git user name."""
    token = f"{kind}-{secrets.token_hex(16)}"
    async with FAKES[kind]() as forge:
        forge.state["token"] = token
        if root is None:
            yield StandIn(kind, forge, token)
            return
        async with git_server(root, username=GIT_USERS[kind], token=token) as git:
            yield StandIn(kind, forge, token, git, await seed_repository(git))


def assert_refusal_on_item(s: StandIn, case: Case, job: Job, rec: dict[str, Any], logs: Logs) -> None:
    assert (rec["outcome"], rec["reason"], rec["attempt"]) == ("policy", "unprotected-branch", 1)
    assert job.id not in {e.get("job") for e in events(logs, "job_started")}
    text = sentences.refusal("unprotected-branch", local=False)
    answer = {"repo": case.comment_repo, "on": case.on, "number": case.number, "body": text}
    assert posted(s.forge) == [answer]
    assert len(s.forge.calls(case.route)) == 1
    assert all(s.forge.calls(r) == [] for r in COMMENT_ROUTES[case.kind] if r != case.route)
    assert s.token not in text


@pytest.mark.parametrize("case", [GITLAB_MR, FORGEJO_ISSUE, AZURE_PR], ids=lambda c: f"{c.kind}-{c.route}")
async def test_forge_job_clones_the_tip_keeps_the_token_in_its_forge_variables_and_refusals_answer_the_item(
    case: Case, env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker, tmp_path: Path,
) -> None:
    async with stand_in(case.kind, tmp_path / f"{case.kind}-git") as s:
        assert s.git is not None
        s.repo(case, protected=True)
        ran = case.build(str(uuid.uuid4()), "exit=0 sleep=2")
        refused = case.build(str(uuid.uuid4()), "exit=0")
        assert ran.kind == case.kind
        with capture_logs() as logs:
            async with running_worker({**env, **s.env()}, redis, keys, docker) as (settings, _, _):
                await enqueue(redis, keys, ran)
                seen = await look_while_running(docker, settings, ran, s.token)
                first = await record(settings, ran)
                s.repo(case, protected=False)
                await enqueue(redis, keys, refused)
                second = await record(settings, refused)
                await wait_for(lambda: events(logs, "comment_posted"), 10, what="the refusal on the item")
        assert (first["outcome"], first["exitCode"]) == ("completed", 0)
        assert_token_kept(seen, s.token, case.kind, s.git.url, s.tip)
        # git asks without credentials first; every credential it sent is the forge's user and token.
        basic = "Basic " + base64.b64encode(f"{GIT_USERS[case.kind]}:{s.token}".encode()).decode()
        assert basic in s.git.authorizations
        assert set(s.git.authorizations) <= {None, basic}
        assert_refusal_on_item(s, case, refused, second, logs)  # and the completed run said nothing


@pytest.mark.parametrize("case", [GITLAB_ISSUE, FORGEJO_PR, AZURE_WORK_ITEM],
                         ids=lambda c: f"{c.kind}-{c.route}-{c.on}")
async def test_a_refusal_answers_on_the_items_own_endpoint(
    case: Case, env: dict[str, str], redis: Redis, keys: Keys, docker: aiodocker.Docker,
) -> None:
    async with stand_in(case.kind, None) as s:
        s.repo(case, protected=False)
        job = case.build(str(uuid.uuid4()), "exit=0")
        rec, logs, _ = await run_to_answer({**env, **s.env()}, redis, keys, docker, job)
        assert_refusal_on_item(s, case, job, rec, logs)
        assert not events(logs, "job_started")
