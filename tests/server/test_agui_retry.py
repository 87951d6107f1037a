"""An AG-UI run sent again is the same run (issue "hardening", item 9): its
``runId`` and new message's id are its turn's idempotency key, scoped to the
owner and the thread, so a client retrying a run (it got no answer) gets the
first run's events and result, and nothing runs or is stored twice.

Streams are parsed into the official ag-ui-protocol event models and checked
against the client's ordering rules (``agui_rules``); the demo model calls
``ledger_pay``, a tool that is not idempotent and that a test can hold.
Retries land during the first run (it waits in the conversation's queue and
is answered from storage), after it, or with another owner or thread (a new
run, not a retry); after a crash: ``tests/reliability/test_agui_retry.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik.server import Client, Limits
from agentik.toolsets import NamedTool, tool
from tests.server.agui_rules import check_events, parse_sse
from tests.server.conftest import Running, start_server

PAID: list[int] = []
"""Amounts ``ledger_pay`` paid, in order."""


@attrs.define
class Hold:
    """Holds ``ledger_pay`` (while ``on``) until released."""

    on: bool = False
    reached: trio.Event = attrs.Factory(trio.Event)
    released: trio.Event = attrs.Factory(trio.Event)


HOLD = Hold()
TOKENS = {"alice": "alice-token-4f1c9a0b7e2d", "bob": "bob-token-8d3e2f6a1c5b"}


@tool
async def ledger_pay(amount: int) -> str:
    """Pay an amount (not idempotent: paying twice pays twice).

    Args:
        amount: How much.
    """
    if HOLD.on:
        HOLD.reached.set()
        await HOLD.released.wait()
    PAID.append(amount)
    return f"paid {amount}"


@tool(requires_approval=True)
async def ledger_wire(amount: int) -> str:
    """Wire an amount, once a person approved it.

    Args:
        amount: How much.
    """
    PAID.append(amount)
    return f"wired {amount}"


def ledger() -> list[NamedTool]:
    """Core tools, offered in every turn (the demo model calls offered tools)."""
    return [ledger_pay, ledger_wire]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    global HOLD
    PAID.clear()
    HOLD = Hold()


@pytest.fixture
async def served(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Running]:
    async for running in start_server(
        nursery,
        tmp_path,
        tools=("tests.server.test_agui_retry:ledger",),
        clients=tuple(Client(owner=o, token=t) for o, t in TOKENS.items()),
        limits=Limits(max_queued_turns=8),
    ):
        yield running


def run_input(thread: str, run: str, message_id: str, text: str) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "protocolVersion": "1.0",
        "state": {},
        "messages": [{"id": message_id, "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


async def run_agui(server: Running, body: dict[str, Any], owner: str = "alice") -> list[Any]:
    response = await server.client.post(
        "/agui",
        json=body,
        headers={"Accept": "text/event-stream", "Authorization": f"Bearer {TOKENS[owner]}"},
    )
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    check_events(events)
    return folded(events)


_PIECES = {"TEXT_MESSAGE_CONTENT": "messageId", "TOOL_CALL_ARGS": "toolCallId"}


def folded(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's events with each text message's and tool call's pieces joined
    into one: a streaming model sends them in pieces, a replay whole."""
    out: list[dict[str, Any]] = []
    for event in events:
        last = out[-1] if out else None
        key = _PIECES.get(event["type"])
        if (
            key is not None
            and last is not None
            and last["type"] == event["type"]
            and last[key] == event[key]
        ):
            out[-1] = {**last, "delta": last["delta"] + event["delta"]}
        else:
            out.append(event)
    return out


async def stored(server: Running, thread: str, owner: str = "alice") -> list[str]:
    reply = await server.client.get(
        f"/agentik/conversations/{thread}/messages",
        headers={"Authorization": f"Bearer {TOKENS[owner]}"},
    )
    return [m["content"] for m in reply.json()["messages"]]


PAY = 'call ledger_pay {"amount": 7}'
ANSWER = "ledger_pay returned: paid 7"


