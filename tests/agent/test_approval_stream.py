"""``ChatAgent.stream_decision``: a decision whose turn runs on as a stream.

What ``decide`` does, with the events of what follows it: a denied call's
result, an approved call running, the model's answer, and the final
``TurnFinished`` (or ``TurnFailed``, also for a decision the agent cannot
take), as ``stream`` reports a turn. Transports that stream (AG-UI) need it.
"""

from __future__ import annotations

import pytest

from agentik import ModelRequest, ModelResponse, Role, ToolCall, open_chat_agent, tool
from agentik.agent import (
    ChatAgent,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFailed,
    TurnFinished,
)
from agentik.models import ScriptedModel, TextDelta
from agentik.storage import in_memory_storage

RUNS: list[int] = []


@tool(requires_approval=True)
async def wire_money(amount: int) -> str:
    """Send money."""
    RUNS.append(amount)
    return f"sent {amount}"


def respond(request: ModelRequest) -> ModelResponse:
    """Two calls needing approval for "pay"; then the results it saw."""
    last = request.messages[-1]
    if last.role is Role.USER:
        return ModelResponse(
            tool_calls=(
                ToolCall("c1", "wire_money", '{"amount": 1}'),
                ToolCall("c2", "wire_money", '{"amount": 2}'),
            )
        )
    turn_results = []
    for message in reversed(request.messages):
        if message.role is not Role.TOOL:
            break
        turn_results.append(message.content)
    return ModelResponse(text=" | ".join(reversed(turn_results)))


async def events_of(
    agent: ChatAgent, call_id: str, approve: bool, reason: str = ""
) -> list[TurnEvent]:
    async with agent.stream_decision("conv", call_id, approve=approve, reason=reason) as events:
        return [event async for event in events]


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


async def test_a_streamed_decision_reports_what_follows() -> None:
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=in_memory_storage(), tools=[wire_money]
    ) as agent:
        paused = await agent.send("conv", "pay")
        assert [a.call.id for a in paused.approvals] == ["c1", "c2"]

        # Not the last decision: the denial's result, then the still-waiting turn.
        first = await events_of(agent, "c1", False, "too much")
        c1 = paused.approvals[0].call
        assert first[:-1] == [ToolCallFinished(c1, "denied: too much", is_error=True)]
        end = first[-1]
        assert isinstance(end, TurnFinished)
        assert end.result.status == "awaiting_approval"
        assert [a.call.id for a in end.result.approvals] == ["c2"]

        # The last one: the approved call runs, then the model answers, streamed.
        second = await events_of(agent, "c2", True)
        c2 = paused.approvals[1].call
        assert second[:2] == [ToolCallStarted(c2), ToolCallFinished(c2, "sent 2")]
        text = "".join(e.text for e in second if isinstance(e, TextDelta))
        assert text == "denied: too much | sent 2"
        done = second[-1]
        assert isinstance(done, TurnFinished)
        assert done.result.status == "finished"
        assert done.result.text == text
        assert RUNS == [2]

        # The same decision again: nothing runs, the finished turn is the answer.
        again = await events_of(agent, "c2", True)
        assert again == [TurnFinished(done.result, done.active_toolsets)]
        assert RUNS == [2]


async def test_a_decision_the_agent_cannot_take_ends_the_stream() -> None:
    """``ApprovalError`` is the stream's ``TurnFailed``, with its code."""
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=in_memory_storage(), tools=[wire_money]
    ) as agent:
        await agent.send("conv", "pay")
        [failed] = await events_of(agent, "nope", True)
        assert failed == TurnFailed(
            "call 'nope' is not waiting for approval in conversation 'conv'", "not_waiting"
        )
        await events_of(agent, "c1", True)
        [failed] = await events_of(agent, "c1", False)
        assert failed == TurnFailed("call 'c1' was already approved", "already_decided")
        assert len(await agent.pending_approvals("conv")) == 1


async def test_stream_decision_checks_its_arguments() -> None:
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=in_memory_storage(), tools=[wire_money]
    ) as agent:
        with pytest.raises(ValueError, match="call_id must be a non-empty string"):
            async with agent.stream_decision("conv", "", approve=True):
                pass
        with pytest.raises(ValueError, match="reason must be valid Unicode text"):
            async with agent.stream_decision("conv", "c1", approve=False, reason="\ud800"):
                pass
