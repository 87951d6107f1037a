"""``agent_tool`` through a real crash (issue 34): a process killed (SIGKILL)
while the child turn runs its tool; after the restart the parent turn
finishes with the child's one answer, and the child turn ran once.

The killed process is ``agent_tool_child``; the storage is a real SQLite
file, or a PostgreSQL schema (the in-memory backend does not outlive a
process: tests/agent/test_agent_tool.py covers it with the state a kill
leaves).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import trio

from agentik import (
    ApprovalRequest,
    ChatAgent,
    Message,
    Role,
    ScriptedModel,
    ToolCall,
    agent_tool,
    open_chat_agent,
    tool,
)
from agentik.agent import agent_conversation_id
from tests.agent.agent_tool_child import open_storage
from tests.agent.agent_tool_script import CHILD_TEXT, TOOL_NAME, Script, approvals_of
from tests.agent.helpers import assert_valid_history, stored
from tests.agent.test_agent_tool import step
from tests.postgres import fresh_schema


async def kill_mid_child_turn(argv: list[str], mark: bytes = b"child running\n") -> None:
    """Run ``agent_tool_child`` until it prints ``mark``, then SIGKILL it."""
    child = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.agent.agent_tool_child", *argv], stdout=subprocess.PIPE
    )
    buffer = b""
    assert child.stdout is not None
    try:
        with trio.fail_after(120):
            while mark not in buffer:
                chunk = await child.stdout.receive_some()
                assert chunk, f"the process ended early: {buffer[-500:]!r}"
                buffer += chunk
        child.send_signal(signal.SIGKILL)
    finally:
        with trio.CancelScope(shield=True):
            child.kill()
            await child.wait()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_kill_mid_child_turn_ends_with_the_one_child_answer(
    backend: str, request: pytest.FixtureRequest, tmp_path: object
) -> None:
    if backend == "sqlite":
        argv = ["sqlite", f"{tmp_path}/agents.db"]
    else:
        argv = ["postgres", request.getfixturevalue("postgres_dsn"), fresh_schema()]
    await kill_mid_child_turn(["tool", *argv])
    child_id = agent_conversation_id("p", TOOL_NAME, 2, "c1")
    async with open_storage(argv) as storage:
        before = await stored(storage, child_id)
        assert [m.role for m in before] == [Role.USER, Role.ASSISTANT], "killed elsewhere"
        script = Script()
        box: list[ChatAgent] = []
        helper = agent_tool(lambda: box[0], name=TOOL_NAME, description="Hands a task over.")
        async with open_chat_agent(
            model=ScriptedModel(script), storage=storage, tools=[helper, step]
        ) as agent:
            box.append(agent)
            result = await agent.send("p", "ask", idempotency_key="pk")
        child = await stored(storage, child_id)
        parent = await stored(storage, "p")
        conversations = await storage.message_store.list_conversations()
    assert_valid_history(child)
    assert_valid_history(parent)
    assert sorted(conversations) == sorted(["p", child_id]), "a second child conversation"
    assert [m.role for m in child].count(Role.USER) == 1, "a second child turn started"
    assert child[0].content == CHILD_TEXT
    answers = [m.content for m in child if m.role is Role.ASSISTANT and not m.tool_calls]
    assert answers == [
        "child answer (saw: interrupted: the process stopped before this call finished)"
    ]
    assert result.text == f"parent got: {answers[0]}"
    assert [m.content for m in parent if m.role is Role.TOOL] == answers
    # After the restart: one model call to end each turn, none to start one again.
    assert script.calls == {"ask": 1, CHILD_TEXT: 1}


PAID: list[str] = []


@tool(requires_approval=True)
async def pay() -> str:
    """Pay, once a person approved it."""
    PAID.append("paid")
    return "paid"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_kill_while_a_child_waits_for_a_person_keeps_the_wait(
    backend: str, request: pytest.FixtureRequest, tmp_path: object
) -> None:
    """Killed while the child turn waits for approval: after the restart the
    parent conversation lists the child's call again, and its decision
    finishes both turns; the approved call runs once."""
    PAID.clear()
    if backend == "sqlite":
        argv = ["sqlite", f"{tmp_path}/agents.db"]
    else:
        argv = ["postgres", request.getfixturevalue("postgres_dsn"), fresh_schema()]
    await kill_mid_child_turn(["approval", *argv], b"child waiting\n")
    child_id = agent_conversation_id("p", TOOL_NAME, 2, "c1")
    async with open_storage(argv) as storage:
        script = Script(child_tool="pay")
        box: list[ChatAgent] = []
        helper = agent_tool(lambda: box[0], name=TOOL_NAME, description="Hands a task over.")
        async with open_chat_agent(
            model=ScriptedModel(script), storage=storage, tools=[helper, pay]
        ) as agent:
            box.append(agent)
            assert await approvals_of(agent, "p") == (
                ApprovalRequest(child_id, ToolCall("k1", "pay", "{}")),
            )
            decided = await agent.decide("p", "k1", approve=True)
            assert decided.text == "child answer (saw: paid)"
            result = await agent.send("p", "ask", idempotency_key="pk")
        child = await stored(storage, child_id)
        parent = await stored(storage, "p")
    assert_valid_history(child)
    assert_valid_history(parent)
    assert [m.role for m in child].count(Role.USER) == 1
    assert result.text == "parent got: child answer (saw: paid)"
    assert PAID == ["paid"]
    assert script.calls == {"ask": 1, CHILD_TEXT: 1}


async def test_a_parent_waiting_for_a_person_holds_no_resume_slot(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start, the resumed parent turn comes to wait for a person again;
    the other interrupted turns resume meanwhile (with one slot: after it)."""
    monkeypatch.setattr("agentik.agent._resume.RESUME_AT_ONCE", 1)
    argv = ["sqlite", f"{tmp_path}/agents.db"]
    await kill_mid_child_turn(["approval", *argv], b"child waiting\n")
    async with open_storage(argv) as storage:
        store = storage.message_store
        await store.append("r", Message(Role.USER, "look"))
        await store.append(
            "r", Message(Role.ASSISTANT, "", tool_calls=(ToolCall("s1", "step", "{}"),))
        )
        box: list[ChatAgent] = []
        helper = agent_tool(lambda: box[0], name=TOOL_NAME, description="Hands a task over.")
        async with open_chat_agent(
            model=ScriptedModel(Script(child_tool="pay")),
            storage=storage,
            tools=[helper, pay, step],
        ) as agent:
            box.append(agent)
            with trio.fail_after(30):
                while True:  # "r" resumes while "p" waits for a person
                    if len(await stored(storage, "r")) == 4:
                        break
                    await trio.sleep(0.02)
            assert await approvals_of(agent, "p")
            await agent.decide("p", "k1", approve=True)
        assert_valid_history(await stored(storage, "r"))
