"""GitLab's worker API (``pidispatch.forges.gitlab.api``): what differs from the other forges."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from pidispatch.common.models import Job, Target
from pidispatch.forges.config import load_forge_config
from pidispatch.forges.gitlab.api import GitlabApi
from pidispatch.forges.http import create_http
from tests.support.forgecases import forge_env
from tests.support.forges import gitlab_forge, set_repo


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    session = create_http()
    yield session
    await session.close()


async def test_gitlab_without_a_project_id_asks_by_the_encoded_path(http: aiohttp.ClientSession) -> None:
    async with gitlab_forge() as fake:
        set_repo(fake, 42, path="group/sub/proj")
        config = load_forge_config(forge_env("gitlab", fake.url))
        job = Job(id="gl-1", kind="gitlab", repo="group/sub/proj", target=Target(type="issue", number=3))
        tip = await GitlabApi(job, config, http).tip("glpat-test")
        assert tip.clone_url == f"{fake.url}/group/sub/proj.git"
        assert fake.calls("project")[0].path == "/api/v4/projects/group%2Fsub%2Fproj"
