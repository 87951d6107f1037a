"""Many concurrent conversations on the durable SQLite backend."""

from __future__ import annotations

import trio

from agentik import ModelRequest, ModelResponse, NamedTool, Role
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import open_sqlite_storage
from tests.agent.helpers import assert_valid_history, call, stored


async def _add(arguments: dict[str, object]) -> str:
    a, b = arguments["a"], arguments["b"]
    assert isinstance(a, int)
    assert isinstance(b, int)
    return str(a + b)


ADD = NamedTool(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
    _add,
)


def respond(request: ModelRequest) -> ModelResponse:
    last = request.messages[-1]
    if last.role is Role.USER:
        n = int(last.content)
        return call("add", {"a": n, "b": 1}, id=f"call-{n}")
    return ModelResponse(text=f"sum is {last.content}")


async def test_thousand_conversations_on_sqlite(tmp_path: object) -> None:
    """1,000 conversations at once, each with a tool call: every history is
    complete, valid and durable (read back after the database is reopened)."""
    path = f"{tmp_path}/agent.db"
    results: dict[str, str] = {}
    async with open_sqlite_storage(path) as storage:
        async with open_chat_agent(
            model=ScriptedModel(respond), storage=storage, tools=[ADD]
        ) as agent:

            async def one(i: int) -> None:
                results[f"conv-{i}"] = (await agent.send(f"conv-{i}", str(i))).text

            async with trio.open_nursery() as nursery:
                for i in range(1000):
                    nursery.start_soon(one, i)
    assert results == {f"conv-{i}": f"sum is {i + 1}" for i in range(1000)}
    async with open_sqlite_storage(path) as storage:
        ids = await storage.message_store.list_conversations(limit=2000)
        assert len(ids) == 1000
        for i in range(0, 1000, 37):
            history = await stored(storage, f"conv-{i}")
            assert [m.role for m in history] == [
                Role.USER,
                Role.ASSISTANT,
                Role.TOOL,
                Role.ASSISTANT,
            ]
            assert history[2].content == str(i + 1)
            assert_valid_history(history)
