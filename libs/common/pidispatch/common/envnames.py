"""Names of variables in a job container's environment that the runtime owns.

One table for the router (which refuses a trigger binding one of them as a secret) and the worker (which
builds the closed allowlist and refuses a forwarded or resolved name that would override it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pidispatch.common.errors import ConfigError

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Every variable the forges' config and receive parts read (each forge's ``settings_vars`` names its own; a
# test holds the union equal), for the start-up check of what an operator set.
FORGE_SETTINGS_VARS = (
    "WEBHOOK_SECRET", "WEBHOOK_SECRET_PREVIOUS", "GITHUB_AUTH_SOURCE", "GITHUB_PAT", "GITHUB_PAT_VAR",
    "GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID", "GITHUB_APP_PRIVATE_KEY", "GITHUB_APP_PRIVATE_KEY_PATH",
    "GITHUB_API_URL", "GITHUB_SELF_ID", "GITHUB_HEAL_HOOKS", "GITLAB_WEBHOOK_MODE", "GITLAB_WEBHOOK_SECRET",
    "GITLAB_WEBHOOK_SECRET_PREVIOUS", "GITLAB_URL", "GITLAB_TOKEN", "GITLAB_SELF_ID",
    "FORGEJO_WEBHOOK_SECRET", "FORGEJO_WEBHOOK_SECRET_PREVIOUS", "FORGEJO_URL", "FORGEJO_TOKEN",
    "FORGEJO_BOT_ID", "AZURE_WEBHOOK_MODE", "AZURE_WEBHOOK_SECRET", "AZURE_WEBHOOK_SECRET_PREVIOUS",
    "AZURE_WEBHOOK_HEADER", "AZURE_ORG_URL", "AZURE_TOKEN", "AZURE_GRAPH_URL", "AZURE_SELF_ID",
    "AZURE_SELF_EMAIL",
)
# Every variable a job's minted forge token may go in (each forge's ``token_vars`` names its own; a test
# holds the two equal). Listed here, below the forges, because settings and triggers refuse them too.
FORGE_TOKEN_VARS = (
    "GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "GL_TOKEN", "FORGEJO_TOKEN", "GITEA_SERVER_TOKEN",
    "AZURE_DEVOPS_EXT_PAT", "SYSTEM_ACCESSTOKEN",
)
FORGE_HOST_VARS = ("GITLAB_HOST", "FORGEJO_HOST", "AZURE_DEVOPS_ORG_URL")
EGRESS_VARS = (
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy", "NODE_USE_ENV_PROXY",
)
# Deleted from every container env last: a runner-internal name set from outside would steer the runner.
RUNNER_INTERNAL_VARS = ("PI_DISPATCH_CHILD_LEDGER", "PI_DISPATCH_RUNNER_PID")
# The Redis password for a URL without one, in the order they are read (the first set one wins).
REDIS_PASSWORD_VARS = ("VALKEY_PASSWORD", "REDIS_PASSWORD")
# Every variable that says where Redis is and how writes to it are held (common.settings' store part).
REDIS_SETTINGS_VARS = (
    "REDIS_URL", "VALKEY_URL", *REDIS_PASSWORD_VARS, "REDIS_SENTINELS", "REDIS_SENTINEL_MASTER",
    "REDIS_SENTINEL_PASSWORD", "PD_REPLICA_ACKS", "PD_REPLICA_ACK_TIMEOUT_MS",
)
# Every forge variable that holds a credential (each forge's ``secret_vars`` names its own; a test holds
# the union equal).
FORGE_SECRET_VARS = (
    "WEBHOOK_SECRET", "WEBHOOK_SECRET_PREVIOUS", "GITHUB_PAT", "GITHUB_APP_PRIVATE_KEY",
    "GITHUB_APP_PRIVATE_KEY_PATH", "GITLAB_WEBHOOK_SECRET", "GITLAB_WEBHOOK_SECRET_PREVIOUS",
    "GITLAB_TOKEN", "FORGEJO_WEBHOOK_SECRET", "FORGEJO_WEBHOOK_SECRET_PREVIOUS", "FORGEJO_TOKEN",
    "AZURE_WEBHOOK_SECRET", "AZURE_WEBHOOK_SECRET_PREVIOUS", "AZURE_TOKEN",
)
# The variable the status page's password is read from.
WEB_PASSWORD_VAR = "PD_WEB_PASSWORD"
# Worker-side secrets that must never be forwarded into a job: every credential a process of this
# project reads, and the Redis address (it may carry a password).
WORKER_ONLY_SECRETS = (
    *FORGE_SECRET_VARS, *REDIS_PASSWORD_VARS, "REDIS_URL", "VALKEY_URL", "REDIS_SENTINEL_PASSWORD",
    WEB_PASSWORD_VAR,
)
# A variable whose value names another variable that holds a credential (GITHUB_PAT_VAR=MY_TOKEN).
PAT_VAR_SUFFIX = "_PAT_VAR"

# The provider credential variables pi reads, in pi's order (first set one wins inside pi).
PROVIDER_KEY_VARS: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_OAUTH_TOKEN", "ANTHROPIC_API_KEY"),
    "openai": ("OPENAI_API_KEY",),
    "google": ("GEMINI_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "zai": ("ZAI_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
}

# Names the runtime sets itself. A trigger binding one would be overwritten, or would
# override what the worker set.
RESERVED_SECRET_NAMES = frozenset({
    *FORGE_TOKEN_VARS, *FORGE_HOST_VARS, *EGRESS_VARS,
    *RUNNER_INTERNAL_VARS,
    "PI_PROVIDER", "PI_MODEL", "PI_MAX_TURNS", "PI_MAX_TOKENS", "PI_JOB_ID", "PI_FLOW", "PI_COMMAND",
    "PI_OFFLINE", "PI_PACKAGES", "PI_SESSION_FILE", "PI_EXCLUDE_TOOLS", "PI_ALLOWED_MODELS",
    "PI_GLOBAL_ALLOW_EXTENSIONS", "PI_MAX_COST_MICROS", "PI_EXIT_AUTH", "PI_DISPATCH_KEYLESS",
    "PI_MODEL_BASE_URL", "PLAYWRIGHT_BROWSERS_PATH", "PLAYWRIGHT_MCP_BROWSER", "PLAYWRIGHT_MCP_SANDBOX",
    "HOME",
})
# Beyond the fixed set: steering variables no trigger may bind (credential files, endpoint overrides,
# the loader), matched by prefix or suffix.
RESERVED_PREFIXES = ("PI_", "PLAYWRIGHT_", "LD_", "DYLD_")
RESERVED_SUFFIXES = ("_BASE_URL",)
RESERVED_EXTRA = frozenset({
    "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_PROFILE", "GOOGLE_APPLICATION_CREDENTIALS",
    "PATH", "NODE_OPTIONS",
})


def secret_name_refused(name: str) -> bool:
    """A name no ``run.secrets`` entry may bind, whatever the deployment: the router refuses the file
    and the worker the job by this one rule."""
    return not ENV_NAME_RE.fullmatch(name) or name == "__proto__" or is_reserved_name(name)


def is_reserved_name(name: str) -> bool:
    """A name no secret or forwarded variable may take, whatever the job's provider."""
    return (
        name in RESERVED_SECRET_NAMES
        or name in RESERVED_EXTRA
        or name.startswith(RESERVED_PREFIXES)
        or name.endswith(RESERVED_SUFFIXES)
    )


def parse_forward_env(raw: str | None, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``PI_FORWARD_ENV``: names copied into every job; never a token, a credential the worker reads
    (the variables ``*_PAT_VAR`` in ``env`` name included) or a runtime name."""
    if raw is None:
        return ()
    named = {v.strip() for k, v in (env or {}).items() if k.endswith(PAT_VAR_SUFFIX) and v.strip()}
    minted = {*FORGE_TOKEN_VARS, *named}
    names = [n.strip() for n in raw.split(",") if n.strip()]
    for n in names:
        if not ENV_NAME_RE.match(n):
            raise ConfigError(f"PI_FORWARD_ENV name {n!r} is refused; accepted: variable names, commas")
        if n in minted or n in WORKER_ONLY_SECRETS or is_reserved_name(n):
            raise ConfigError(
                f"PI_FORWARD_ENV may not forward {n}: the worker sets it itself or it is a worker secret; "
                "accepted: other variable names"
            )
    return tuple(dict.fromkeys(names))
