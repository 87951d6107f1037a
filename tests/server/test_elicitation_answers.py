"""Parsing a person's answer to a tool's question, as the native API and A2A
take it. Pure; a property over arbitrary JSON: every body is either a valid
answer or a clear refusal (native 422, A2A -32602), never another exception,
and a valid answer keeps exactly what the client said."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.agent import ElicitationRequest
from agentik.server.a2a._answers import parse_elicitation_answer
from agentik.server.a2a._rpc import A2AError
from agentik.server.a2a._send import SendParams
from agentik.server.http._errors import HttpError
from agentik.server.native._wire import parse_elicitation_answer as parse_native

QUESTION = ElicitationRequest(
    conversation_id="c", id="q1", source="web", message="Who?", schema={"type": "object"}
)
SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = st.sampled_from(["elicitation", "action", "content", "approve", "x"])
VALUES = st.sampled_from(["q1", "q2", "accept", "decline", "cancel", "maybe"]) | JSON
BODIES = st.dictionaries(KEYS, VALUES, max_size=4) | JSON


def _send(data: Any) -> SendParams:
    return SendParams(text="", context_id="c", task_id="t.c", message_id="m", data=(data,))


@settings(max_examples=300, deadline=None)
@given(BODIES)
def test_a2a_answers_are_taken_or_refused_with_32602(data: Any) -> None:
    try:
        answer = parse_elicitation_answer(_send(data), QUESTION)
    except A2AError as error:
        refused = error.code
    else:
        refused = None
    if refused is not None:
        assert refused == -32602
        return
    assert isinstance(data, dict)
    assert data["elicitation"] == "q1"
    assert set(data) <= {"elicitation", "action", "content"}
    assert answer.action == data.get("action", "accept")
    assert answer.content == data.get("content")


@settings(max_examples=300, deadline=None)
@given(BODIES)
def test_native_answers_are_taken_or_refused_with_422(body: Any) -> None:
    try:
        answer = parse_native(body)
    except HttpError as error:
        refusal: tuple[int, str] | None = (error.status, error.code)
    else:
        refusal = None
    if refusal is not None:
        assert refusal == (422, "invalid_field")
        return
    assert isinstance(body, dict)
    assert set(body) <= {"action", "content"}
    assert answer.action == (body.get("action") or "accept")
    assert answer.content == body.get("content")
