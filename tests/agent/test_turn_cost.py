"""What a turn costs the scheduler, and that its fast paths keep the rules.

A turn records each message through the store's ``submit_nowait`` when the
store has one and room (no schedule point per message); otherwise it awaits
``submit``. Either way every message is stored once, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
import trio

from agentik import Role, TurnError
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import (
    StorageBundle,
    in_memory_storage,
    open_postgres_storage,
    open_sqlite_storage,
)
from tests.agent.helpers import assert_valid_history, stored
from tests.agent.test_many_conversations import ADD, respond
from tests.postgres import fresh_schema

BACKENDS = ["sqlite", "postgres"]
"""The writer's backends: ``submit_nowait`` is the shared writer's, so both
have it."""


def opener(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, queue_size: int = 1000
) -> Callable[[], AbstractAsyncContextManager[StorageBundle]]:
    """Opens the same store again each call (to read back what was written)."""
    if backend == "sqlite":
        path = tmp_path / "agent.db"
        return lambda: open_sqlite_storage(path, queue_size=queue_size)
    dsn: str = request.getfixturevalue("postgres_dsn")
    schema = fresh_schema()
    return lambda: open_postgres_storage(dsn, schema=schema, readers=1, queue_size=queue_size)


class _Steps(trio.abc.Instrument):
    def __init__(self) -> None:
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1


async def test_a_turn_with_a_tool_call_takes_two_task_steps() -> None:
    """On the in-memory store a turn with one tool call runs in two task
    steps (the conversation's turn, the caller woken with its result): the
    caller's send hands the request over and waits in one step, and recording
    the four messages adds none."""
    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, tools=[ADD], builtin_tools=False
    ) as agent:
        await agent.send("c", "0")  # spawns the conversation, loads it
        instrument = _Steps()
        trio.lowlevel.add_instrument(instrument)
        try:
            for i in range(1, 11):
                await agent.send("c", str(i))
        finally:
            trio.lowlevel.remove_instrument(instrument)
    assert instrument.steps <= 10 * 2, f"{instrument.steps / 10} task steps a turn"
    history = await stored(storage, "c")
    assert len(history) == 44
    assert_valid_history(history)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("queue_size", [0, 1, 3])
async def test_a_full_writer_queue_falls_back_to_waiting(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, queue_size: int
) -> None:
    """With a writer queue too small for the burst, ``submit_nowait`` finds no
    room and the turn awaits ``submit``: every history is still complete,
    in order and gapless."""
    open_store = opener(request, tmp_path, backend, queue_size)
    async with open_store() as storage:
        async with open_chat_agent(
            model=ScriptedModel(respond), storage=storage, tools=[ADD], builtin_tools=False
        ) as agent:

            async def conversation(i: int) -> None:
                for t in range(3):
                    result = await agent.send(f"c{i}", str(10 * i + t))
                    assert result.text == f"sum is {10 * i + t + 1}"

            async with trio.open_nursery() as nursery:
                for i in range(40):
                    nursery.start_soon(conversation, i)
    async with open_store() as storage:
        for i in range(40):
            history = await stored(storage, f"c{i}")
            assert [m.role for m in history] == [
                Role.USER,
                Role.ASSISTANT,
                Role.TOOL,
                Role.ASSISTANT,
            ] * 3
            assert_valid_history(history)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_refused_nowait_submit_fails_the_turn_cleanly(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    """A closed store refuses ``submit_nowait`` as it refuses ``submit``: the
    turn fails with a store error and nothing is half-written."""
    async with opener(request, tmp_path, backend)() as storage:
        async with open_chat_agent(
            model=ScriptedModel(respond), storage=storage, tools=[ADD], builtin_tools=False
        ) as agent:
            await agent.send("c", "1")
            storage_writer_close = storage.message_store._writer.close  # type: ignore[attr-defined]
            storage_writer_close()
            with pytest.raises(TurnError) as failed:
                await agent.send("c", "2")
            assert failed.value.code == "store_error"
