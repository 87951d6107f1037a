"""AG-UI over HTTP: each stream parsed into the official event models and checked
against the client's ordering rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from ag_ui.core import (
    EventType,
    RunErrorEvent,
    RunFinishedEvent,
    StateSnapshotEvent,
    ToolCallResultEvent,
)

from agentik.server import Limits
from tests.server.agui_rules import check_events, parse_sse
from tests.server.conftest import Running, start_server


def run_input(thread: str, text: str, run: str = "r1", **extra: Any) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "protocolVersion": "1.0",
        "state": {},
        "messages": [{"id": f"u-{run}", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
        **extra,
    }


async def run_agui(server: Running, body: dict[str, Any]) -> list[Any]:
    response = await server.client.post("/agui", json=body, headers={"Accept": "text/event-stream"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return check_events(parse_sse(response.text))


async def test_text_run(server: Running) -> None:
    events = await run_agui(server, run_input("t1", "hello"))
    assert [e.type for e in events] == [
        EventType.RUN_STARTED,
        EventType.TEXT_MESSAGE_START,
        *[EventType.TEXT_MESSAGE_CONTENT] * (len(events) - 5),
        EventType.TEXT_MESSAGE_END,
        EventType.STATE_SNAPSHOT,
        EventType.RUN_FINISHED,
    ]
    assert events[0].protocol_version == "1.0"
    text = "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert text == "You said: hello"
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert (finished.thread_id, finished.run_id) == ("t1", "r1")
    assert finished.usage is not None
    assert finished.usage[0].total_tokens > 0


async def test_tool_run_and_state_snapshot(server: Running) -> None:
    """Server-side tools appear as TOOL_CALL_* and TOOL_CALL_RESULT; the snapshot
    carries the conversation's active toolsets."""
    events = await run_agui(server, run_input("t2", 'call enable_toolset {"name": "clock"}'))
    kinds = [e.type for e in events]
    assert kinds.index(EventType.TOOL_CALL_START) < kinds.index(EventType.TOOL_CALL_END)
    assert kinds.index(EventType.TOOL_CALL_END) < kinds.index(EventType.TOOL_CALL_RESULT)
    args = "".join(e.delta for e in events if e.type == EventType.TOOL_CALL_ARGS)
    assert args == '{"name": "clock"}'
    [result] = [e for e in events if isinstance(e, ToolCallResultEvent)]
    assert result.content == "Toolset 'clock' activated."
    [snapshot] = [e for e in events if isinstance(e, StateSnapshotEvent)]
    assert snapshot.snapshot == {"activeToolsets": ["clock"]}


async def test_history_comes_from_the_store(server: Running) -> None:
    """Earlier messages the client sends are not replayed: only the new user message is stored."""
    body = run_input("t3", "second")
    body["messages"] = [
        {"id": "x1", "role": "user", "content": "made-up earlier question"},
        {"id": "x2", "role": "assistant", "content": "made-up earlier answer"},
        *body["messages"],
    ]
    await run_agui(server, body)
    stored = (await server.client.get("/agentik/conversations/t3/messages")).json()["messages"]
    assert [m["content"] for m in stored] == ["second", "You said: second"]


async def test_tool_error_is_a_result(server: Running) -> None:
    """A raising tool becomes an error result the run goes on from."""
    await run_agui(server, run_input("t4", 'call enable_toolset {"name": "clock"}'))
    # The demo model then calls a tool that raises: an error result, the turn goes on.
    events = await run_agui(server, run_input("t4", "call clock_fail", run="r2"))
    [result] = [e for e in events if isinstance(e, ToolCallResultEvent)]
    assert isinstance(result.content, str)
    assert result.content.startswith("error: ")
    assert events[-1].type == EventType.RUN_FINISHED


async def test_failed_turn_is_run_error(nursery: trio.Nursery, tmp_path: Path) -> None:
    """A turn that fails (here: past max_tool_rounds) ends with RUN_ERROR, blocks closed."""
    async for server in start_server(nursery, tmp_path, limits=Limits(max_tool_rounds=1)):
        events = await run_agui(server, run_input("t6", 'call enable_toolset {"name": "clock"}'))
    error = events[-1]
    assert isinstance(error, RunErrorEvent)
    assert error.code == "step_limit"
    assert EventType.RUN_FINISHED not in [e.type for e in events]


async def test_invalid_input_is_422_before_the_stream(server: Running) -> None:
    body = run_input("t5", "hi")
    del body["runId"]
    response = await server.client.post("/agui", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "field 'runId' is required"
