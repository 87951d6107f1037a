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
import trio
import trio.testing

from agentik import (
    ApprovalError,
    ApprovalRequest,
    ChatAgent,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    ScriptedModel,
    StorageBundle,
    ToolCall,
    TurnResult,
    agent_tool,
    in_memory_storage,
    open_chat_agent,
    open_postgres_storage,
    open_sqlite_storage,
    tool,
)
from agentik.agent import TurnFailed, TurnFinished, agent_conversation_id
from tests.agent.agent_tool_script import CHILD_TEXT, TOOL_NAME, Script, approvals_of, turn_of
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


def fan_out(request: ModelRequest) -> ModelResponse:
    """Every turn asks the helper twice at once, then joins what it got."""
    _, results = turn_of(request)
    if not results:
        text = '{"text": "split"}'
        calls = (ToolCall("a", TOOL_NAME, text), ToolCall("b", TOOL_NAME, text))
        return ModelResponse(tool_calls=calls)
    return ModelResponse(text="(" + " + ".join(results) + ")")


async def test_parallel_calls_fan_out_to_a_tree_bounded_by_depth() -> None:
    """Two calls an answer, depth 2: 2 + 4 child turns, each once; the
    deepest ones' calls are refused."""
    storage = in_memory_storage()
    async with self_calling(storage, fan_out, max_agent_depth=2) as agent:
        result = await agent.send("p", "go")
        level1 = [agent_conversation_id("p", TOOL_NAME, 2, c) for c in "ab"]
        level2 = [agent_conversation_id(p, TOOL_NAME, 2, c) for p in level1 for c in "ab"]
        for cid in ["p", *level1, *level2]:
            history = await stored(storage, cid)
            assert_valid_history(history)
            assert [m.role for m in history].count(Role.USER) == 1
        conversations = await storage.message_store.list_conversations()
        assert sorted(conversations) == sorted(["p", *level1, *level2])
    refusal = "error: agent tool 'helper' refused"
    assert result.text.count(refusal) == 8
    assert result.text.startswith("(((" + refusal)


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


