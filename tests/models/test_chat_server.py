"""The scripted server's request check is strict, so the backend tests can fail.

If ``request_problem`` accepted anything, every request the backend sends
would pass; these pin that it rejects what a real API would reject.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.models.chat_server import request_problem

VALID: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "time_now", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "12:00"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "time_now", "description": "d", "parameters": {}},
        }
    ],
    "stream": True,
    "stream_options": {"include_usage": True},
}


DELETE = object()
CALLS = VALID["messages"][2]["tool_calls"]
PARAMETERS = VALID["tools"][0]["function"]["parameters"]


def _with(*changes: tuple[tuple[str | int, ...], object]) -> dict[str, Any]:
    """A deep copy of VALID with each ``(path, value)`` set (or deleted)."""
    body = copy.deepcopy(VALID)
    for path, value in changes:
        *parents, last = path
        target: Any = body
        for key in parents:
            target = target[key]
        if value is DELETE:
            del target[last]
        else:
            target[last] = value
    return body


def test_accepts_a_valid_body() -> None:
    """The request PROTOCOLS.md documents passes."""
    assert request_problem(VALID) is None


@pytest.mark.parametrize(
    "body",
    [
        _with((("temprature",), 0.5)),
        _with((("messages", 2, "tool_call"), CALLS), (("messages", 2, "tool_calls"), DELETE)),
        _with((("messages", 2, "tool_calls", 0, "type"), "func")),
        _with((("messages", 2, "tool_calls", 0, "function", "arguments"), {})),
        _with((("messages", 3, "tool_call_id"), None)),
        _with((("messages", 3, "tool_call_id"), DELETE)),
        _with((("messages", 0, "content"), None)),
        _with((("messages", 1, "role"), "human")),
        _with(
            (("tools", 0, "function", "parameter"), PARAMETERS),
            (("tools", 0, "function", "parameters"), DELETE),
        ),
        _with((("stream_options",), {"include_usage": "yes"})),
        _with((("model",), DELETE)),
        _with((("temperature",), "0.5")),
        [VALID],
    ],
)
def test_rejects_wrong_or_misspelled_fields(body: object) -> None:
    """A misspelled, mistyped or missing field is reported."""
    assert request_problem(body) is not None
