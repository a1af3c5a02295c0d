"""No credential a process of pi-dispatch reads can be forwarded into a job, and run.secrets cannot bind a
name the runtime sets or steers: one rule for the router and the worker."""

from __future__ import annotations

import pytest

from pidispatch.common.envnames import FORGE_SECRET_VARS, parse_forward_env, secret_name_refused
from pidispatch.common.errors import ConfigError


@pytest.mark.parametrize("name", [*FORGE_SECRET_VARS, "PD_WEB_PASSWORD", "REDIS_PASSWORD", "VALKEY_PASSWORD",
                                  "REDIS_URL", "GITHUB_TOKEN", "GL_TOKEN", "PATH", "LD_PRELOAD"])
def test_forward_env_refuses_every_credential_and_runtime_name(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_forward_env(f"SENTRY_DSN,{name}")
    assert str(err.value).startswith(f"PI_FORWARD_ENV may not forward {name}:")


def test_forward_env_refuses_the_variable_a_pat_var_names() -> None:
    with pytest.raises(ConfigError):
        parse_forward_env("MY_TOKEN", {"GITHUB_PAT_VAR": "MY_TOKEN"})
    assert parse_forward_env("MY_TOKEN", {}) == ("MY_TOKEN",)


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "NODE_OPTIONS", "PI_PROVIDER", "OPENAI_BASE_URL",
                                  "GITHUB_TOKEN", "__proto__", "1BAD", "HOME"])
def test_a_secret_may_not_bind_a_name_the_runtime_sets_or_steers(name: str) -> None:
    assert secret_name_refused(name)


def test_an_ordinary_name_may_be_bound() -> None:
    assert not secret_name_refused("STRIPE_KEY")
