"""Azure DevOps' worker API (``pidispatch.forges.azure.api``): branch policies for protection, Basic auth,
exact refs, the sign-in page and the organisation user in clone URLs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from pidispatch.common.outcome import JobConfigRefused
from pidispatch.forges.azure.api import AzureApi, strip_username
from pidispatch.forges.check import failure
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.http import create_http
from tests.support.forgecases import KEYS, NEW_SHA, ROUTES, TOKENS, Case, forge_env
from tests.support.forges import TIP_SHA, azure_forge, set_repo


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


async def test_azure_counts_only_enabled_blocking_policies(http: aiohttp.ClientSession) -> None:
    async with azure_forge() as fake:
        c = Case("azure", fake, load_forge_config(forge_env("azure", fake.url)), http, KEYS["azure"],
                 TOKENS["azure"], ROUTES["azure"])
        api = c.api()
        for policies, expected in [
            ([], False),
            ([{"isEnabled": False, "isBlocking": True}], False),
            ([{"isEnabled": True, "isBlocking": False}], False),
            ([{"isEnabled": True, "isBlocking": False}, {"isEnabled": True, "isBlocking": True}], True),
        ]:
            c.repo(policies=policies)
            assert await api.protected(c.token, "main") is expected
        [first, *_] = fake.calls("policies")
        assert first.query == {"repositoryId": "3411ebc1-d5aa-464f-9615-0b527bc66719",
                               "refName": "refs/heads/main", "api-version": "7.1"}
        assert len(fake.calls("repository")) == 1  # the repository id is looked up once


async def test_azure_uses_basic_auth_and_the_exact_ref(http: aiohttp.ClientSession) -> None:
    async with azure_forge() as fake:
        set_repo(fake, KEYS["azure"], default_branch="main", sha=NEW_SHA, branches={"main-old": TIP_SHA})
        config = load_forge_config(forge_env("azure", fake.url))
        job = Case("azure", fake, config, http, None, "", ROUTES["azure"]).job()
        tip = await AzureApi(job, config, http).tip("az-pat")
        assert tip.sha == NEW_SHA  # heads/main also lists main-old: only the exact name counts
        [refs] = fake.calls("refs")
        assert refs.query == {"filter": "heads/main", "api-version": "7.1"}
        assert refs.headers["x-tfs-fedauthredirect"] == "Suppress"


def test_azure_203_sign_in_page_is_a_refusal() -> None:
    assert isinstance(failure("azure", 203, {}, "x", "AZURE_TOKEN"), JobConfigRefused)


def test_azure_remote_url_loses_only_a_bare_user_name() -> None:
    assert strip_username("https://org@dev.azure.com/org/p/_git/r") == "https://dev.azure.com/org/p/_git/r"
    assert strip_username("https://u:pw@dev.azure.com/x") == "https://u:pw@dev.azure.com/x"  # refused later
    # A user name that is not the organisation is not Azure's shape: kept, so the check refuses it.
    assert strip_username("https://pat@dev.azure.com/org/p") == "https://pat@dev.azure.com/org/p"
    assert strip_username("https://dev.azure.com/x") == "https://dev.azure.com/x"
