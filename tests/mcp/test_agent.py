"""MCP toolsets through real agent turns with the scripted model."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import trio

from agentik import Message, ModelRequest, ModelResponse, Role, ToolCall
from agentik.agent import open_chat_agent
from agentik.mcp import McpServerConfig, StdioServer, open_mcp_toolsets
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage
from tests.mcp.conftest import tiny_stdio
from tests.mcp.test_stdio import LIMIT, wait_for

TIME = McpServerConfig(
    transport=StdioServer(
        command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"]
    ),
    name="time",
)


class Script:
    """Answers each request with the next response, keeping the requests."""

    def __init__(self, *responses: ModelResponse) -> None:
        self.requests: list[ModelRequest] = []
        self._responses = list(responses)

    def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return self._responses.pop(0)

    def offered(self, i: int) -> set[str]:
        return {tool.name for tool in self.requests[i].tools}


def call(name: str, arguments: object, id: str = "c1") -> ModelResponse:
    return ModelResponse(tool_calls=(ToolCall(id=id, name=name, arguments=json.dumps(arguments)),))


async def test_the_model_calls_mcp_server_time_by_name_and_the_result_is_recorded() -> None:
    """A real PyPI server: the inactive toolset auto-activates and its answer is in history."""
    script = Script(call("time_get_current_time", {"timezone": "UTC"}), ModelResponse(text="Noon."))
    with trio.fail_after(LIMIT):
        async with (
            open_mcp_toolsets([TIME]) as sources,
            open_chat_agent(
                model=ScriptedModel(script), storage=in_memory_storage(), toolsets=sources
            ) as agent,
        ):
            result = await agent.send("conv-1", "what time is it?")
    user, asked, answer, final = result.messages
    assert (user.role, user.content) == (Role.USER, "what time is it?")
    assert asked.tool_calls[0].name == "time_get_current_time"
    assert (answer.role, answer.tool_call_id) == (Role.TOOL, "c1")
    payload = json.loads(answer.content)
    assert payload["timezone"] == "UTC"
    now = datetime.fromisoformat(payload["datetime"])
    assert abs((now - datetime.now(UTC)).total_seconds()) < LIMIT
    assert (final.role, final.content) == (Role.ASSISTANT, "Noon.")
    assert "time_get_current_time" not in script.offered(0)  # inactive: catalog only
    assert {"time_get_current_time", "time_convert_time"} <= script.offered(1)


async def test_a_changed_listing_reaches_conversations_at_their_next_step() -> None:
    """An active conversation is offered a new tool next step; an inactive one only sees the
    catalog row; a removed tool called later gets an error result, recorded like any other."""
    with trio.fail_after(LIMIT):
        async with open_mcp_toolsets([tiny_stdio(name="tiny")]) as (src,):
            script = Script(
                call("tiny_grow", {"name": "parrot"}),
                ModelResponse(text="grown"),
                ModelResponse(text="hello"),
                call("tiny_shrink", {"name": "parrot"}, id="c2"),
                ModelResponse(text="shrunk"),
                call("tiny_parrot", {"text": "hi"}, id="c3"),
                ModelResponse(text="gone"),
            )
            async with open_chat_agent(
                model=ScriptedModel(script), storage=in_memory_storage(), toolsets=[src]
            ) as agent:
                await agent.send("active", "grow a parrot")
                await wait_for(lambda: "tiny_parrot" in {t.name for t in src.contribution.tools})
                await agent.send("inactive", "hello")
                assert "tiny_parrot" not in script.offered(2)
                catalog = script.requests[2].messages[0].content
                assert "tiny — A tiny MCP server for the tests." in catalog
                await agent.send("active", "remove it")
                assert "tiny_parrot" in script.offered(3)
                await wait_for(
                    lambda: "tiny_parrot" not in {t.name for t in src.contribution.tools}
                )
                result = await agent.send("active", "call it")
                assert "tiny_parrot" not in script.offered(5)
    removed: Message = result.messages[2]
    assert (removed.role, removed.tool_call_id) == (Role.TOOL, "c3")
    assert removed.content == "error: tool 'tiny_parrot' not found"
