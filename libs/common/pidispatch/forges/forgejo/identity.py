"""Who the harness is on Forgejo: ``FORGEJO_BOT_ID``, else ``GET {url}/api/v1/user`` -> ``id``.

A 401/403 names ``FORGEJO_BOT_ID``: a repository-scoped token cannot read its own user.
"""

from __future__ import annotations

from pidispatch.forges.forgejo import FORGE
from pidispatch.forges.forgejo.config import block_of
from pidispatch.forges.route import IdentityAsk

NAME = FORGE.name
DENIED = ("a repository-scoped token cannot read its own user: set FORGEJO_BOT_ID to the harness account's "
          "numeric id, or give the token read:user")


async def resolve(calls: IdentityAsk) -> int:
    cfg = block_of(calls.config)
    assert cfg.token is not None
    body = await calls.json(NAME, "GET /api/v1/user", f"{cfg.url}/api/v1/user",
                            {"Authorization": f"token {cfg.token.reveal()}"}, denied=DENIED)
    return calls.id(NAME, "GET /api/v1/user", body)
