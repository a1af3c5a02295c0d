"""Who the harness is on GitLab: ``GITLAB_SELF_ID``, else ``GET {url}/api/v4/user`` -> ``id``."""

from __future__ import annotations

from pidispatch.forges.gitlab import FORGE
from pidispatch.forges.gitlab.config import block_of
from pidispatch.forges.route import IdentityAsk

NAME = FORGE.name


async def resolve(calls: IdentityAsk) -> int:
    cfg = block_of(calls.config)
    assert cfg.token is not None
    body = await calls.json(NAME, "GET /api/v4/user", f"{cfg.url}/api/v4/user",
                            {"PRIVATE-TOKEN": cfg.token.reveal()})
    return calls.id(NAME, "GET /api/v4/user", body)
