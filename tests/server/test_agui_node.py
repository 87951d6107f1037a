"""One end-to-end AG-UI run with the npm ``@ag-ui/client`` HttpAgent under node.

Needs node and ``npm ci`` at the repository root (package.json pins the
client; ``.ci/run`` installs it). When either is missing the tests are
skipped *loudly*: a warning in the summary of every run says why and what to
run, so a green run cannot hide that they did not run. Under CI (``CI`` set),
where ``.ci/run`` installs the client, they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.server.agui_bank import RUNS, Served, serving
from tests.server.conftest import Running

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("agui_client.mjs")


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (ROOT / "node_modules" / "@ag-ui" / "client").is_dir():
        return "@ag-ui/client is not installed: run `npm ci` at the repository root"
    return None


MISSING = _missing()
if MISSING is not None and not os.environ.get("CI"):
    warnings.warn(
        f"the AG-UI npm client tests (tests/server/test_agui_node.py) are skipped: {MISSING}",
        pytest.PytestWarning,
        stacklevel=1,
    )
    pytestmark = pytest.mark.skip(reason=MISSING)


@pytest.fixture(autouse=True)
def _required_under_ci() -> None:
    """CI installs the client (``.ci/run`` runs ``npm ci``): missing there is a failure."""
    if MISSING is not None:
        pytest.fail(f"CI must run the AG-UI npm client tests: {MISSING}")


async def run_node(*args: str) -> dict[str, object]:
    result = await trio.run_process(
        ["node", str(SCRIPT), *args], capture_stdout=True, capture_stderr=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    parsed = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert isinstance(parsed, dict)
    return parsed


async def test_http_agent_run_with_a_tool(server: Running) -> None:
    """The npm client accepts the stream: events verified, messages rebuilt, state applied."""
    seen = await run_node(f"{server.url}/agui", "node-1", 'call enable_toolset {"name": "clock"}')
    assert seen["failure"] is None, seen
    types = seen["types"]
    assert isinstance(types, list)
    assert types[0] == "RUN_STARTED"
    assert types[-1] == "RUN_FINISHED"
    assert "TOOL_CALL_RESULT" in types
    messages = seen["newMessages"]
    assert isinstance(messages, list)
    assistant = next(m for m in messages if m["role"] == "assistant" and m.get("toolCalls"))
    assert assistant["toolCalls"][0]["function"]["name"] == "enable_toolset"
    assert assistant["toolCalls"][0]["function"]["arguments"] == '{"name": "clock"}'
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"] == "Toolset 'clock' activated."
    assert messages[-1]["content"] == "enable_toolset returned: Toolset 'clock' activated."
    assert seen["state"] == {"activeToolsets": ["clock"]}


async def test_http_agent_sees_http_errors(secured: Running) -> None:
    """A refusal before the run (here: no token) reaches the client as an HTTP error."""
    seen = await run_node(f"{secured.url}/agui", "node-2", "hi")
    assert "401" in str(seen["failure"])
    ok = await run_node(f"{secured.url}/agui", "node-2", "hi", "s3cret")
    assert ok["failure"] is None
    types = ok["types"]
    assert isinstance(types, list)
    assert types[-1] == "RUN_FINISHED"


@pytest.fixture
async def bank(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Served]:
    RUNS.clear()
    async with serving(nursery, tmp_path / "bank.db") as running:
        yield running


async def test_http_agent_approves_a_call(bank: Served) -> None:
    """The npm client drives an approval to completion: the run ends with the
    interrupt (kept as ``pendingInterrupts``), the client itself refuses a new
    message that leaves it unanswered, and the next run's ``resume`` approves:
    the call's result joins the assistant message that made it."""
    steps = [
        {"say": 'call enable_toolset {"name": "bank"}'},
        {"say": 'call bank_wire {"amount": 5}'},
        {"sayAnyway": "never mind"},
        {"resume": {"approved": True, "reason": "fine"}},
    ]
    seen = await run_node(f"{bank.url}/agui", "node-approve", json.dumps(steps))
    runs = seen["runs"]
    assert isinstance(runs, list)
    enable, pay, refused, resumed = runs
    assert enable["outcome"] == "success"
    assert pay["outcome"] == "interrupt"
    [interrupt] = pay["interrupts"]
    assert interrupt["reason"] == "tool_call"
    assert interrupt["id"] == interrupt["toolCallId"]
    assert pay["types"][-2:] == ["STATE_SNAPSHOT", "RUN_FINISHED"]
    assert "TOOL_CALL_RESULT" not in pay["types"]
    assert refused["types"] == []
    assert "Thread has 1 pending interrupt(s) not addressed by resume" in refused["failure"]
    assert resumed["failure"] is None
    assert resumed["outcome"] == "success"
    assert "TOOL_CALL_START" not in resumed["types"]
    assert seen["pendingInterrupts"] == []
    messages = seen["messages"]
    assert isinstance(messages, list)
    at = next(
        i
        for i, m in enumerate(messages)
        if any(c["id"] == interrupt["toolCallId"] for c in m.get("toolCalls", []))
    )
    assert messages[at]["toolCalls"][0]["function"]["arguments"] == '{"amount": 5}'
    assert messages[at + 1]["role"] == "tool"
    assert messages[at + 1]["toolCallId"] == interrupt["toolCallId"]
    assert messages[at + 1]["content"] == "sent 5"
    assert messages[-1]["content"] == "bank_wire returned: sent 5"
    assert seen["state"] == {"activeToolsets": ["bank"]}
    assert RUNS == ["wire 5"]


