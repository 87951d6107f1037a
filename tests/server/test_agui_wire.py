"""AG-UI translation: every run parsed into the official models and checked
against the client's ordering rules."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik import TokenUsage, ToolCall
from agentik.agent._events import (
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnResult,
)
from agentik.models import TextDelta, ToolCallDelta
from agentik.server._agui import AguiRun, parse_run_input
from agentik.server._errors import HttpError
from tests.server.agui_rules import check_events

CALL = ToolCall(id="c1", name="clock_now", arguments='{"tz":"UTC"}')
FINISHED = TurnFinished(
    result=TurnResult(text="done", messages=(), usage=TokenUsage(3, 4)),
    active_toolsets=("clock",),
)


def run(events: list[TurnEvent]) -> list[dict[str, Any]]:
    translator = AguiRun(thread_id="t1", run_id="r1")
    out = translator.start()
    for event in events:
        out += translator.translate(event)
    check_events(out)
    return out


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


class TestAguiRun:
    def test_text_only(self) -> None:
        """A text answer: start, one text block, snapshot, finish with usage."""
        out = run([TextDelta("Hel"), TextDelta("lo"), FINISHED])
        assert types(out) == [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STATE_SNAPSHOT",
            "RUN_FINISHED",
        ]
        assert out[0] == {
            "type": "RUN_STARTED",
            "threadId": "t1",
            "runId": "r1",
            "protocolVersion": "1.0",
        }
        assert "".join(e["delta"] for e in out if "delta" in e) == "Hello"
        assert out[5]["snapshot"] == {"activeToolsets": ["clock"]}
        assert out[6]["usage"] == [
            {
                "provider": "agentik",
                "model": "agentik",
                "inputTokens": 3,
                "outputTokens": 4,
                "totalTokens": 7,
            }
        ]

    def test_streamed_tool_calls(self) -> None:
        """Streamed call pieces become START/ARGS; END comes before the tool runs."""
        second = ToolCall(id="c2", name="clock_zone", arguments="{}")
        out = run(
            [
                TextDelta("let me check"),
                ToolCallDelta(index=0, id="c1", name="clock_now", arguments='{"tz"'),
                ToolCallDelta(index=1, id="c2", name="clock_zone", arguments="{}"),
                ToolCallDelta(index=0, arguments=':"UTC"}'),
                ToolCallStarted(CALL),
                ToolCallFinished(CALL, "12:00"),
                ToolCallStarted(second),
                ToolCallFinished(second, "error: no zone", is_error=True),
                TextDelta("done"),
                FINISHED,
            ]
        )
        args = "".join(
            e["delta"] for e in out if e["type"] == "TOOL_CALL_ARGS" and e["toolCallId"] == "c1"
        )
        assert args == CALL.arguments
        results = [e for e in out if e["type"] == "TOOL_CALL_RESULT"]
        assert [(r["toolCallId"], r["content"]) for r in results] == [
            ("c1", "12:00"),
            ("c2", "error: no zone"),
        ]
        starts = [e for e in out if e["type"] == "TOOL_CALL_START"]
        text_start = next(e for e in out if e["type"] == "TEXT_MESSAGE_START")
        assert {s["parentMessageId"] for s in starts} == {text_start["messageId"]}
        assert types(out).index("TOOL_CALL_END") < types(out).index("TOOL_CALL_RESULT")

    def test_unstreamed_tool_call(self) -> None:
        """A call that arrives whole is sent as START, one ARGS, END."""
        out = run(
            [ToolCallStarted(CALL), ToolCallFinished(CALL, "12:00"), TextDelta("ok"), FINISHED]
        )
        assert types(out)[1:5] == [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
        ]
        assert out[2]["delta"] == CALL.arguments

    def test_failure_closes_blocks_then_ends(self) -> None:
        """RUN_ERROR comes after closing the open text; nothing follows it."""
        translator = AguiRun(thread_id="t1", run_id="r1")
        out = translator.start() + translator.translate(TextDelta("par"))
        out += translator.translate(TurnFailed(message="model failed", code="model_error"))
        out += translator.translate(TextDelta("late"))
        check_events(out)
        assert types(out)[-2:] == ["TEXT_MESSAGE_END", "RUN_ERROR"]
        assert out[-1] == {"type": "RUN_ERROR", "message": "model failed", "code": "model_error"}


_calls = st.sampled_from([CALL, ToolCall(id="c2", name="clock_zone", arguments="{}")])
_events = st.one_of(
    st.builds(TextDelta, st.sampled_from(["", "a", "b c"])),
    st.builds(
        ToolCallDelta,
        index=st.integers(0, 2),
        arguments=st.sampled_from(["", "{", "}"]),
        id=st.sampled_from([None, "c1", "c2", "c3"]),
        name=st.sampled_from([None, "clock_now"]),
    ),
    st.builds(ToolCallStarted, _calls),
    st.builds(ToolCallFinished, _calls, st.just("r"), st.booleans()),
)


@given(
    st.lists(_events, max_size=25),
    st.sampled_from([FINISHED, TurnFailed(message="x", code="cancelled")]),
)
def test_any_event_sequence_gives_a_valid_run(events: list[TurnEvent], end: TurnEvent) -> None:
    """Whatever order the agent's events come in, the client accepts the run."""
    out = run([*events, end])
    assert out[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")


class TestParseRunInput:
    BODY: ClassVar[dict[str, Any]] = {
        "threadId": "t1",
        "runId": "r1",
        "protocolVersion": "1.0",
        "state": {},
        "messages": [
            {"id": "a0", "role": "assistant", "content": "earlier"},
            {"id": "u1", "role": "user", "content": "hi"},
        ],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }

    def test_valid(self) -> None:
        parsed = parse_run_input(self.BODY)
        assert (parsed.thread_id, parsed.run_id, parsed.text) == ("t1", "r1", "hi")

    def test_text_parts(self) -> None:
        body = {
            **self.BODY,
            "messages": [{"id": "u", "role": "user", "content": [{"type": "text", "text": "yo"}]}],
        }
        assert parse_run_input(body).text == "yo"

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"threadId": 5}, r"^field 'threadId' must be a string, got a number$"),
            ({"runId": None}, r"^field 'runId' must be a string, got null$"),
            ({"messages": "hi"}, r"^field 'messages' must be an array, got a string$"),
            ({"messages": []}, r"^field 'messages' must end with a user message"),
            (
                {"messages": [{"id": "x", "role": "assistant", "content": "a"}]},
                r"messages\[0\]\.role' must be 'user'",
            ),
            (
                {"messages": [{"role": "user", "content": "a"}]},
                r"^field 'messages\[0\]\.id' is required$",
            ),
            (
                {"messages": [{"id": "u", "role": "user", "content": 3}]},
                r"messages\[0\]\.content' must be a string or",
            ),
            ({"protocolVersion": "0.9"}, r"^field 'protocolVersion' must be '1\.0', got '0\.9'$"),
        ],
    )
    def test_invalid(self, change: dict[str, Any], message: str) -> None:
        """Each refusal is a 422 naming the field."""
        with pytest.raises(HttpError, match=message) as caught:
            parse_run_input({**self.BODY, **change})
        assert caught.value.status == 422

    def test_missing_messages(self) -> None:
        body = {k: v for k, v in self.BODY.items() if k != "messages"}
        with pytest.raises(HttpError, match=r"^field 'messages' is required$"):
            parse_run_input(body)
