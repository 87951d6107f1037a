"""Agents as tools over the native API, through real HTTP (issue 34).

The server's agent is offered a helper agent (``agent_tool``) whose turn
needs a person's approval: while the parent turn's request is open, ``GET
…/approvals`` of the parent conversation lists the child's call and ``POST
…/approvals/{call_id}`` decides it; the parent turn then answers with the
child's text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx2
import trio

from agentik import ScriptedModel, agent_tool, in_memory_storage, open_chat_agent, tool
from agentik.agent import agent_conversation_id
from agentik.server import ServerConfig, serve_agentik
from tests.agent.agent_tool_script import TOOL_NAME, Script


@tool(requires_approval=True)
async def pay() -> str:
    """Pay, once a person approved it."""
    return "paid"


@asynccontextmanager
async def serving() -> AsyncIterator[httpx2.AsyncClient]:
    """A server whose agent has the agent tool ``helper`` (a helper agent on
    the same storage, whose child turns call ``pay``)."""
    storage = in_memory_storage()
    stop = trio.Event()
    async with (
        open_chat_agent(model=ScriptedModel(Script("pay")), storage=storage, tools=[pay]) as helper,
        trio.open_nursery() as nursery,
    ):
        config = ServerConfig(
            port=0,
            database=":memory:",
            tools=(agent_tool(helper, name=TOOL_NAME, description="A helper agent."),),
        )
        serve = partial(
            serve_agentik,
            config,
            shutdown_trigger=stop.wait,
            storage=storage,
            model=ScriptedModel(Script()),
        )
        url: str = await nursery.start(serve)
        try:
            async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
                yield client
        finally:
            stop.set()


async def test_a_child_waiting_for_a_person_is_decided_on_the_parent_route() -> None:
    async with serving() as client:
        answered: list[Any] = []

        async def ask() -> None:
            response = await client.post("/agentik/conversations/p/turns", json={"text": "ask"})
            assert response.status_code == 200, response.text
            answered.append(response.json())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            with trio.fail_after(30):
                while True:
                    listed = await client.get("/agentik/conversations/p/approvals")
                    assert listed.status_code in (200, 404), listed.text
                    if listed.status_code == 200 and listed.json()["approvals"]:
                        break
                    await trio.sleep(0.02)
            assert listed.json()["approvals"] == [
                {"call_id": "k1", "name": "pay", "arguments": "{}"}
            ]
            decided = await client.post(
                "/agentik/conversations/p/approvals/k1", json={"approve": True}
            )
            assert decided.status_code == 200, decided.text
            assert decided.json()["text"] == "child answer (saw: paid)"
        assert [a["text"] for a in answered] == ["parent got: child answer (saw: paid)"]
        child = agent_conversation_id("p", TOOL_NAME, 2, "c1")
        messages = await client.get(f"/agentik/conversations/{child}/messages")
        assert messages.status_code == 200, messages.text
        contents = [m["content"] for m in messages.json()["messages"]]
        assert contents[-1] == "child answer (saw: paid)"
