"""Turns that resume after a crash, through the public API, on both backends.

A process killed mid-turn leaves the turn's messages as far as they were
committed. The state is built here directly in the store (what a killed
process leaves), then a fresh agent touches the conversation: the turn is
resumed from its committed state and finishes; a failed or cancelled turn is
not; a turn waiting for approval keeps waiting.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentik import (
    Message,
    ModelBackendError,
    ModelRequest,
    ModelResponse,
    Role,
    ToolCall,
    TurnError,
    open_chat_agent,
    tool,
)
from agentik.models import ScriptedModel
from tests.agent.helpers import assert_valid_history, stored
from tests.reliability.helpers import BACKENDS, Backend

RUNS: list[str] = []


@tool(idempotent=True)
async def lookup() -> str:
    """Read something; running it twice is harmless."""
    RUNS.append("lookup")
    return "found"


@tool
async def send_mail() -> str:
    """Send a mail; running it twice is not harmless."""
    RUNS.append("send_mail")
    return "sent"


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


def summarize(request: ModelRequest) -> ModelResponse:
    """Answers with what the turn's tool results said, or the user's text."""
    messages = request.messages
    user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
    results = [m.content for m in messages[user_at:] if m.role is Role.TOOL]
    return ModelResponse(text=" | ".join(results) or f"re: {messages[user_at].content}")


async def crashed_mid_tools(storage: object, *calls: ToolCall, answered: int = 0) -> None:
    """A killed process: a keyed user message, an assistant message with
    ``calls``, the first ``answered`` of them with results."""
    store = storage.message_store  # type: ignore[attr-defined]
    await store.append("conv", Message(Role.USER, "work"), idempotency_key="k")
    await store.append("conv", Message(Role.ASSISTANT, "", calls))
    for call in calls[:answered]:
        await store.append("conv", Message(Role.TOOL, "done before", tool_call_id=call.id))


def agent_over(storage: object, **options: object):  # type: ignore[no-untyped-def]
    return open_chat_agent(
        model=ScriptedModel(summarize),
        storage=storage,  # type: ignore[arg-type]
        tools=[lookup, send_mail],
        builtin_tools=False,
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_interrupted_turn_is_resumed_on_first_touch(backend: str, tmp_path: Path) -> None:
    """Idempotent calls run again, the others are answered ``interrupted``, the
    model goes on, the turn finishes once; a keyed retry replays it."""
    store = Backend(backend, tmp_path / "db")
    async with store.open() as storage:
        await crashed_mid_tools(
            storage,
            ToolCall("a", "lookup", "{}"),
            ToolCall("b", "send_mail", "{}"),
            ToolCall("c", "lookup", "{}"),
            answered=1,
        )
    async with store.open() as storage:
        async with agent_over(storage) as agent:
            nxt = await agent.send("conv", "next")
            assert nxt.text == "re: next"
            assert agent.stats.turns_resumed == 1
            replay = await agent.send("conv", "work", idempotency_key="k")
            assert replay.text == (
                "done before | interrupted: the process stopped before this call finished | found"
            )
            assert agent.stats.turns_replayed == 1
        history = await stored(storage, "conv")
    assert_valid_history(history)
    assert RUNS == ["lookup"], "only the idempotent call that had no result ran again"
    assert [m.content for m in history if m.role is Role.USER] == ["work", "next"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_turn_stopped_before_the_model_answered_is_resumed(
    backend: str, tmp_path: Path
) -> None:
    store = Backend(backend, tmp_path / "db")
    async with store.open() as storage:
        await storage.message_store.append("conv", Message(Role.USER, "work"), idempotency_key="k")
    async with store.open() as storage:
        async with agent_over(storage) as agent:
            result = await agent.send("conv", "work", idempotency_key="k")
            assert result.text == "re: work"
            assert [m.content for m in result.messages] == ["work", "re: work"]
        assert_valid_history(await stored(storage, "conv"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("then", ["new message", "keyed retry"])
async def test_a_failed_turn_is_not_resumed(backend: str, then: str, tmp_path: Path) -> None:
    """A turn that failed (and said so) stays failed across a restart: a new
    message does not resume it; its keyed retry still does, as before."""
    store = Backend(backend, tmp_path / "db")
    failing = [True]

    def flaky(request: ModelRequest) -> ModelResponse:
        if failing[0]:
            raise ModelBackendError("down")
        return summarize(request)

    async with store.open() as storage:
        async with open_chat_agent(model=ScriptedModel(flaky), storage=storage) as agent:
            with pytest.raises(TurnError):
                await agent.send("conv", "work", idempotency_key="k")
    failing[0] = False
    async with store.open() as storage:
        async with open_chat_agent(model=ScriptedModel(flaky), storage=storage) as agent:
            if then == "new message":
                assert (await agent.send("conv", "next")).text == "re: next"
                assert agent.stats.turns_resumed == 0
                expected = ["work", "next", "re: next"]
            else:
                retried = await agent.send("conv", "work", idempotency_key="k")
                assert retried.text == "re: work"
                assert agent.stats.turns_resumed == 1
                expected = ["work", "re: work"]
        history = await stored(storage, "conv")
    assert [m.content for m in history] == expected
    assert_valid_history(history)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_cancelled_turn_is_not_resumed(backend: str, tmp_path: Path) -> None:
    store = Backend(backend, tmp_path / "db")
    started = trio.Event()

    @tool
    async def slow() -> str:
        """Slow."""
        started.set()
        await trio.sleep_forever()
        return ""

    def call_slow(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role is Role.USER and request.messages[-1].content == "work":
            return ModelResponse(tool_calls=(ToolCall("s", "slow", "{}"),))
        return summarize(request)

    async with store.open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(call_slow), storage=storage, tools=[slow]
        ) as agent:
            async with trio.open_nursery() as nursery:

                async def work() -> None:
                    with pytest.raises(TurnError, match="cancelled"):
                        await agent.send("conv", "work")

                nursery.start_soon(work)
                await started.wait()
                assert await agent.cancel("conv") == 1
    async with store.open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(call_slow), storage=storage, tools=[slow]
        ) as agent:
            assert (await agent.send("conv", "next")).text == "re: next"
            assert agent.stats.turns_resumed == 0
        history = await stored(storage, "conv")
    assert_valid_history(history)
    assert history[2].content == "error: the turn was stopped before this tool call finished"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_resume_interrupted_false_only_answers_open_calls(
    backend: str, tmp_path: Path
) -> None:
    store = Backend(backend, tmp_path / "db")
    async with store.open() as storage:
        await crashed_mid_tools(storage, ToolCall("a", "lookup", "{}"))
    async with store.open() as storage:
        async with agent_over(storage, resume_interrupted=False) as agent:
            assert (await agent.send("conv", "next")).text == "re: next"
            assert agent.stats.turns_resumed == 0
        history = await stored(storage, "conv")
    assert RUNS == []
    assert_valid_history(history)
    assert history[2].content == "interrupted: the process stopped before this call finished"
    assert history[3].content == "next"
