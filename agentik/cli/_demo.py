"""``agentik demo``: a short scripted conversation on a temporary SQLite database.

Runs the real runtime (agent, toolsets, SQLite writer) with the built-in
scripted demo model, so it needs no network and no API key, and prints each
turn as it streams.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel, demo_responder
from agentik.server import CLOCK
from agentik.storage import open_sqlite_storage

DEMO_TURNS = (
    "hello agentik",
    'call enable_toolset {"name": "clock"}',
    'call clock_now {"tz": "UTC"}',
)


async def demo(database: Path) -> None:
    from agentik.cli._chat import print_stream

    async with (
        open_sqlite_storage(database) as storage,
        open_chat_agent(
            model=ScriptedModel(demo_responder), storage=storage, toolsets=(CLOCK,)
        ) as agent,
    ):
        for text in DEMO_TURNS:
            print(f"you> {text}")
            async with agent.stream("demo", text) as events:
                await print_stream(events)
        count = 0
        async for _ in storage.message_store.get_messages("demo"):
            count += 1
        stats = await storage.message_store.token_stats("demo")
    print(
        f"\n{count} messages stored"
        f" ({stats.prompt_tokens} prompt + {stats.completion_tokens} completion tokens)."
    )


KEEP = (
    "The demo's database was temporary and is deleted now. `agentik chat` keeps its"
    " conversation in ./agentik.db, where `agentik conversations` and `agentik show ID`"
    " read it."
)


def run_demo() -> int:
    # The database is removed at exit: its path is never printed, since
    # nobody could open it afterwards.
    print("agentik demo: the scripted demo model on a temporary SQLite database\n")
    with tempfile.TemporaryDirectory(prefix="agentik-demo-") as directory:
        trio.run(demo, Path(directory) / "demo.db")
    print(KEEP)
    return 0
