"""The stand-in model: a scripted conversation over OpenAI-compatible streamed chat completions (a tool
call first, a final answer once a tool result came back), a 401 for a wrong key, nothing of the key kept."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from pidispatch.dev.modelstandin import (
    COMPLETION_TOKENS,
    FINAL_TEXT,
    PROMPT_TOKENS,
    WRITTEN_FILE,
    ModelStandIn,
    gateway_of,
)

KEY = "sk-standin-test"


@pytest.fixture
async def standin() -> AsyncIterator[ModelStandIn]:
    server = ModelStandIn(KEY)
    await server.start()
    yield server
    await server.close()


async def chat(server: ModelStandIn, messages: list[dict[str, Any]], key: str = KEY) -> tuple[int, list[Any]]:
    body = {"model": "m1", "stream": True, "stream_options": {"include_usage": True}, "messages": messages,
            "tools": [{"type": "function", "function": {"name": n}} for n in ("write", "read")]}
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.base_url}/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as resp:
        raw = await resp.text()
    if resp.status != 200:
        return resp.status, [json.loads(raw)]
    events = [line.removeprefix("data: ") for line in raw.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return 200, [json.loads(e) for e in events[:-1]]


async def test_the_first_turn_calls_the_write_tool_and_the_second_answers(standin: ModelStandIn) -> None:
    status, chunks = await chat(standin, [{"role": "user", "content": "task"}])
    assert status == 200
    calls = [c for ch in chunks for choice in ch["choices"] for c in choice["delta"].get("tool_calls", ())]
    assert calls[0]["function"]["name"] == "write" and calls[0]["id"].startswith("call_")
    args = json.loads("".join(c["function"].get("arguments", "") for c in calls))
    assert args["path"] == WRITTEN_FILE and args["content"]
    assert [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]][-1] == "tool_calls"
    assert chunks[-1]["usage"] == {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                                   "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}
    tool_result = {"role": "tool", "tool_call_id": calls[0]["id"], "content": "written"}
    status, chunks = await chat(standin, [{"role": "user", "content": "task"}, tool_result])
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
    assert status == 200 and text == FINAL_TEXT
    seen = [(s.authorized, s.stream, s.tool_results, s.tools) for s in standin.seen]
    assert seen == [(True, True, 0, ("read", "write")), (True, True, 1, ("read", "write"))]


async def test_a_wrong_key_is_refused_401_like_a_provider(standin: ModelStandIn) -> None:
    status, (body,) = await chat(standin, [{"role": "user", "content": "task"}], key="sk-wrong")
    assert status == 401 and body["error"]["code"] == "invalid_api_key"
    assert "sk-wrong" not in repr(standin.seen) and KEY not in repr(standin.seen)


def test_the_bridge_gateway_is_the_ipam_gateway_else_the_subnets_first_host() -> None:
    full = {"IPAM": {"Config": [{"Subnet": "172.17.0.0/16", "Gateway": "172.17.0.1"}]}}
    assert gateway_of(full) == "172.17.0.1"
    # Debian's 20.10 leaves the Gateway out of the default bridge's IPAM; docker0 still has the first host.
    assert gateway_of({"IPAM": {"Config": [{"Subnet": "172.18.0.0/16"}]}}) == "172.18.0.1"
    dual = {"IPAM": {"Config": [{"Subnet": "fd00::/64"}, {"Subnet": "10.9.0.0/24"}]}}
    assert gateway_of(dual) == "10.9.0.1"
    assert gateway_of({"IPAM": {"Config": []}}) is None
    assert gateway_of({}) is None
