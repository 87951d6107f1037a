"""Repairing a history a crash left with open tool calls, under cancellation.

A process killed mid-turn leaves an assistant message whose tool calls have
no result; the conversation answers them ("interrupted: ...") when it
next loads. These tests build that state directly in a real SQLite file (as a
killed process leaves it) and then cancel the repairing turn.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
import trio
from trio.testing import MockClock

from agentik import Message, ModelRequest, ModelResponse, Role, ToolCall, TurnError
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import open_sqlite_storage
from tests.reliability.helpers import (
    BACKENDS,
    Backend,
    Gate,
    GatedMessageStore,
    check_history,
    gated,
    history,
)

GUARD_SECONDS = 60
CLEANUP_SECONDS = 10.0
"""How long a cancelled turn waits for its writes to settle (``agent._turn_writes``)."""


@pytest.fixture
def clock() -> MockClock:
    """Real time (SQLite and its lock are real), that the test can jump past a
    wait it does not test (pytest-trio runs the test on it)."""
    return MockClock(rate=1.0)


def answer(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"answer to {request.messages[-1].content}")


async def crashed_history(storage: object, conversation: str) -> None:
    """What a process killed while a tool ran leaves: the call without a result."""
    store = storage.message_store  # type: ignore[attr-defined]
    await store.append(conversation, Message(Role.USER, "go"), idempotency_key="k-go")
    calls = (ToolCall("call-1", "probe", "{}"), ToolCall("call-2", "probe", "{}"))
    await store.append(conversation, Message(Role.ASSISTANT, "", calls))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_open_calls_are_answered_once_on_load(backend: str, tmp_path: Path) -> None:
    """The next turn answers both open calls once; a keyed retry of the
    crashed turn resumes it without a second user message."""
    store = Backend(backend, tmp_path / "db")
    async with store.open() as storage:
        await crashed_history(storage, "c")
    async with store.open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(answer), storage=storage, builtin_tools=False
        ) as agent:
            result = await agent.send("c", "go", idempotency_key="k-go")
            assert result.messages[0].content == "go"
            assert (await agent.send("c", "next")).text == "answer to next"
        stored = await history(storage, "c")
    check_history(stored, once=("go", "next"))
    results = [m for m in stored if m.role is Role.TOOL]
    assert [m.tool_call_id for m in results] == ["call-1", "call-2"]
    assert all(m.content.startswith("interrupted:") for m in results)


async def test_cancel_during_repair_answers_each_call_once(
    tmp_path: Path, clock: MockClock
) -> None:
    """SQLite: the repairing turn is cancelled while its first repair write
    waits behind a stuck writer; the next turn must not answer the calls again.
    (The cancelled turn gives up waiting for its writes after
    ``CLEANUP_SECONDS``; the clock is jumped past them.)"""
    path = tmp_path / "db"
    async with open_sqlite_storage(path) as storage:
        await crashed_history(storage, "c")
    with trio.fail_after(GUARD_SECONDS):
        async with open_sqlite_storage(path, busy_timeout=GUARD_SECONDS) as real:
            async with trio.open_nursery() as helpers:
                watched = GatedMessageStore(real.message_store, Gate(), helpers)
                storage = gated(real, watched)
                async with open_chat_agent(
                    model=ScriptedModel(answer), storage=storage, builtin_tools=False
                ) as agent:
                    lock = apsw.Connection(str(path))
                    lock.execute("BEGIN IMMEDIATE")
                    try:
                        async with trio.open_nursery() as nursery:

                            async def first() -> None:
                                with pytest.raises(TurnError) as info:
                                    await agent.send("c", "first")
                                assert info.value.code == "cancelled"

                            nursery.start_soon(first)
                            await watched.wait_appends_accepted(1)  # repairing call-1
                            assert await agent.cancel("c") == 1
                            for _ in range(int(CLEANUP_SECONDS) + 1):
                                await trio.sleep(0.02)  # the clean-up under way
                                clock.jump(1.0)
                        repairs = watched.appends_accepted
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(agent.send, "c", "second")
                            # The second turn must wait for the first one's queued
                            # repair, not repair again: release the lock once it runs.
                            while agent.stats.turns_started < 2:  # noqa: ASYNC110
                                await trio.sleep(0.01)
                            await trio.sleep(0.05)  # time to (wrongly) repair again
                            assert watched.appends_accepted == repairs  # no second repair
                            lock.execute("ROLLBACK")
                    finally:
                        if lock.in_transaction:
                            lock.execute("ROLLBACK")
                        lock.close()
        async with open_sqlite_storage(path) as reopened:
            stored = await history(reopened, "c")
    check_history(stored, once=("go", "second"))
