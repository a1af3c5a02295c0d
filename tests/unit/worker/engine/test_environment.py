"""A job container's environment is a closed allowlist assigned in a fixed order."""

from __future__ import annotations

import pytest

from pidispatch.common.errors import ConfigError
from pidispatch.common.models import Job, Matched, Sender, Target, Trigger
from pidispatch.common.outcome import JobConfigRefused
from pidispatch.common.settings import Settings, load_settings
from pidispatch.worker.engine.environment import container_env
from tests.support.payloads import load_fixture

NAME = "pi-job-gh-1"
# A worker's environment: secrets, infrastructure, steering variables and values the job must not see.
HOST_JUNK = {
    "WEBHOOK_SECRET": "whsec", "GITHUB_PAT": "ghp_worker", "GITHUB_TOKEN": "ghs_worker",
    "GITHUB_APP_PRIVATE_KEY": "-----BEGIN", "REDIS_URL": "redis://h:6379/0", "VALKEY_PASSWORD": "pw",
    "AWS_SECRET_ACCESS_KEY": "aws", "OPENAI_API_KEY": "sk-openai", "PATH": "/usr/bin", "HOME": "/root",
    "LD_PRELOAD": "/tmp/evil.so", "NODE_OPTIONS": "--require x", "PI_DISPATCH_CHILD_LEDGER": "1",
    "PI_DISPATCH_RUNNER_PID": "42", "PI_PROVIDER": "openai", "PI_MODEL": "gpt", "PI_JOBS_DIR": "/srv/jobs",
    "GITLAB_TOKEN": "glpat-worker", "ANTHROPIC_BASE_URL": "http://evil", "USER": "worker",
}
FIXED = {
    "PLAYWRIGHT_BROWSERS_PATH": "/ms-playwright",
    "PLAYWRIGHT_MCP_BROWSER": "chromium",
    "PLAYWRIGHT_MCP_SANDBOX": "false",
    "PI_OFFLINE": "1",
}


def settings(**env: str) -> Settings:
    return load_settings(env)


def github_job(**overrides: object) -> Job:
    p = load_fixture("github/issues.labeled.json")
    job = Job(
        id="gh-1", kind="github", repo=p["repository"]["full_name"], flow="triage",
        target=Target(type="issue", number=p["issue"]["number"]),
        trigger=Trigger(event="issues", action="labeled", sender=Sender(id=p["sender"]["id"]),
                        matched=Matched(index=0, type="label", label="bug")),
    )
    for key, value in overrides.items():
        setattr(job, key, value)
    return job


def gitlab_job() -> Job:
    p = load_fixture("gitlab/issue-event.json")
    return Job(
        id="gl-1", kind="gitlab", repo=p["project"]["path_with_namespace"], flow="triage",
        project_id=p["object_attributes"]["project_id"],
        target=Target(type="issue", number=p["object_attributes"]["iid"]),
    )


def test_no_worker_variable_leaks_into_a_plain_job() -> None:
    env = container_env(github_job(), name=NAME, settings=settings(), host_env=HOST_JUNK, secrets={})
    assert env == {
        "PI_PROVIDER": "anthropic", "PI_MAX_TURNS": "30", "PI_JOB_ID": NAME, "PI_FLOW": "triage",
        "HOME": "/home/pi", **FIXED,
    }


def test_job_level_knobs_override_settings_and_lists_are_comma_joined() -> None:
    s = settings(PI_PROVIDER="openai", PI_MODEL="gpt-4o", PI_MAX_TURNS="12", PI_MAX_TOKENS="5000",
                 PI_ALLOWED_MODELS="openai/gpt-4o")
    job = github_job(provider="anthropic", model="claude-x", max_turns=7,
                     exclude_tools=["bash", "write"], models=["anthropic/claude-x", "anthropic/claude-y"])
    env = container_env(job, name=NAME, settings=s, host_env={}, secrets={})
    assert env["PI_PROVIDER"] == "anthropic"
    assert env["PI_MODEL"] == "claude-x"
    assert env["PI_MAX_TURNS"] == "7"
    assert env["PI_MAX_TOKENS"] == "5000"
    assert env["PI_EXCLUDE_TOOLS"] == "bash,write"
    assert env["PI_ALLOWED_MODELS"] == "anthropic/claude-x,anthropic/claude-y"


def test_deployment_model_list_applies_when_the_job_names_none() -> None:
    s = settings(PI_MODEL="gpt-4o", PI_ALLOWED_MODELS="openai/gpt-4o,openai/o3")
    env = container_env(github_job(), name=NAME, settings=s, host_env={}, secrets={})
    assert env["PI_MODEL"] == "gpt-4o"
    assert env["PI_ALLOWED_MODELS"] == "openai/gpt-4o,openai/o3"
    assert "PI_EXCLUDE_TOOLS" not in env


def test_a_command_job_gets_pi_command_and_no_flow() -> None:
    env = container_env(github_job(command="review"), name=NAME, settings=settings(), host_env={}, secrets={})
    assert env["PI_COMMAND"] == "review"
    assert "PI_FLOW" not in env


def test_provider_credential_copies_every_set_key_variable_of_the_job_provider_only() -> None:
    host = {**HOST_JUNK, "ANTHROPIC_OAUTH_TOKEN": "", "ANTHROPIC_API_KEY": "sk-ant"}
    env = container_env(github_job(), name=NAME, settings=settings(), host_env=host, secrets={})
    assert env["ANTHROPIC_API_KEY"] == "sk-ant"
    assert "ANTHROPIC_OAUTH_TOKEN" not in env  # set but empty: not a credential
    assert "OPENAI_API_KEY" not in env  # another provider's key is not this job's


