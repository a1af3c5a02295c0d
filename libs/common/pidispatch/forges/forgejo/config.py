"""Forgejo's API configuration: instance URL, token and the harness account's id.

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
from pidispatch.forges.forgejo import FORGE


class ForgejoForge(msgspec.Struct, frozen=True, kw_only=True):
    url: str | None = None
    token: Secret[str] | None = None
    bot_id: int | None = None

    @property
    def configured(self) -> bool:
        return self.token is not None

    def job_urls(self) -> tuple[str, ...]:
        """Where a job reaches Forgejo (the egress allowlist): its API and git share one host."""
        return (self.url,) if self.url else ()



def load(env: Mapping[str, str]) -> ForgejoForge:
    raw_url, token = get(env, "FORGEJO_URL"), secret(env, "FORGEJO_TOKEN")
    bot_id = positive_id(env, "FORGEJO_BOT_ID")
    if raw_url is None and token is None and bot_id is None:
        return ForgejoForge()
    if raw_url is None or token is None:
        missing = "FORGEJO_URL" if raw_url is None else "FORGEJO_TOKEN"
        raise ConfigError(f"{missing} is required once any FORGEJO_* variable is set; accepted: "
                          "FORGEJO_URL (the instance root, e.g. https://codeberg.org) and FORGEJO_TOKEN")
    return ForgejoForge(url=http_url("FORGEJO_URL", raw_url), token=token, bot_id=bot_id)


def block_of(config: ForgeConfig) -> ForgejoForge:
    """This forge's block of ``config``, typed."""
    block = config.block(FORGE.name)
    assert isinstance(block, ForgejoForge)
    return block
