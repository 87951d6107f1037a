"""A streaming caller that stops reading without closing its stream (a
stalled HTTP client) must not hold its conversation forever."""

from __future__ import annotations

import trio
import trio.testing

from agentik import ModelRequest, ModelResponse, NamedTool, Role, ToolCall
from agentik.agent import TurnResult, open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage
from tests.reliability.helpers import check_history, history

CALLS = 30  # 4 events each (two deltas, started, finished): past the 64-event buffer


def respond(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if last.role is Role.USER and last.content == "many":
        calls = tuple(ToolCall(f"call-{i}", "echo", "{}") for i in range(CALLS))
        return ModelResponse(tool_calls=calls)
    return ModelResponse(text="done")


async def echo(arguments: dict[str, object]) -> str:
    return "echoed"


async def test_stalled_stream_reader_does_not_hold_the_conversation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The turn finishes and commits while its reader sits on the first event;
    the conversation's next turn runs within an hour of virtual time."""
    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=storage,
        tools=[NamedTool("echo", "Echo.", {"type": "object"}, echo)],
        builtin_tools=False,
    ) as agent:
        async with agent.stream("c", "many") as events:
            await events.__anext__()  # then the reader stalls
            result: TurnResult | None = None
            with trio.move_on_after(3600):
                result = await agent.send("c", "next")
            await agent.cancel("c")  # let the agent close either way
            assert result is not None, "the next turn waited an hour behind a stalled reader"
            assert result.text == "done"
    stored = await history(storage, "c")
    check_history(stored, once=("many", "next"))
    # user, one assistant message with all the calls, their results, the answer; then next.
    assert len(stored) == 1 + 1 + CALLS + 1 + 2