def test_forwarded_names_are_copied_when_non_empty_and_never_displace_the_credential() -> None:
    s = settings(PI_FORWARD_ENV="OPENAI_API_KEY,SENTRY_DSN,EMPTY_ONE")
    host = {**HOST_JUNK, "ANTHROPIC_API_KEY": "sk-ant", "SENTRY_DSN": "https://dsn", "EMPTY_ONE": ""}
    env = container_env(github_job(), name=NAME, settings=s, host_env=host, secrets={})
    assert env["OPENAI_API_KEY"] == "sk-openai"
    assert env["SENTRY_DSN"] == "https://dsn"
    assert env["ANTHROPIC_API_KEY"] == "sk-ant"
    assert "EMPTY_ONE" not in env


def test_later_assignments_win_secrets_then_home_then_internal_deletion() -> None:
    s = settings(PI_FORWARD_ENV="SENTRY_DSN")
    host = {"ANTHROPIC_API_KEY": "sk-host", "SENTRY_DSN": "forwarded"}
    # Names resolve_secrets refuses first; the order is the second line of defence.
    secrets = {"SENTRY_DSN": "from-secret", "ANTHROPIC_API_KEY": "sk-secret", "PI_MODEL": "smuggled",
               "HOME": "/secret-home", "PI_DISPATCH_CHILD_LEDGER": "x", "DB_PASSWORD": "hunter2"}
    env = container_env(github_job(), name=NAME, settings=s, host_env=host, secrets=secrets)
    assert env["SENTRY_DSN"] == "from-secret"
    assert env["ANTHROPIC_API_KEY"] == "sk-secret"
    assert env["DB_PASSWORD"] == "hunter2"
    assert env["HOME"] == "/home/pi"
    assert "PI_DISPATCH_CHILD_LEDGER" not in env


def test_home_is_set_only_with_an_explicit_user() -> None:
    env = container_env(github_job(), name=NAME, settings=settings(), host_env=HOST_JUNK, secrets={},
                        user_set=False)
    assert "HOME" not in env


def test_gitlab_token_goes_only_into_gitlab_variables() -> None:
    secrets = {"GL_TOKEN": "from-secret"}
    env = container_env(gitlab_job(), name=NAME, settings=settings(), host_env=HOST_JUNK, secrets=secrets,
                        forge_token="glpat-minted")
    assert env["GITLAB_TOKEN"] == env["GL_TOKEN"] == "glpat-minted"
    assert not {"GITHUB_TOKEN", "GH_TOKEN", "FORGEJO_TOKEN", "AZURE_DEVOPS_EXT_PAT"} & env.keys()


def test_github_and_local_jobs_get_the_github_token_variables() -> None:
    for job in (github_job(), Job(id="local-1", kind="local", repo="local:app", flow="fix", folder="/x")):
        env = container_env(job, name=NAME, settings=settings(), host_env={}, secrets={}, forge_token="ghs_m")
        assert env["GITHUB_TOKEN"] == env["GH_TOKEN"] == "ghs_m"
        assert "GITLAB_TOKEN" not in env


def test_token_for_an_unknown_kind_or_an_empty_token_is_a_config_error() -> None:
    odd = github_job(kind="bitbucket")
    with pytest.raises(JobConfigRefused):
        container_env(odd, name=NAME, settings=settings(), host_env={}, secrets={}, forge_token="t")
    assert "GITHUB_TOKEN" not in container_env(odd, name=NAME, settings=settings(), host_env={}, secrets={})
    with pytest.raises(JobConfigRefused):
        container_env(github_job(), name=NAME, settings=settings(), host_env={}, secrets={}, forge_token="")


def test_a_secret_name_that_could_set_another_variable_is_refused() -> None:
    with pytest.raises(JobConfigRefused):
        container_env(github_job(), name=NAME, settings=settings(), host_env={}, secrets={"A=B": "x"})


def test_every_value_is_text() -> None:
    s = settings(PI_FORWARD_ENV="SENTRY_DSN", PI_MAX_TOKENS="10")
    env = container_env(github_job(), name=NAME, settings=s, host_env={"SENTRY_DSN": "d"}, secrets={"X": "y"},
                        forge_token="t")
    assert all(isinstance(v, str) for v in env.values())


def test_the_model_endpoint_is_the_deployments_and_nothing_else_sets_it() -> None:
    smuggled = {"PI_MODEL_BASE_URL": "http://evil.example/v1"}
    plain = container_env(github_job(), name=NAME, settings=settings(), host_env={}, secrets=smuggled)
    assert "PI_MODEL_BASE_URL" not in plain
    s = settings(PI_MODEL_BASE_URL="http://172.17.0.1:8089/v1/")
    env = container_env(github_job(), name=NAME, settings=s, host_env={}, secrets=smuggled)
    assert env["PI_MODEL_BASE_URL"] == "http://172.17.0.1:8089/v1"


@pytest.mark.parametrize("url", ["ftp://h/v1", "http://user:pw@h/v1", "http:///v1", "http://h/v1?k=1",
                                 "http://h/v 1", "localhost:8080"])
def test_a_model_endpoint_that_is_not_a_plain_http_url_refuses_the_start(url: str) -> None:
    with pytest.raises(ConfigError, match=r"^PI_MODEL_BASE_URL is refused"):
        settings(PI_MODEL_BASE_URL=url)
