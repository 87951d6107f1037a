"""A process killed (SIGKILL) in the middle of a child turn (test_agent_tool_crash).

Its command line: ``tool|approval`` then the storage (``sqlite <path>`` or
``postgres <dsn> <schema>``). It runs an agent that is offered itself as the
agent tool ``helper`` (``agent_tool_script``) and sends the parent turn
``ask``. ``tool``: the child turn's tool prints ``child running`` and never
returns. ``approval``: the child turn's tool needs approval; once the parent
conversation lists it, the process prints ``child waiting``. The test kills
the process there.
"""

from __future__ import annotations

import functools
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
from tests.agent.agent_tool_script import CHILD_TOOL, TOOL_NAME, Script, approvals_of


@tool(name=CHILD_TOOL)
async def held_step() -> str:
    """Do one step of the sub task (it never ends here: the process is killed)."""
    say("child running")
    await trio.sleep_forever()
    raise AssertionError("unreachable")


def open_storage(argv: list[str]) -> AbstractAsyncContextManager[StorageBundle]:
    if argv[0] == "sqlite":
        return open_sqlite_storage(argv[1])
    return open_postgres_storage(argv[1], schema=argv[2], readers=1)


@tool(name="pay", requires_approval=True)
async def unapproved_pay() -> str:
    """Pay, once a person approved it (nobody does here)."""
    raise AssertionError("paid without a decision")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(mode: str, argv: list[str]) -> None:
    box: list[ChatAgent] = []
    helper = agent_tool(lambda: box[0], name=TOOL_NAME, description="Hands a task to a helper.")
    script = Script() if mode == "tool" else Script(child_tool="pay")
    child_tool = held_step if mode == "tool" else unapproved_pay
    async with (
        open_storage(argv) as storage,
        open_chat_agent(
            model=ScriptedModel(script), storage=storage, tools=[helper, child_tool]
        ) as agent,
        trio.open_nursery() as nursery,
    ):
        box.append(agent)
        nursery.start_soon(functools.partial(agent.send, "p", "ask", idempotency_key="pk"))
        if mode == "approval":
            await approvals_of(agent, "p")
            say("child waiting")


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2:])
