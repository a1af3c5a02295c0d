"""Azure DevOps's authority question: is this actor a member of this project?

Asked for every delivery that would fire, through the Graph API: the actor's subject descriptor (by
GUID, or by walking the user list for an address), the project's descriptor, then the actor's
memberships, transitively upwards.
"""

from __future__ import annotations

import base64

import yarl

from pidispatch.forges.authority import CannotAnswer, seg
from pidispatch.forges.azure import FORGE
from pidispatch.forges.azure.config import block_of
from pidispatch.forges.http import Reply
from pidispatch.forges.route import AuthorityCalls
from pidispatch.triggers.lookup import Question

API_VERSION = "7.1-preview.1"
MAX_USER_PAGES = 20


class AzureMembership(Question, frozen=True, kw_only=True):
    """Actor by GUID or, failing that, email; project by id."""

    forge = FORGE.name
    project_id: str | None
    actor_id: str | None = None
    actor_email: str | None = None


def pat_headers(token: str) -> dict[str, str]:
    """A PAT authenticates as HTTP Basic with an empty user name."""
    basic = base64.b64encode(f":{token}".encode()).decode()
    return {"Authorization": f"Basic {basic}", "Accept": "application/json"}


class _AzureGraph:
    """The Graph calls of one question, sharing its headers and base URL."""

    def __init__(self, authority: AuthorityCalls, graph_url: str, headers: dict[str, str]) -> None:
        self.authority, self.graph, self.headers = authority, f"{graph_url}/_apis/graph", headers

    async def get(self, path: str, query: dict[str, str] | None = None) -> Reply:
        url = yarl.URL(f"{self.graph}/{path}", encoded=True).update_query(
            {**(query or {}), "api-version": API_VERSION}
        )
        reply = await self.authority.get(url, self.headers)
        if not reply.ok:
            raise CannotAnswer(f"status-{reply.status}")
        return reply

    async def value(self, path: str, query: dict[str, str] | None = None) -> object:
        return self.authority.json(await self.get(path, query))

    async def descriptor(self, q: AzureMembership) -> str | None:
        """The actor's subject descriptor: by GUID when the event had one, else by walking the user list
        for the email (Graph has no by-mail lookup). Running out of pages is indeterminate, not a no."""
        if isinstance(q.actor_id, str) and q.actor_id:
            body = await self.value(f"descriptors/{seg(q.actor_id)}")
            value = body.get("value") if isinstance(body, dict) else None
            return value if isinstance(value, str) and value else None
        if not isinstance(q.actor_email, str) or not q.actor_email:
            return None
        wanted = q.actor_email.lower()
        continuation: str | None = None
        for _ in range(MAX_USER_PAGES):
            query = {"subjectTypes": "aad,msa"}
            if continuation:
                query["continuationToken"] = continuation
            reply = await self.get("users", query)
            body = self.authority.json(reply)
            users = body.get("value") if isinstance(body, dict) else None
            if not isinstance(users, list):
                raise CannotAnswer("no-array")
            for user in users:
                if isinstance(user, dict) and wanted in (
                    str(user.get("principalName") or "").lower(), str(user.get("mailAddress") or "").lower()
                ):
                    found = user.get("descriptor")
                    return found if isinstance(found, str) and found else None
            continuation = reply.headers.get("x-ms-continuationtoken") or None
            if continuation is None:
                return None  # the whole directory was read: a determinate "not in this org"
        raise CannotAnswer("page-cap")


async def is_member(q: AzureMembership, authority: AuthorityCalls) -> bool:
    if not isinstance(q.project_id, str) or not q.project_id:
        return False
    cfg = block_of(authority.config)
    if cfg.token is None or cfg.graph_url is None:
        raise CannotAnswer("not-configured")
    graph = _AzureGraph(authority, cfg.graph_url, pat_headers(cfg.token.reveal()))
    descriptor = await graph.descriptor(q)
    if descriptor is None:
        return False
    scope = await graph.value(f"descriptors/{seg(q.project_id)}")
    container = scope.get("value") if isinstance(scope, dict) else None
    if not isinstance(container, str) or not container:
        raise CannotAnswer("no-project-descriptor")
    # direction=up is transitive: a member of a team inside the project is a project member.
    body = await graph.value(f"memberships/{seg(descriptor)}", {"direction": "up"})
    memberships = body.get("value") if isinstance(body, dict) else None
    if not isinstance(memberships, list):
        raise CannotAnswer("no-array")
    return any(isinstance(m, dict) and m.get("containerDescriptor") == container for m in memberships)
