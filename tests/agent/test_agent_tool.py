"""Agents as tools (``agent_tool``, issue 34 item 3), on every backend.

A call of an agent tool runs one turn of an agent in a child conversation
derived from the parent conversation and the call, keyed by the call's id:
the parent turn answers with the child's text, a parent turn resumed after a
stop gets the child turn's one answer instead of starting a second, depth is
bounded, and a child turn waiting for a person makes the parent wait, its
calls listed and decided on the parent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest

from agentik import (
    ChatAgent,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    ScriptedModel,
    StorageBundle,
    ToolCall,
    agent_tool,
    in_memory_storage,
    open_chat_agent,
    open_postgres_storage,
    open_sqlite_storage,
    tool,
)
from agentik.agent import agent_conversation_id
from tests.agent.agent_tool_script import CHILD_TEXT, TOOL_NAME, Script, turn_of
from tests.agent.helpers import assert_valid_history, stored
from tests.postgres import fresh_schema

Reopen = Callable[[], AbstractAsyncContextManager[StorageBundle]]
DESCRIPTION = "Hands a task to a helper agent and returns its answer."


@tool
async def step() -> str:
    """Do one step of the sub task."""
    return "stepped"


@tool(requires_approval=True)
async def pay() -> str:
    """Pay, once a person approved it."""
    return "paid"


def _memory() -> Reopen:
    storage = in_memory_storage()

    @asynccontextmanager
    async def same() -> AsyncIterator[StorageBundle]:
        yield storage

    return same


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def reopen(request: pytest.FixtureRequest, tmp_path: object) -> Reopen:
    """Opens the same storage again each call (a restart between opens)."""
    if request.param == "memory":
        return _memory()
    if request.param == "sqlite":
        path = f"{tmp_path}/agents.db"
        return lambda: open_sqlite_storage(path)
    dsn: str = request.getfixturevalue("postgres_dsn")
    schema = fresh_schema()
    return lambda: open_postgres_storage(dsn, schema=schema, readers=1)


@asynccontextmanager
async def self_calling(
    storage: StorageBundle,
    model: Callable[[ModelRequest], ModelResponse],
    tools: Sequence[NamedTool] = (step,),
    max_agent_depth: int = 3,
    **options: Any,
) -> AsyncIterator[ChatAgent]:
    """An agent offered itself as the tool ``helper``; ``options`` are the agent's."""
    box: list[ChatAgent] = []
    helper = agent_tool(
        lambda: box[0], name=TOOL_NAME, description=DESCRIPTION, max_agent_depth=max_agent_depth
    )
    async with open_chat_agent(
        model=ScriptedModel(model), storage=storage, tools=[helper, *tools], **options
    ) as agent:
        box.append(agent)
        yield agent


def child_of(parent: str, seq: int = 2, call_id: str = "c1") -> str:
    return agent_conversation_id(parent, TOOL_NAME, seq, call_id)


async def test_a_call_runs_one_child_turn_and_answers_with_its_text(reopen: Reopen) -> None:
    script = Script()
    async with reopen() as storage, self_calling(storage, script) as agent:
        result = await agent.send("p", "ask")
        assert result.text == "parent got: child answer (saw: stepped)"
        again = await agent.send("p", "ask again")
        assert again.text == result.text
        child = child_of("p")
        second = child_of("p", seq=6, call_id="c-ask-again")
        store = storage.message_store
        for key, cid in (("c1", child), ("c-ask-again", second)):
            history = await stored(storage, cid)
            assert_valid_history(history)
            assert [m.role for m in history] == [
                Role.USER,
                Role.ASSISTANT,
                Role.TOOL,
                Role.ASSISTANT,
            ]
            assert history[0].content == CHILD_TEXT
            assert history[-1].content == "child answer (saw: stepped)"
            assert await store.find_idempotency_key(cid, key) == 1
        parent = await stored(storage, "p")
        assert_valid_history(parent)
        assert parent[1].seq == 2 and parent[5].seq == 6
        assert parent[2].content == "child answer (saw: stepped)"
    assert script.calls == {"ask": 2, "ask again": 2, CHILD_TEXT: 4}


async def test_another_agent_runs_the_child_turn_in_its_storage(reopen: Reopen) -> None:
    script = Script()
    async with (
        reopen() as storage,
        open_chat_agent(model=ScriptedModel(script), storage=storage, tools=[step]) as helper,
        open_chat_agent(
            model=ScriptedModel(script),
            storage=storage,
            tools=[agent_tool(helper, name=TOOL_NAME, description=DESCRIPTION)],
        ) as agent,
    ):
        result = await agent.send("p", "ask")
        assert result.text == "parent got: child answer (saw: stepped)"
        history = await stored(storage, child_of("p"))
        assert history[-1].content == "child answer (saw: stepped)"
        assert helper.stats.turns_finished == 1
        assert agent.stats.turns_finished == 1