@asynccontextmanager
async def parent_turn(agent: ChatAgent) -> AsyncIterator[list[TurnResult]]:
    """The parent turn ``ask`` sent in the background; its result lands in the
    list when the block ends."""
    results: list[TurnResult] = []

    async def ask() -> None:
        results.append(await agent.send("p", "ask"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        yield results


PAY = ToolCall("k1", "pay", "{}")


async def test_a_child_waiting_for_a_person_is_decided_on_the_parent(reopen: Reopen) -> None:
    script = Script(child_tool="pay")
    child = child_of("p")
    async with reopen() as storage, self_calling(storage, script, tools=[pay]) as agent:
        async with parent_turn(agent) as results:
            assert await approvals_of(agent, child) == (ApprovalRequest(child, PAY),)
            waiting = await approvals_of(agent, "p")
            assert waiting == (ApprovalRequest(child, PAY),), "the child's call, on the parent"
            decided = await agent.decide("p", "k1", approve=True)
            assert decided.text == "child answer (saw: paid)"
        assert [r.text for r in results] == ["parent got: child answer (saw: paid)"]
        assert await agent.pending_approvals("p") == ()
        assert await agent.pending_approvals(child) == ()
        assert_valid_history(await stored(storage, child))
        assert_valid_history(await stored(storage, "p"))
    assert script.calls == {"ask": 2, CHILD_TEXT: 2}


async def test_a_query_sent_while_the_parent_runs_hears_of_the_child_waiting() -> None:
    """``pending_approvals(parent)`` sent while the parent turn still asks its
    model waits behind that turn, which will not end before a decision: it
    answers as soon as the child turn waits."""
    script = Script("pay")
    asked = trio.Event()
    go_on = trio.Event()

    async def slow(request: ModelRequest) -> ModelResponse:
        if turn_of(request) == ("ask", []):
            asked.set()
            await go_on.wait()
        return script(request)

    storage = in_memory_storage()
    async with self_calling(storage, slow, tools=[pay]) as agent:  # type: ignore[arg-type]
        async with parent_turn(agent) as results:
            await asked.wait()
            queried: list[tuple[ApprovalRequest, ...]] = []

            async def query() -> None:
                queried.append(await agent.pending_approvals("p"))  # queued behind the turn

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(query)
                    await trio.testing.wait_all_tasks_blocked()
                    go_on.set()
            assert queried == [(ApprovalRequest(child_of("p"), PAY),)]
            await agent.decide("p", "k1", approve=True)
        assert [r.text for r in results] == ["parent got: child answer (saw: paid)"]


async def test_a_decision_taken_on_the_child_lets_the_parent_go_on(reopen: Reopen) -> None:
    child = child_of("p")
    async with reopen() as storage, self_calling(storage, Script("pay"), tools=[pay]) as agent:
        async with parent_turn(agent) as results:
            await approvals_of(agent, "p")
            await agent.decide(child, "k1", approve=False, reason="not today")
        assert [r.text for r in results] == ["parent got: child answer (saw: denied: not today)"]


async def test_streamed_and_refused_decisions_go_to_the_child() -> None:
    storage = in_memory_storage()
    async with self_calling(storage, Script("pay"), tools=[pay]) as agent:
        async with parent_turn(agent) as results:
            await approvals_of(agent, "p")
            with pytest.raises(ApprovalError) as info:
                await agent.decide("p", "nope", approve=True)
            assert info.value.code == "not_waiting"
            async with agent.stream_decision("p", "nope", approve=True) as events:
                assert [event async for event in events] == [
                    TurnFailed(
                        "call 'nope' is not waiting for approval in conversation 'p'",
                        "not_waiting",
                        None,
                    )
                ]
            async with agent.stream_decision("p", "k1", approve=True) as events:
                last = [event async for event in events][-1]
            assert isinstance(last, TurnFinished)
            assert last.result.text == "child answer (saw: paid)"
        assert [r.text for r in results] == ["parent got: child answer (saw: paid)"]


async def test_the_wait_for_a_person_is_not_the_tools_slowness(autojump_clock: object) -> None:
    """A person who takes longer than ``tool_timeout`` does not time the call out."""
    storage = in_memory_storage()
    async with self_calling(storage, Script("pay"), tools=[pay], tool_timeout=5) as agent:
        async with parent_turn(agent) as results:
            await approvals_of(agent, "p")
            await trio.sleep(600)
            await agent.decide("p", "k1", approve=True)
        assert [r.text for r in results] == ["parent got: child answer (saw: paid)"]


async def test_a_child_approval_timeout_lets_the_parent_go_on(autojump_clock: object) -> None:
    """The child's ``approval_timeout`` denies without a decision through the
    agent: the waiting call looks again and goes on."""
    storage = in_memory_storage()
    async with self_calling(storage, Script("pay"), tools=[pay], approval_timeout=120) as agent:
        async with parent_turn(agent) as results:
            await approvals_of(agent, "p")
            started = trio.current_time()
        assert trio.current_time() - started <= 240
        assert [r.text for r in results] == [
            "parent got: child answer (saw: denied: no decision within 120 s)"
        ]


async def test_a_grandchild_waiting_for_a_person_is_decided_on_the_top() -> None:
    """Two agents: the top one's helper is an agent whose own helper's turn
    pauses; the top conversation lists and decides the grandchild's call."""
    storage = in_memory_storage()

    def middle(request: ModelRequest) -> ModelResponse:
        _, results = turn_of(request)
        if not results:
            return ModelResponse(tool_calls=(ToolCall("m1", "deep", '{"text": "deeper"}'),))
        return ModelResponse(text=f"middle got: {results[-1]}")

    def bottom(request: ModelRequest) -> ModelResponse:
        _, results = turn_of(request)
        if not results:
            return ModelResponse(tool_calls=(PAY,))
        return ModelResponse(text=f"bottom saw: {results[-1]}")

    async with (
        open_chat_agent(model=ScriptedModel(bottom), storage=storage, tools=[pay]) as low,
        open_chat_agent(
            model=ScriptedModel(middle),
            storage=storage,
            tools=[agent_tool(low, name="deep", description="The bottom agent.")],
        ) as mid,
        open_chat_agent(
            model=ScriptedModel(Script()),
            storage=storage,
            tools=[agent_tool(mid, name=TOOL_NAME, description="The middle agent.")],
        ) as top,
    ):
        async with parent_turn(top) as results:
            grandchild = agent_conversation_id(child_of("p"), "deep", 2, "m1")
            assert await approvals_of(top, "p") == (ApprovalRequest(grandchild, PAY),)
            assert await mid.pending_approvals(child_of("p")) == (ApprovalRequest(grandchild, PAY),)
            await top.decide("p", "k1", approve=True)
        assert [r.text for r in results] == ["parent got: middle got: bottom saw: paid"]
