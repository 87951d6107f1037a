"""A bank toolset whose wire needs approval, a model that calls it, and a
server on 127.0.0.1 serving them on a real SQLite file: the AG-UI approval
tests (Python and the npm client) share them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx2
import trio

from agentik import ModelRequest, ModelResponse, Role, ScriptedModel
from agentik import ToolCall as AgentikCall
from agentik.models import demo_responder
from agentik.server import Client, ServerConfig, serve_agentik
from agentik.storage import open_sqlite_storage
from agentik.toolsets import ToolsetContribution, tool

RUNS: list[str] = []
"""What the bank tools did, in order: a denied call never shows here."""


@tool(requires_approval=True)
async def bank_wire(amount: int) -> str:
    """Send money.

    Args:
        amount: How much.
    """
    RUNS.append(f"wire {amount}")
    return f"sent {amount}"


@tool
async def bank_balance() -> str:
    """The balance."""
    RUNS.append("balance")
    return "100"


def bank() -> ToolsetContribution:
    return ToolsetContribution(
        name="bank", description="Moves money.", tools=(bank_wire, bank_balance)
    )


def respond(request: ModelRequest) -> ModelResponse:
    """The demo model (``call <tool> {args}``; a summary of tool results), and
    for "several", three calls at once: two wires waiting for approval and a
    balance that needs none."""
    last = request.messages[-1]
    if last.role is Role.USER and last.content == "several":
        n = len(request.messages)
        return ModelResponse(
            tool_calls=(
                AgentikCall(f"call_{n}_a", "bank_wire", '{"amount": 1}'),
                AgentikCall(f"call_{n}_b", "bank_wire", '{"amount": 2}'),
                AgentikCall(f"call_{n}_c", "bank_balance", "{}"),
            )
        )
    return demo_responder(request)


TOKENS = {"alice": "alice-token-4f1c9a0b7e2d", "bob": "bob-token-8d3e2f6a1c5b"}


@attrs.frozen
class Served:
    url: str
    database: Path

    def client(self, owner: str | None = None) -> httpx2.AsyncClient:
        headers = {"Authorization": f"Bearer {TOKENS[owner]}"} if owner else {}
        return httpx2.AsyncClient(base_url=self.url, headers=headers, timeout=30)


@asynccontextmanager
async def serving(
    nursery: trio.Nursery, database: Path, *, owners: bool = False
) -> AsyncIterator[Served]:
    """A server and its storage, both stopped (and the storage closed) on exit."""
    config = ServerConfig(
        port=0,
        database=str(database),
        toolsets=("tests.server.agui_bank:bank",),
        clients=tuple(Client(owner=o, token=t) for o, t in TOKENS.items()) if owners else (),
    )
    stop, done = trio.Event(), trio.Event()
    async with open_sqlite_storage(database) as storage:

        async def run(task_status: trio.TaskStatus[str]) -> None:
            try:
                await serve_agentik(
                    config,
                    shutdown_trigger=stop.wait,
                    storage=storage,
                    model=ScriptedModel(respond),
                    task_status=task_status,
                )
            finally:
                done.set()

        url = await nursery.start(run)
        try:
            yield Served(url, database)
        finally:
            stop.set()
            await done.wait()
