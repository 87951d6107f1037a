"""A process killed (SIGKILL) in the middle of a child turn (test_agent_tool_crash).

It opens the storage named on its command line (``sqlite <path>`` or
``postgres <dsn> <schema>``), runs an agent that is offered itself as the
agent tool ``helper`` (``agent_tool_script``), and sends the parent turn
``ask``; the child turn's tool prints ``child running`` and never returns,
and the test kills the process there.
"""

from __future__ import annotations

import sys
from contextlib import AbstractAsyncContextManager

import trio

from agentik import (
    ChatAgent,
    ScriptedModel,
    StorageBundle,
    agent_tool,
    open_chat_agent,
    open_postgres_storage,
    open_sqlite_storage,
    tool,
)
from tests.agent.agent_tool_script import CHILD_TOOL, TOOL_NAME, Script


@tool(name=CHILD_TOOL)
async def held_step() -> str:
    """Do one step of the sub task (it never ends here: the process is killed)."""
    sys.stdout.write("child running\n")
    sys.stdout.flush()
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def open_storage(argv: list[str]) -> AbstractAsyncContextManager[StorageBundle]:
    if argv[0] == "sqlite":
        return open_sqlite_storage(argv[1])
    return open_postgres_storage(argv[1], schema=argv[2], readers=1)


async def main(argv: list[str]) -> None:
    box: list[ChatAgent] = []
    helper = agent_tool(lambda: box[0], name=TOOL_NAME, description="Hands a task to a helper.")
    async with (
        open_storage(argv) as storage,
        open_chat_agent(
            model=ScriptedModel(Script()), storage=storage, tools=[helper, held_step]
        ) as agent,
    ):
        box.append(agent)
        await agent.send("p", "ask", idempotency_key="pk")
        raise AssertionError("the parent turn finished; the child's tool never returns")


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
