"""GitLab's API configuration: instance URL, token and the harness account's id.

Read once from the environment and validated whole: a bad or half-configured block raises
``ConfigError`` naming the variable and what is accepted (exit 2). Secrets stay wrapped in ``Secret``.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from pidispatch.common.errors import ConfigError
from pidispatch.common.secret import Secret
from pidispatch.forges.config import ForgeConfig
from pidispatch.forges.envread import get, http_url, positive_id, secret
from pidispatch.forges.gitlab import FORGE

GITLAB_URL_DEFAULT = "https://gitlab.com"


class GitlabForge(msgspec.Struct, frozen=True, kw_only=True):
    url: str = GITLAB_URL_DEFAULT
    token: Secret[str] | None = None
    self_id: int | None = None

    @property
    def configured(self) -> bool:
        return self.token is not None

    def job_urls(self) -> tuple[str, ...]:
        """Where a job reaches GitLab (the egress allowlist): its API and git share one host."""
        return (self.url,)



def load(env: Mapping[str, str]) -> GitlabForge:
    url = http_url("GITLAB_URL", get(env, "GITLAB_URL") or GITLAB_URL_DEFAULT)
    token, self_id = secret(env, "GITLAB_TOKEN"), positive_id(env, "GITLAB_SELF_ID")
    # GITLAB_URL has a default, so it alone does not open the block.
    if self_id is not None and token is None:
        raise ConfigError("GITLAB_SELF_ID is set without GITLAB_TOKEN; accepted: both (the router asks "
                          "GitLab for every delivery's access level), or neither")
    return GitlabForge(url=url, token=token, self_id=self_id)


def block_of(config: ForgeConfig) -> GitlabForge:
    """This forge's block of ``config``, typed."""
    block = config.block(FORGE.name)
    assert isinstance(block, GitlabForge)
    return block
