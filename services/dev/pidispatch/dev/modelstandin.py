"""A stand-in model provider for tests and the dev demo: a local OpenAI-compatible chat-completions server
that plays a scripted conversation, so the real, unmodified pi agent runs a whole job without a provider
account.

pi reaches it through its own configuration: ``PI_MODEL_BASE_URL`` makes the job image's runner override
the provider's base URL in pi's ``models.json``. The script: the first request is answered with one call
of pi's ``write`` tool (a file in the workspace), any request that carries a tool result with a final text
answer. A request without ``Authorization: Bearer <key>`` is answered 401, as a provider refusing a key.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

# A provider pi knows that speaks OpenAI chat completions, and one of its models: the stand-in overrides
# only its base URL, so pi runs exactly as it would against the real provider.
STANDIN_PROVIDER, STANDIN_MODEL, STANDIN_KEY_VAR = "groq", "llama-3.1-8b-instant", "GROQ_API_KEY"
WRITTEN_FILE = "PI_WAS_HERE.md"
WRITTEN_TEXT = "The pi agent ran here, against the pi-dispatch stand-in model.\n"
FINAL_TEXT = "I wrote PI_WAS_HERE.md in the workspace."
# Token counts the stand-in reports per answer: a record's tokens must come from these, not from nowhere.
PROMPT_TOKENS, COMPLETION_TOKENS = 120, 30


@dataclass(frozen=True)
class Seen:
    """One request as the stand-in saw it (never its key or its messages' text)."""

    at: float
    authorized: bool
    stream: bool
    tool_results: int
    model: str
    tools: tuple[str, ...] = ()  # the names of the tools the agent offered


def _sse(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _objects(body: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """The JSON objects in the body's list ``key`` (anything else in it, or no list, counts as none)."""
    value = body.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _tool_names(body: Mapping[str, Any]) -> tuple[str, ...]:
    functions = [t["function"] for t in _objects(body, "tools") if isinstance(t.get("function"), dict)]
    return tuple(sorted(f["name"] for f in functions if isinstance(f.get("name"), str)))


def _tool_results(body: Mapping[str, Any]) -> int:
    return sum(1 for m in _objects(body, "messages") if m.get("role") == "tool")


def answer_chunks(model: str, turn_with_tool: bool, call_id: str) -> list[dict[str, Any]]:
    """Pure: the SSE chunks of one answer (without the final ``[DONE]``), usage last."""
    base = {"id": f"chatcmpl-{call_id}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": model}
    if turn_with_tool:
        arguments = json.dumps({"path": WRITTEN_FILE, "content": WRITTEN_TEXT})
        deltas: list[dict[str, Any]] = [
            {"role": "assistant", "content": None, "tool_calls": [{
                "index": 0, "id": f"call_{call_id}", "type": "function",
                "function": {"name": "write", "arguments": ""}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]},
        ]
        finish = "tool_calls"
    else:
        deltas = [{"role": "assistant", "content": ""}, {"content": FINAL_TEXT}]
        finish = "stop"
    chunks = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": {
        "prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}})
    return chunks


@dataclass
class ModelStandIn:
    """``start`` it on ``host`` (0: any free port); ``base_url`` is what ``PI_MODEL_BASE_URL`` gets."""

    key: str
    host: str = "127.0.0.1"
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    # Set by a test to hold the final answer until it has looked at the job mid-run.
    hold_final: asyncio.Event | None = None
    probes: int = 0  # GET /v1/models answered
    _runner: web.AppRunner | None = None

    @property
    def key_var(self) -> str:
        """The variable pi reads this stand-in's key from (its provider's)."""
        return STANDIN_KEY_VAR

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or ()
        self.port = int(sockets[0].getsockname()[1]) if sockets else self.port

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _models(self, request: web.Request) -> web.Response:
        """The model list, with no key needed: what a reachability probe fetches (counted in ``probes``,
        so the caller knows this stand-in answered, not something else at the address)."""
        self.probes += 1
        return web.json_response({"object": "list", "data": [{"id": STANDIN_MODEL, "object": "model"}]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")
        authorized = hmac.compare_digest(given.encode(), f"Bearer {self.key}".encode())
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            return web.json_response({"error": {"message": "the body is not a JSON object"}}, status=400)
        model = str(body.get("model") or "stand-in")
        stream = body.get("stream") is True
        results = _tool_results(body)
        self.seen.append(Seen(time.time(), authorized, stream, results, model, _tool_names(body)))
        if not authorized:
            return web.json_response({"error": {
                "message": "Incorrect API key provided.", "type": "invalid_request_error",
                "code": "invalid_api_key"}}, status=401)
        if not stream:  # pi always streams; anything else is not the client this plays for
            refusal = {"error": {"message": "only streamed requests are answered"}}
            return web.json_response(refusal, status=400)
        if results and self.hold_final is not None:
            await self.hold_final.wait()
        chunks = answer_chunks(model, results == 0, str(len(self.seen)))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(_sse(chunk))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def serve_forever(key: str, host: str, port: int) -> None:
    """For a manual run: serve until cancelled."""
    standin = ModelStandIn(key, host, port)
    await standin.start()
    try:
        await asyncio.Event().wait()
    finally:
        await standin.close()


async def bridge_gateway(docker: Any) -> str | None:
    """The host's address on Docker's default bridge, where job containers (``NetworkMode: bridge``)
    reach a server on the host; None when the daemon does not say."""
    try:
        network = await docker.networks.get("bridge")
        info = await network.show()
    except Exception:
        return None
    return gateway_of(info)


def gateway_of(info: Mapping[str, Any]) -> str | None:
    """Pure: the bridge's gateway from ``GET /networks/bridge``: its IPAM ``Gateway``, else (a daemon that
    leaves it out, as Debian's 20.10 does) the first host of its IPv4 ``Subnet``, which is the address
    Docker gives the bridge interface by default."""
    return ipam_gateway(info) or subnet_first_host(info)


def _ipam_configs(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [c for c in (info.get("IPAM") or {}).get("Config") or () if isinstance(c, dict)]


def ipam_gateway(info: Mapping[str, Any]) -> str | None:
    """Pure: the IPv4 ``Gateway`` the daemon reports for the network, if it reports one."""
    for config in _ipam_configs(info):
        gateway = config.get("Gateway")
        if isinstance(gateway, str) and gateway.count(".") == 3:
            return gateway
    return None


def subnet_first_host(info: Mapping[str, Any]) -> str | None:
    """Pure: the first host of the network's IPv4 ``Subnet`` (Docker's default address for the bridge)."""
    for config in _ipam_configs(info):
        try:
            subnet = ipaddress.ip_network(str(config.get("Subnet")), strict=False)
        except ValueError:
            continue
        if subnet.version == 4 and subnet.num_addresses > 2:
            return str(next(subnet.hosts()))
    return None
