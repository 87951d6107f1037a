"""The AG-UI client's ordering rules (``verifyEvents`` of @ag-ui/client), in Python.

Every event is first parsed into the official ``ag-ui-protocol`` models, so a
missing required field or a wrong type fails here as it would in the client;
then the sequence is checked: RUN_STARTED first, nothing after RUN_ERROR,
START/CONTENT/ARGS/END ids matching, no RUN_FINISHED while a block is open,
no null optional fields.
"""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)


def _no_nulls(value: Any, path: str) -> None:
    if value is None:
        raise AssertionError(f"{path} is null; optional fields must be left out")
    if isinstance(value, dict):
        for key, item in value.items():
            _no_nulls(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _no_nulls(item, f"{path}[{i}]")


def check_events(events: list[dict[str, Any]]) -> list[Any]:
    """Parse and verify a run's events; return the parsed models."""
    parsed = []
    for i, event in enumerate(events):
        assert isinstance(event, dict)
        assert isinstance(event.get("type"), str)
        assert event["type"]
        _no_nulls(event, f"event[{i}]")
        parsed.append(EVENT_ADAPTER.validate_python(event))
    assert events, "a run must have events"
    assert events[0]["type"] in ("RUN_STARTED", "RUN_ERROR"), events[0]
    open_text: set[str] = set()
    open_calls: set[str] = set()
    finished = errored = False
    for event in events[1:]:
        kind = event["type"]
        assert not errored, f"{kind} after RUN_ERROR"
        assert not finished or kind == "RUN_STARTED", f"{kind} after RUN_FINISHED"
        if kind == "TEXT_MESSAGE_START":
            assert event["messageId"] not in open_text
            open_text.add(event["messageId"])
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            assert event["messageId"] in open_text, f"{kind} without an open text message"
            if kind == "TEXT_MESSAGE_END":
                open_text.discard(event["messageId"])
        elif kind == "TOOL_CALL_START":
            assert event["toolCallId"] not in open_calls
            open_calls.add(event["toolCallId"])
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            assert event["toolCallId"] in open_calls, f"{kind} without an open tool call"
            if kind == "TOOL_CALL_END":
                open_calls.discard(event["toolCallId"])
        elif kind == "RUN_FINISHED":
            assert not open_text, "RUN_FINISHED with an open text message"
            assert not open_calls, "RUN_FINISHED with an open tool call"
            finished = True
        elif kind == "RUN_ERROR":
            errored = True
        elif kind == "RUN_STARTED":
            finished = False
    return parsed


def parse_sse(body: str) -> list[dict[str, Any]]:
    """Frames split on blank lines; ``data:`` lines joined, other fields ignored."""
    events = []
    for frame in body.split("\n\n"):
        data = [line[5:].lstrip(" ") for line in frame.split("\n") if line.startswith("data:")]
        if data:
            events.append(json.loads("\n".join(data)))
    return events
