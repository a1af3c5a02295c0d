"""GitLab's authority question: is this user a Developer (or above) of this project?

Asked for every delivery that would fire (a label proves nothing on GitLab), by numeric ids.
"""

from __future__ import annotations

from pidispatch.forges.authority import CannotAnswer
from pidispatch.forges.gitlab import FORGE
from pidispatch.forges.gitlab.config import block_of
from pidispatch.forges.route import AuthorityCalls
from pidispatch.triggers.jsvalues import js_int
from pidispatch.triggers.lookup import Question

DEVELOPER = 30


class GitlabMember(Question, frozen=True, kw_only=True):
    forge = FORGE.name
    project_id: int
    user_id: int


async def is_developer(q: GitlabMember, authority: AuthorityCalls) -> bool:
    project_id, user_id = js_int(q.project_id), js_int(q.user_id)
    if project_id is None or user_id is None or project_id < 1 or user_id < 1:
        return False
    cfg = block_of(authority.config)
    if cfg.token is None:
        raise CannotAnswer("not-configured")
    # members/all includes access inherited from parent groups, which is how most orgs grant it.
    url = f"{cfg.url}/api/v4/projects/{project_id}/members/all/{user_id}"
    reply = await authority.get(url, {"PRIVATE-TOKEN": cfg.token.reveal()})
    if reply.status == 404:
        return False
    if not reply.ok:
        raise CannotAnswer(f"status-{reply.status}")
    body = authority.json(reply)
    level = js_int(body.get("access_level")) if isinstance(body, dict) else None
    if level is None:
        raise CannotAnswer("no-access-level")
    return level >= DEVELOPER
