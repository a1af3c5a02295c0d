"""GitHub's authority question: may this login close items in this repo?

Asked only for a close some close rule wants (``match.wants_closer_authority``); write or admin on the
repository authorises, a 404 refuses.
"""

from __future__ import annotations

import yarl

from pidispatch.forges.authority import CannotAnswer, bad_segment, seg, split_repo
from pidispatch.forges.github import FORGE
from pidispatch.forges.github.auth import GithubAuth, api_headers
from pidispatch.forges.github.config import block_of
from pidispatch.forges.route import AuthorityCalls
from pidispatch.triggers.lookup import Question


class GithubCloser(Question, frozen=True, kw_only=True):
    """May this login close items in this repo? (only asked for a close a close rule wants)"""

    forge = FORGE.name
    repo: str
    login: str


async def may_close(q: GithubCloser, authority: AuthorityCalls) -> bool:
    repo = split_repo(q.repo)
    if repo is None or bad_segment(q.login):
        return False  # the payload named nothing we could ask about: determinate, no call
    auth = authority.sources.get(FORGE.name)
    if not block_of(authority.config).configured or not isinstance(auth, GithubAuth):
        raise CannotAnswer("not-configured")
    try:
        # App: scoped to the one repo and narrowed to metadata:read, so this token cannot write.
        token = await auth.token(q.repo, permissions={"metadata": "read"})
    except Exception:  # every mint failure, determinate or not: the closer's standing is unknown
        raise CannotAnswer("token-mint-failed") from None
    url = (f"{block_of(authority.config).api_url}/repos/{seg(repo[0])}/{seg(repo[1])}"
           f"/collaborators/{seg(q.login)}/permission")
    return authority.permission(await authority.get(yarl.URL(url, encoded=True), api_headers(token)))
