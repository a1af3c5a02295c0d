"""Forgejo's authority question: does this login have write (or admin) on this repository?

Asked for every delivery that would fire, by login; the answer has GitHub's collaborator shape.
"""

from __future__ import annotations

import yarl

from pidispatch.forges.authority import CannotAnswer, bad_segment, seg, split_repo
from pidispatch.forges.forgejo import FORGE
from pidispatch.forges.forgejo.config import block_of
from pidispatch.forges.route import AuthorityCalls
from pidispatch.triggers.lookup import Question


class ForgejoPermission(Question, frozen=True, kw_only=True):
    forge = FORGE.name
    repo: str
    login: str


async def may_write(q: ForgejoPermission, authority: AuthorityCalls) -> bool:
    repo = split_repo(q.repo)
    if repo is None or bad_segment(q.login):
        return False
    cfg = block_of(authority.config)
    if cfg.token is None or cfg.url is None:
        raise CannotAnswer("not-configured")
    url = (f"{cfg.url}/api/v1/repos/{seg(repo[0])}/{seg(repo[1])}"
           f"/collaborators/{seg(q.login)}/permission")
    reply = await authority.get(yarl.URL(url, encoded=True), {"Authorization": f"token {cfg.token.reveal()}"})
    return authority.permission(reply)