def finished(events: list[dict[str, Any]]) -> dict[str, Any]:
    last = events[-1]
    assert last["type"] == "RUN_FINISHED", last
    return last


async def test_a_run_sent_again_after_it_finished_is_the_first_run(served: Running) -> None:
    """The same events (ids included) and result; paid once, stored once."""
    body = run_input("t1", "run-1", "u1", PAY)
    first = await run_agui(served, body)
    again = await run_agui(served, body)
    assert again == first
    assert finished(first)["outcome"] == {"type": "success"}
    assert PAID == [7]
    assert await stored(served, "t1") == [PAY, "", "paid 7", ANSWER]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    retries=st.lists(st.sampled_from(["during", "after"]), min_size=1, max_size=4),
    run=st.text("abc-", min_size=1, max_size=8),
)
async def test_retries_during_and_after_a_run_return_its_events_and_pay_once(
    nursery: trio.Nursery, tmp_path_factory: pytest.TempPathFactory, retries: list[str], run: str
) -> None:
    """Whenever the run is sent again (while its tool runs, or after it ended,
    any number of times), every answer is the first run's, the tool ran once
    and the thread holds the turn once; then the next run is a new turn."""
    global HOLD
    PAID.clear()
    HOLD = Hold(on=True)
    async for server in start_server(
        nursery,
        tmp_path_factory.mktemp("agui"),
        tools=("tests.server.test_agui_retry:ledger",),
        clients=tuple(Client(owner=o, token=t) for o, t in TOKENS.items()),
    ):
        body = run_input("t", run, "u1", PAY)
        answers: list[list[dict[str, Any]]] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as runs:

                async def one(
                    server: Running = server,
                    body: dict[str, Any] = body,
                    answers: list[list[dict[str, Any]]] = answers,
                ) -> None:
                    answers.append(await run_agui(server, body))

                runs.start_soon(one)
                await HOLD.reached.wait()  # the first run's tool runs
                for when in retries:
                    if when == "during":
                        runs.start_soon(one)
                await trio.sleep(0.05)  # the retries wait for the first run
                assert answers == []
                HOLD.released.set()
            for when in retries:
                if when == "after":
                    answers.append(await run_agui(server, body))
        assert len(answers) == 1 + len(retries)
        assert all(answer == answers[0] for answer in answers), answers
        assert PAID == [7]
        assert await stored(server, "t") == [PAY, "", "paid 7", ANSWER]
        nxt = await run_agui(server, run_input("t", run + "-next", "u2", PAY))
        assert finished(nxt)["outcome"] == {"type": "success"}
        assert PAID == [7, 7]


async def test_the_key_is_scoped_to_the_thread_and_the_owner(served: Running) -> None:
    """The same runId and message id on another thread, or by another owner,
    is another run: it pays again."""
    body = run_input("t1", "run-1", "u1", PAY)
    await run_agui(served, body)
    await run_agui(served, run_input("t2", "run-1", "u1", PAY))
    await run_agui(served, body, owner="bob")
    assert PAID == [7, 7, 7]
    assert await stored(served, "t1", "bob") == [PAY, "", "paid 7", ANSWER]


async def test_another_message_in_the_same_run_is_another_turn(served: Running) -> None:
    """The key is the run and its message: a new message id is a new turn."""
    await run_agui(served, run_input("t1", "run-1", "u1", PAY))
    await run_agui(served, run_input("t1", "run-1", "u2", PAY))
    assert PAID == [7, 7]


async def test_a_run_that_paused_sent_again_gets_the_same_interrupt(served: Running) -> None:
    """A run whose turn waits for approval, sent again: the same interrupt
    outcome (not ``awaiting_approval`` refused), nothing decided or stored."""
    wire = 'call ledger_wire {"amount": 3}'
    body = run_input("t1", "run-1", "u1", wire)
    first = await run_agui(served, body)
    again = await run_agui(served, body)
    assert finished(first)["outcome"]["type"] == "interrupt"
    assert again == first
    assert await stored(served, "t1") == [wire, ""]
    assert PAID == []
