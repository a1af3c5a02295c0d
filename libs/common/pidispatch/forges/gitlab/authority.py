"""GitLab's authority question: is this user a Developer (or above) of this project?

Asked for every delivery that would fire (a label proves nothing on GitLab), by numeric ids.
"""

from __future__ import annotations

from pidispatch.forges.authority import CannotAnswer, is_int
from pidispatch.forges.gitlab import FORGE
from pidispatch.forges.gitlab.config import block_of
from pidispatch.forges.route import AuthorityCalls
from pidispatch.triggers.lookup import Question

DEVELOPER = 30


class GitlabMember(Question, frozen=True, kw_only=True):
    forge = FORGE.name
    project_id: int
    user_id: int


async def is_developer(q: GitlabMember, authority: AuthorityCalls) -> bool:
    if not is_int(q.project_id) or not is_int(q.user_id) or q.project_id < 1 or q.user_id < 1:
        return False
    cfg = block_of(authority.config)
    if cfg.token is None:
        raise CannotAnswer("not-configured")
    # members/all includes access inherited from parent groups, which is how most orgs grant it.
    url = f"{cfg.url}/api/v4/projects/{int(q.project_id)}/members/all/{int(q.user_id)}"
    reply = await authority.get(url, {"PRIVATE-TOKEN": cfg.token.reveal()})
    if reply.status == 404:
        return False
    if not reply.ok:
        raise CannotAnswer(f"status-{reply.status}")
    body = authority.json(reply)
    level = body.get("access_level") if isinstance(body, dict) else None
    if not is_int(level):
        raise CannotAnswer("no-access-level")
    return level >= DEVELOPER