async def test_http_agent_cancels_a_call(bank: Served) -> None:
    """``cancelled`` (the client abandoning the interrupt) denies the call."""
    steps = [
        {"say": 'call enable_toolset {"name": "bank"}'},
        {"say": 'call bank_wire {"amount": 9}'},
        {"resume": "cancelled"},
    ]
    seen = await run_node(f"{bank.url}/agui", "node-cancel", json.dumps(steps))
    runs = seen["runs"]
    assert isinstance(runs, list)
    assert runs[-1]["outcome"] == "success"
    messages = seen["newMessages"]
    assert isinstance(messages, list)
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["denied: the user cancelled"]
    assert RUNS == []


async def test_http_agent_sending_a_run_again_gets_the_first_run(bank: Served) -> None:
    """The npm client sends a run again (a new HttpAgent with the same messages
    and runId, as after a lost answer): it accepts the stream, and gets the
    first run's messages, same ids; the wire ran once, its turn stored once."""
    steps = [
        {"say": 'call enable_toolset {"name": "bank"}'},
        {"say": "call bank_balance"},
        {"again": True},
    ]
    seen = await run_node(f"{bank.url}/agui", "node-again", json.dumps(steps))
    runs = seen["runs"]
    assert isinstance(runs, list)
    _, first, again = runs
    assert (first["failure"], again["failure"]) == (None, None)
    assert again["outcome"] == first["outcome"] == "success"
    assert again["newMessages"] == first["newMessages"]
    assert [m["role"] for m in first["newMessages"]] == ["assistant", "tool", "assistant"]
    assert first["newMessages"][-1]["content"] == "bank_balance returned: 100"
    assert RUNS == ["balance"]


async def test_http_agent_skips_heartbeats(idle_clock: trio.testing.MockClock) -> None:
    """A run whose model takes 50 s (virtual) carries three heartbeats
    (``: keep-alive``): the npm client skips them and sees the same events as
    with heartbeats off."""
    from tests.server.test_heartbeats import serving as slow_serving

    seen = []
    for heartbeat in (15.0, None):
        async with slow_serving(heartbeat) as url:
            seen.append(await run_node(f"{url}/agui", "node-beat", "hello"))
    beating, plain = seen
    assert beating["failure"] is None, beating
    assert beating["types"] == plain["types"]
    assert beating["types"][0] == "RUN_STARTED"
    assert beating["types"][-1] == "RUN_FINISHED"
    assert beating["newMessages"][-1]["content"] == "You said: hello"  # type: ignore[index]


@pytest.fixture
def idle_clock() -> trio.testing.MockClock:
    """Virtual time that jumps after 50 ms of real idleness: node's start-up
    and its loopback writes do not move it, the model's wait does."""
    return trio.testing.MockClock(autojump_threshold=0.05)
