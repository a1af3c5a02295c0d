"""Azure DevOps' API configuration: organisation and Graph URLs, token and the harness identity.

Read once from the environment and validated whole: a bad or half-configured block raises
``ConfigError`` naming the variable and what is accepted (exit 2). Secrets stay wrapped in ``Secret``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.forges.azure import FORGE
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.envread import get, http_url, secret

GUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
EMAIL_RE = re.compile(r"^[^\s@<>]+@[^\s@<>]+$")


class AzureForge(msgspec.Struct, frozen=True, kw_only=True):
    org_url: str | None = None
    graph_url: str | None = None  # derived from org_url unless AZURE_GRAPH_URL overrides it
    token: Secret[str] | None = None
    self_id: str | None = None
    self_email: str | None = None  # lower-cased

    @property
    def configured(self) -> bool:
        return self.token is not None

    def job_urls(self) -> tuple[str, ...]:
        """Where a job reaches Azure DevOps (the egress allowlist): the organisation's API and git."""
        return (self.org_url,) if self.org_url else ()



def derive_graph_url(org_url: str) -> str:
    """Azure's Graph API lives on a sibling host of the organisation URL."""
    parts = urlsplit(org_url)
    host = parts.hostname or ""
    if host == "dev.azure.com":
        return org_url.replace("://dev.azure.com", "://vssps.dev.azure.com", 1)
    if host.endswith(".visualstudio.com") and not host.endswith(".vssps.visualstudio.com"):
        org = host.removesuffix(".visualstudio.com")
        return org_url.replace(f"://{host}", f"://{org}.vssps.visualstudio.com", 1)
    return org_url  # Azure DevOps Server serves Graph on the collection URL itself


def load(env: Mapping[str, str]) -> AzureForge:
    names = ("AZURE_ORG_URL", "AZURE_TOKEN", "AZURE_SELF_ID", "AZURE_SELF_EMAIL", "AZURE_GRAPH_URL")
    if all(get(env, n) is None for n in names):
        return AzureForge()
    raw_org, token = get(env, "AZURE_ORG_URL"), secret(env, "AZURE_TOKEN")
    if raw_org is None or token is None:
        missing = "AZURE_ORG_URL" if raw_org is None else "AZURE_TOKEN"
        raise ConfigError(f"{missing} is required once any AZURE_* identity or API variable is set; "
                          "accepted: AZURE_ORG_URL (https://dev.azure.com/<org>) and AZURE_TOKEN (a PAT)")
    org_url = http_url("AZURE_ORG_URL", raw_org)
    graph_raw = get(env, "AZURE_GRAPH_URL")
    graph_url = http_url("AZURE_GRAPH_URL", graph_raw) if graph_raw else derive_graph_url(org_url)
    self_id = get(env, "AZURE_SELF_ID")
    if self_id is not None and not GUID_RE.match(self_id):
        raise ConfigError("AZURE_SELF_ID is refused; accepted: the harness identity's GUID "
                          "(xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
    email = get(env, "AZURE_SELF_EMAIL")
    if email is not None and not EMAIL_RE.match(email):
        raise ConfigError(
            "AZURE_SELF_EMAIL is refused; accepted: the harness account's address (name@domain)"
        )
    return AzureForge(
        org_url=org_url, graph_url=graph_url, token=token, self_id=self_id,
        self_email=email.lower() if email else None,
    )


def block_of(config: ForgeConfig) -> AzureForge:
    """This forge's block of ``config``, typed."""
    block = config.block(FORGE.name)
    assert isinstance(block, AzureForge)
    return block
