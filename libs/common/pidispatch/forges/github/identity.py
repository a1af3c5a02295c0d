"""Who the harness is on GitHub: ``GITHUB_SELF_ID``, else asked with its own credentials.

``pat``/``gh``: ``GET {api}/user`` with the token -> ``id``. ``app``: ``GET {api}/app`` with the App JWT
-> ``slug``, then ``GET {api}/users/<slug>[bot]`` with an installation token narrowed to metadata:read
-> the bot user's ``id`` (the App id is a different number and never a ``sender.id``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import yarl

from pidispatch.common.errors import ConfigError
from pidispatch.forges.github import FORGE
from pidispatch.forges.github.auth import GithubAuth, GithubAuthUnavailable, api_headers
from pidispatch.forges.github.config import block_of
from pidispatch.forges.identity import IdentityTransient
from pidispatch.forges.route import IdentityAsk

NAME = FORGE.name


async def _token(auth: GithubAuth, **kwargs: Any) -> str:
    try:
        return await auth.token(**kwargs)
    except GithubAuthUnavailable as exc:
        raise IdentityTransient(f"token-{exc.reason}") from None


async def resolve(calls: IdentityAsk) -> int:
    cfg = block_of(calls.config)
    auth = calls.sources.get(NAME)
    if not isinstance(auth, GithubAuth):
        raise ConfigError(f"could not resolve the {NAME} identity without GitHub auth; check "
                          f"{FORGE.identity_hint}")
    if cfg.auth_source != "app":
        body = await calls.json(NAME, "GET /user", f"{cfg.api_url}/user", api_headers(await _token(auth)))
        return calls.id(NAME, "GET /user", body)
    app = await calls.json(NAME, "GET /app", f"{cfg.api_url}/app", api_headers(await auth.jwt()))
    slug = app.get("slug") if isinstance(app, dict) else None
    if not isinstance(slug, str) or not slug:
        raise ConfigError(f"could not resolve the {NAME} identity: GET /app returned no slug; "
                          f"check {FORGE.identity_hint}")
    token = await _token(auth, permissions={"metadata": "read"})
    url = yarl.URL(f"{cfg.api_url}/users/{quote(slug + '[bot]', safe='')}", encoded=True)
    what = "GET /users/<app>[bot]"
    return calls.id(NAME, what, await calls.json(NAME, what, url, api_headers(token)))