async def test_the_child_of_an_owned_conversation_has_the_same_owner(reopen: Reopen) -> None:
    async with reopen() as storage, self_calling(storage, Script()) as agent:
        await agent.send("alice\x1fp", "ask")
        child = child_of("alice\x1fp")
        assert child.startswith("alice\x1f")
        assert len(await stored(storage, child)) == 4


async def crashed_mid_child_turn(storage: StorageBundle) -> None:
    """Store what a process killed while the child turn ran its tool leaves:
    each turn's user message (with its key) and the call it waits on."""
    store = storage.message_store
    child = child_of("p")
    await store.append("p", Message(Role.USER, "ask"), idempotency_key="pk")
    await store.append(
        "p",
        Message(
            Role.ASSISTANT,
            "",
            tool_calls=(ToolCall("c1", TOOL_NAME, f'{{"text": "{CHILD_TEXT}"}}'),),
        ),
    )
    await store.append(child, Message(Role.USER, CHILD_TEXT), idempotency_key="c1")
    await store.append(
        child, Message(Role.ASSISTANT, "", tool_calls=(ToolCall("k1", "step", "{}"),))
    )


async def test_a_crashed_parent_turn_gets_the_one_child_answer(reopen: Reopen) -> None:
    """The state a kill mid-child-turn leaves: the parent turn is resumed, its
    agent-tool call (idempotent) runs again and reaches the same child turn,
    resumed once; the parent answers with the child's one answer."""
    script = Script()
    async with reopen() as storage:
        await crashed_mid_child_turn(storage)
    async with reopen() as storage, self_calling(storage, script) as agent:
        result = await agent.send("p", "ask", idempotency_key="pk")
        child = await stored(storage, child_of("p"))
        parent = await stored(storage, "p")
    assert_valid_history(child)
    assert_valid_history(parent)
    assert [m.role for m in child].count(Role.USER) == 1, "a second child turn started"
    answers = [m for m in child if m.role is Role.ASSISTANT and not m.tool_calls]
    assert [m.content for m in answers] == [
        "child answer (saw: interrupted: the process stopped before this call finished)"
    ]
    assert result.text == f"parent got: {answers[0].content}"
    assert [m.content for m in parent if m.role is Role.TOOL] == [answers[0].content]
    assert script.calls == {"ask": 1, CHILD_TEXT: 1}


def deeper(request: ModelRequest) -> ModelResponse:
    """Every turn asks the helper again (a loop), then answers with what it got."""
    _, results = turn_of(request)
    if not results:
        return ModelResponse(tool_calls=(ToolCall("c1", TOOL_NAME, '{"text": "go deeper"}'),))
    return ModelResponse(text=f"got [{results[-1]}]")


@pytest.mark.parametrize("limit", [1, 3])
async def test_depth_is_bounded(limit: int) -> None:
    storage = in_memory_storage()
    async with self_calling(storage, deeper, max_agent_depth=limit) as agent:
        result = await agent.send("p", "go")
        chain = ["p"]
        for _ in range(limit):
            chain.append(child_of(chain[-1]))
        refusal = (
            f"error: agent tool 'helper' refused: conversation {chain[-1]!r} is"
            f" {limit} agent calls deep (max_agent_depth={limit})"
        )
        assert result.text == "got [" * (limit + 1) + refusal + "]" * (limit + 1)
        for cid in chain:
            assert_valid_history(await stored(storage, cid))
        assert await stored(storage, child_of(chain[-1])) == []
        assert agent.stats.turns_finished == limit + 1


def test_bad_definitions_are_refused() -> None:
    storage = in_memory_storage()
    del storage
    with pytest.raises(ValueError, match=r"^name must be 1-64 letters"):
        agent_tool(lambda: None, name="a b", description="x")  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match=r"^description must be a non-empty string"):
        agent_tool(lambda: None, name="a", description=" ")  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match=r"^max_agent_depth must be an integer 1\.\.999"):
        agent_tool(lambda: None, name="a", description="x", max_agent_depth=0)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match=r"^agent must be a ChatAgent"):
        agent_tool("agent", name="a", description="x")  # type: ignore[arg-type]
    helper = agent_tool(lambda: None, name="a", description="x")  # type: ignore[arg-type,return-value]
    assert helper.idempotent
    assert helper.parameters["required"] == ["text"]


async def test_outside_a_turn_the_tool_says_so() -> None:
    helper = agent_tool(lambda: None, name="a", description="x")  # type: ignore[arg-type,return-value]
    from agentik import ToolError

    with pytest.raises(ToolError, match=r"^agent tool 'a' runs only as a tool call"):
        await helper.handler({"text": "hi"})
