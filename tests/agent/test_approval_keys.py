"""Approvals addressed by the paused turn's idempotency key (what A2A needs:
a task is a turn, its id the turn's key), on both backends:

- ``decide(..., idempotency_key=K)`` decides only a call of the turn keyed K,
  and the turn it runs on counts as K's (``turn_in_progress``, and
  ``cancel(idempotency_key=K)`` stops it);
- ``cancel_paused(idempotency_key=K)`` ends the paused turn K as cancelled:
  its waiting calls denied, nothing run, and left alone after a restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from agentik import (
    ApprovalError,
    ContextPolicy,
    ModelRequest,
    ModelResponse,
    Role,
    ToolCall,
    TurnError,
    open_chat_agent,
    tool,
)
from agentik.models import ScriptedModel
from tests.agent.helpers import assert_valid_history, live_conversation, stored
from tests.reliability.helpers import BACKENDS, Backend

RUNS: list[int] = []


@tool(requires_approval=True)
async def pay(amount: int) -> str:
    """Pay."""
    RUNS.append(amount)
    return f"paid {amount}"


class Model:
    """``pay N`` asks to pay N (call id ``c<N>``); after the result it waits on
    ``gate`` (when set) and answers with the results it saw."""

    def __init__(self) -> None:
        self.gate: trio.Event | None = None
        self.waiting = trio.Event()

    async def respond(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role is Role.USER:
            amount = int(last.content.split()[1])
            return ModelResponse(
                tool_calls=(ToolCall(f"c{amount}", "pay", f'{{"amount": {amount}}}'),)
            )
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        return ModelResponse(text=f"answer after {last.content}")


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_keyed_decision_decides_only_its_own_turn(backend: str, tmp_path: Path) -> None:
    model = Model()
    async with Backend(backend, tmp_path / "db").open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(model.respond), storage=storage, tools=[pay]
        ) as agent:
            await agent.send("conv", "pay 1", idempotency_key="k1")
            with pytest.raises(ApprovalError) as info:
                await agent.decide("conv", "c1", approve=True, idempotency_key="other")
            assert info.value.code == "not_waiting"
            assert RUNS == []
            done = await agent.decide("conv", "c1", approve=True, idempotency_key="k1")
            assert done.text == "answer after paid 1"
            again = await agent.decide("conv", "c1", approve=True, idempotency_key="k1")
            assert again == done  # the same decision again: the turn's result
            with pytest.raises(ApprovalError) as info:
                await agent.decide("conv", "c1", approve=True, idempotency_key="other")
            assert info.value.code == "not_waiting"
        assert_valid_history(await stored(storage, "conv"))


@pytest.mark.parametrize("keyed", [True, False])
async def test_the_run_after_a_decision_is_that_keys_turn(tmp_path: Path, keyed: bool) -> None:
    """While the approved turn runs on, ``turn_in_progress`` says so for its key,
    and ``cancel`` by that key stops it (recorded cancelled, history valid),
    also when the decision named no key (another transport decided it)."""
    model = Model()
    model.gate = trio.Event()
    async with Backend("sqlite", tmp_path / "db").open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(model.respond), storage=storage, tools=[pay]
        ) as agent:
            await agent.send("conv", "pay 2", idempotency_key="k2")
            assert not agent.turn_in_progress("conv", "k2")
            async with trio.open_nursery() as nursery:
                outcome: list[BaseException] = []

                async def decide() -> None:
                    try:
                        key = "k2" if keyed else None
                        await agent.decide("conv", "c2", approve=True, idempotency_key=key)
                    except TurnError as exc:
                        outcome.append(exc)

                nursery.start_soon(decide)
                await model.waiting.wait()
                assert agent.turn_in_progress("conv", "k2")
                assert not agent.turn_in_progress("conv", "k1")
                assert await agent.cancel("conv", idempotency_key="k2") == 1
            [error] = outcome
            assert isinstance(error, TurnError) and error.code == "cancelled"
            assert not agent.turn_in_progress("conv", "k2")
            assert RUNS == [2]
        history = await stored(storage, "conv")
    assert_valid_history(history)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_cancel_paused_denies_and_ends_the_turn(backend: str, tmp_path: Path) -> None:
    model = Model()
    store = Backend(backend, tmp_path / "db")
    async with store.open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(model.respond), storage=storage, tools=[pay]
        ) as agent:
            await agent.send("conv", "pay 3", idempotency_key="k3")
            with pytest.raises(ApprovalError) as info:
                await agent.cancel_paused("conv", idempotency_key="other")
            assert info.value.code == "not_waiting"
            await agent.cancel_paused("conv", idempotency_key="k3")
            assert await agent.pending_approvals("conv") == ()
            with pytest.raises(ApprovalError) as info:
                await agent.cancel_paused("conv", idempotency_key="k3")
            assert info.value.code == "not_waiting"
            with pytest.raises(ApprovalError):
                await agent.decide("conv", "c3", approve=True, idempotency_key="k3")
            history = await stored(storage, "conv")
            assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.TOOL]
            assert history[-1].content == "denied: the turn was cancelled"
            assert_valid_history(history)
    if backend == "sqlite":  # reopened: the cancelled turn is not resumed
        async with store.open() as storage:
            async with open_chat_agent(
                model=ScriptedModel(model.respond), storage=storage, tools=[pay]
            ) as agent:
                assert await agent.pending_approvals("conv") == ()
                nothing = await agent.send("conv", "pay 4", idempotency_key="k4")
                assert nothing.status == "awaiting_approval"
            history = await stored(storage, "conv")
        assert [m.content for m in history][:3] == ["pay 3", "", "denied: the turn was cancelled"]
        assert history[3].content == "pay 4"
    assert RUNS == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_keys_name_their_paused_turn_after_summaries(backend: str, tmp_path: Path) -> None:
    """Under a context policy the live conversation holds only what its summary
    does not cover, so a turn's place there is not its seq: a key still names
    its paused turn, to decide it, to repeat the decision, and to cancel it."""
    model = Model()

    async def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            return ModelResponse(text="what was said")
        if request.messages[-1].content.startswith("chat"):
            return ModelResponse(text="fine")
        return await model.respond(request)

    async with Backend(backend, tmp_path / "db").open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(respond),
            storage=storage,
            tools=[pay],
            context=ContextPolicy(max_tokens=400),
        ) as agent:
            for i in range(30):
                await agent.send("conv", f"chat {i} " * 5, idempotency_key=f"chat{i}")
            cache = live_conversation(agent, "conv").cache
            assert cache.first_seq > 1, "a summary covers the start"
            await agent.send("conv", "pay 5", idempotency_key="k5")
            with pytest.raises(ApprovalError):
                await agent.decide("conv", "c5", approve=True, idempotency_key="chat3")
            done = await agent.decide("conv", "c5", approve=True, idempotency_key="k5")
            assert done.text == "answer after paid 5"
            again = await agent.decide("conv", "c5", approve=True, idempotency_key="k5")
            assert again == done
            await agent.send("conv", "pay 6", idempotency_key="k6")
            await agent.cancel_paused("conv", idempotency_key="k6")
            assert await agent.pending_approvals("conv") == ()
            assert RUNS == [5]
        history = await stored(storage, "conv")
    assert history[-1].content == "denied: the turn was cancelled"
    assert_valid_history(history)
