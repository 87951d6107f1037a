"""A toolset whose calls need a person's approval, loaded by entry point
(``tests.server.approval_tools:bank``) in the native approval tests, the
scripted model that calls it, and a server of both (``serve_bank``).

``RUNS`` records every tool run in this process (the server runs in the test's
process), so a test can tell a call that ran from one that was only answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import attrs
import trio

from agentik import ModelBackendError, ModelRequest, ModelResponse, Role, ScriptedModel, ToolCall
from agentik.server import ServerConfig, serve_agentik
from agentik.toolsets import NamedTool, ToolsetContribution, tool
from tests.reliability.helpers import Backend

TOOLSETS = ("tests.server.approval_tools:bank",)
RUNS: list[str] = []


@tool(requires_approval=True)
async def bank_wire(amount: int) -> str:
    """Send money: a person approves each call.

    Args:
        amount: How much to send.
    """
    RUNS.append(f"wire {amount}")
    return f"sent {amount}"


@tool
async def bank_balance() -> str:
    """Read the balance (no approval needed)."""
    RUNS.append("balance")
    return "100"


@tool(requires_approval=True)
async def ledger_pay(amount: int) -> str:
    """Pay from the ledger (a core tool: always offered; a person approves).

    Args:
        amount: How much to pay.
    """
    RUNS.append(f"pay {amount}")
    return f"paid {amount}"


def ledger_tools() -> list[NamedTool]:
    """Core tools, by entry point (``[agent] tools``)."""
    return [ledger_pay]


def bank() -> ToolsetContribution:
    return ToolsetContribution(
        name="bank", description="Moves money.", tools=(bank_wire, bank_balance)
    )


def _wire(call_id: str, amount: int) -> ToolCall:
    return ToolCall(call_id, "bank_wire", f'{{"amount": {amount}}}')


LOTS = ToolCall("w1", "bank_wire", '{"amount": "lots"}')
LOTS_ERROR = (
    "error: invalid arguments for tool 'bank_wire': field 'amount' must be an integer,"
    ' got a string "lots"'
)


def respond(request: ModelRequest) -> ModelResponse:
    """The model of these tests, by the turn's user text:

    - ``pay``: calls ``bank_wire`` (w1, 5); ``pay twice``: w1 (5) and w2 (7);
      ``pay and look``: w1 (5) and ``bank_balance`` (b1);
    - ``pay then fail``: calls w1, then fails once the results come back;
    - ``pay lots``: calls w1 with invalid arguments (``{"amount": "lots"}``),
      and b1; ``pay lots and pay``: w0 so, and w1 (5);
    - anything else: ``You said: <text>``.

    Once the turn's tool results are in, it answers with them, `` | ``-joined.
    """
    messages = request.messages
    user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
    text = messages[user_at].content
    turn = messages[user_at:]
    if len(turn) > 1:
        if text == "pay then fail":
            raise ModelBackendError("the model backend is down")
        return ModelResponse(text=" | ".join(m.content for m in turn if m.role is Role.TOOL))
    calls = {
        "pay": (_wire("w1", 5),),
        "pay then fail": (_wire("w1", 5),),
        "pay twice": (_wire("w1", 5), _wire("w2", 7)),
        "pay and look": (_wire("w1", 5), ToolCall("b1", "bank_balance", "{}")),
        "pay lots": (LOTS, ToolCall("b1", "bank_balance", "{}")),
        "pay lots and pay": (attrs.evolve(LOTS, id="w0"), _wire("w1", 5)),
    }.get(text)
    if calls is None:
        return ModelResponse(text=f"You said: {text}")
    return ModelResponse(tool_calls=calls)


@asynccontextmanager
async def serve_bank(backend: Backend, **changes: object) -> AsyncIterator[str]:
    """A server (its base URL) on ``backend``'s storage with the ``bank`` toolset
    and ``respond`` as its model, until the block ends; then the server stops
    and the storage closes (SQLite: the file is closed). ``changes`` adjust
    the ``ServerConfig``."""
    config = attrs.evolve(
        ServerConfig(port=0, database=str(backend.path), toolsets=TOOLSETS), **changes
    )
    stop = trio.Event()
    async with backend.open() as storage, trio.open_nursery() as nursery:
        serve = partial(
            serve_agentik,
            config,
            shutdown_trigger=stop.wait,
            storage=storage,
            model=ScriptedModel(respond),
        )
        url: str = await nursery.start(serve)
        try:
            yield url
        finally:
            stop.set()
