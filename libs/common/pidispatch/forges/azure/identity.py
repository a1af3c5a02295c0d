"""Who the harness is on Azure DevOps: a GUID and an account address.

``AZURE_SELF_ID`` / ``AZURE_SELF_EMAIL`` when either is set (only the explicit values, no call); else
``GET {org}/_apis/connectionData`` -> ``authenticatedUser.id`` (GUID) and the account address from
``authenticatedUser.properties.Account`` (lower-cased). One of the two is enough; neither refuses.
"""

from __future__ import annotations

from typing import Any

import yarl

from pidispatch.common.errors import ConfigError
from pidispatch.forges.azure import FORGE
from pidispatch.forges.azure.authority import API_VERSION, pat_headers
from pidispatch.forges.azure.config import block_of
from pidispatch.forges.route import IdentityAsk
from pidispatch.triggers.jsvalues import js_trim

AzureSelf = tuple[str | None, str | None]  # (GUID, lower-cased address)


async def resolve(calls: IdentityAsk) -> AzureSelf:
    cfg = block_of(calls.config)
    assert cfg.token is not None
    url = yarl.URL(f"{cfg.org_url}/_apis/connectionData", encoded=True).update_query(
        {"api-version": API_VERSION}
    )
    body = await calls.json(FORGE.name, "GET _apis/connectionData", url, pat_headers(cfg.token.reveal()))
    user = body.get("authenticatedUser") if isinstance(body, dict) else None
    user = user if isinstance(user, dict) else {}
    raw_id = user.get("id")
    guid = raw_id if isinstance(raw_id, str) and raw_id else None
    email = _account(user.get("properties"))
    if guid is None and email is None:
        raise ConfigError(f"could not resolve the {FORGE.name} identity: connectionData named neither an id "
                          "nor an account address; set AZURE_SELF_ID or AZURE_SELF_EMAIL")
    return guid, email


def _account(props: Any) -> str | None:
    # The account name, never the display name: a display name is anyone's to choose.
    account = props.get("Account") if isinstance(props, dict) else None
    if isinstance(account, dict):
        account = account.get("$value")
    # Trimmed as the payload's addresses are (``payload.extract_email``), so the two compare equal.
    return js_trim(account).lower() if isinstance(account, str) and "@" in account else None
