"""AG-UI translation: every run parsed into the official models and checked
against the client's ordering rules."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role, TokenUsage, ToolCall
from agentik.agent._events import (
    ApprovalRequest,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnResult,
)
from agentik.models import TextDelta, ToolCallDelta
from agentik.server.agui._events import AguiRun
from agentik.server.agui._input import (
    RESPONSE_SCHEMA,
    AguiRunError,
    Decision,
    ResumeEntry,
    decision_of,
    decisions_of,
    parse_run_input,
)
from agentik.server.http._errors import HttpError
from tests.server.agui_rules import check_events

CALL = ToolCall(id="c1", name="clock_now", arguments='{"tz":"UTC"}')
FINISHED = TurnFinished(
    result=TurnResult(text="done", messages=(), usage=TokenUsage(3, 4)),
    active_toolsets=("clock",),
)

WIRE = ToolCall(id="w1", name="bank_wire", arguments='{"amount": 5}')


PAUSED_USAGE = TokenUsage(2, 3)


def paused(*calls: ToolCall, usage: TokenUsage = PAUSED_USAGE) -> TurnFinished:
    """A turn waiting for decisions on ``calls`` (the model's answer asked for them)."""
    messages = (
        Message(Role.USER, "pay", seq=1),
        Message(Role.ASSISTANT, "", calls, usage=usage, seq=2),
    )
    result = TurnResult(
        text="",
        messages=messages,
        usage=usage,
        status="awaiting_approval",
        approvals=tuple(ApprovalRequest("t1", c) for c in calls),
    )
    return TurnFinished(result=result, active_toolsets=("bank",))


def run(events: list[TurnEvent], known: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """A run of ``events``, ended by ``finish`` as the route ends it."""
    translator = AguiRun(thread_id="t1", run_id="r1", known_calls=known)
    out = translator.start()
    for event in events:
        out += translator.translate(event)
    out += translator.finish()
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


class TestApprovals:
    def test_a_paused_turn_is_an_interrupt(self) -> None:
        """A waiting call the model did not stream is sent whole before the
        snapshot (which names it), and RUN_FINISHED carries its interrupt."""
        out = run([paused(WIRE)])
        assert types(out) == [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "STATE_SNAPSHOT",
            "RUN_FINISHED",
        ]
        assert out[2]["delta"] == WIRE.arguments
        assert out[4]["snapshot"] == {"activeToolsets": ["bank"], "awaitingApproval": ["w1"]}
        assert out[5]["outcome"] == {
            "type": "interrupt",
            "interrupts": [
                {
                    "id": "w1",
                    "reason": "tool_call",
                    "message": "Approve the call of tool 'bank_wire'?",
                    "toolCallId": "w1",
                    "responseSchema": RESPONSE_SCHEMA,
                }
            ],
        }
        assert out[5]["usage"][0]["totalTokens"] == 5

    def test_a_streamed_waiting_call_is_not_sent_twice(self) -> None:
        out = run(
            [
                ToolCallDelta(index=0, arguments='{"amount"', id="w1", name="bank_wire"),
                ToolCallDelta(index=0, arguments=": 5}"),
                paused(WIRE),
            ]
        )
        assert types(out).count("TOOL_CALL_START") == 1
        args = "".join(e["delta"] for e in out if e["type"] == "TOOL_CALL_ARGS")
        assert args == WIRE.arguments

    def test_known_calls_only_get_results(self) -> None:
        """A resumed run: the decided call is the client's already (AG-UI: no
        second START), so it gets its result alone; the usage is the answers
        after it, not the model call that asked for it."""
        answer = Message(Role.ASSISTANT, "sent", usage=TokenUsage(7, 1), seq=4)
        result = paused(WIRE).result
        done = TurnResult(
            text="sent",
            messages=(*result.messages, Message(Role.TOOL, "ok", tool_call_id="w1", seq=3), answer),
            usage=TokenUsage(9, 4),
        )
        out = run(
            [
                ToolCallStarted(WIRE),
                ToolCallFinished(WIRE, "ok"),
                TextDelta("sent"),
                TurnFinished(done),
            ],
            known=frozenset({"w1"}),
        )
        assert types(out) == [
            "RUN_STARTED",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STATE_SNAPSHOT",
            "RUN_FINISHED",
        ]
        assert out[-1]["outcome"] == {"type": "success"}
        assert out[-1]["usage"][0]["inputTokens"] == 7
        assert out[-1]["usage"][0]["outputTokens"] == 1

    def test_two_turns_one_run(self) -> None:
        """A decided turn then a new message's turn: one RUN_FINISHED, two
        assistant messages, the usage of both; a turn reported twice counts once."""
        first = paused(WIRE, usage=TokenUsage(1, 1))
        second = TurnResult(
            text="hi",
            messages=(Message(Role.USER, "hey", seq=5), Message(Role.ASSISTANT, "hi", seq=6)),
            usage=TokenUsage(10, 10),
        )
        out = run(
            [
                TextDelta("a"),
                first,
                first,
                TextDelta("b"),
                TurnFinished(second),
            ]
        )
        starts = [e["messageId"] for e in out if e["type"] == "TEXT_MESSAGE_START"]
        assert len(set(starts)) == 2
        assert types(out).count("RUN_FINISHED") == 1
        assert out[-1]["outcome"] == {"type": "success"}
        assert out[-1]["usage"][0]["totalTokens"] == 22

    def test_replay_renders_what_followed_the_decided_calls(self) -> None:
        later = ToolCall(id="w2", name="bank_wire", arguments="{}")
        result = TurnResult(
            text="",
            messages=(
                *paused(WIRE).result.messages,
                Message(Role.TOOL, "denied: no", tool_call_id="w1", seq=3),
                Message(Role.ASSISTANT, "again?", (later,), seq=4),
            ),
            status="awaiting_approval",
            approvals=(ApprovalRequest("t1", later),),
        )
        translator = AguiRun(thread_id="t1", run_id="r1", known_calls=frozenset({"w1"}))
        out = translator.start() + translator.replay(result, ["bank"]) + translator.finish()
        check_events(out)
        assert [e.get("toolCallId") for e in out if e["type"] == "TOOL_CALL_RESULT"] == ["w1"]
        assert [e["toolCallId"] for e in out if e["type"] == "TOOL_CALL_START"] == ["w2"]
        assert "".join(e.get("delta", "") for e in out if e["type"] == "TEXT_MESSAGE_CONTENT") == (
            "again?"
        )
        assert [i["id"] for i in out[-1]["outcome"]["interrupts"]] == ["w2"]

    def test_finish_without_a_turn_is_an_error(self) -> None:
        translator = AguiRun(thread_id="t1", run_id="r1")
        out = translator.start() + translator.finish()
        check_events(out)
        assert out[-1] == {
            "type": "RUN_ERROR",
            "message": "the turn ended without a result",
            "code": "turn_failed",
        }
        assert translator.finish() == []


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


_ends = st.sampled_from(
    [
        FINISHED,
        TurnFailed(message="x", code="cancelled"),
        paused(WIRE),
        paused(WIRE, CALL),
    ]
)


@given(
    st.lists(st.one_of(_events, _ends), max_size=25),
    _ends,
    st.sets(st.sampled_from(["c1", "c2", "w1"])).map(frozenset),
)
def test_any_event_sequence_gives_a_valid_run(
    events: list[TurnEvent], end: TurnEvent, known: frozenset[str]
) -> None:
    """Whatever order the agent's events come in (several turns in one run, a
    paused one among them, calls the client already has), the client accepts
    the run; a paused last turn ends it with one interrupt per waiting call,
    each call started in this run unless the client has it already."""
    out = run([*events, end], known)
    last = out[-1]
    assert last["type"] in ("RUN_FINISHED", "RUN_ERROR")
    assert types(out).count(last["type"]) == 1
    started = {e["toolCallId"] for e in out if e["type"] == "TOOL_CALL_START"}
    assert not started & known, "a call the client has is never started again"
    failed = any(isinstance(e, TurnFailed) for e in [*events, end])
    if isinstance(end, TurnFinished) and not failed:
        waiting = [a.call.id for a in end.result.approvals]
        outcome = last["outcome"]
        if waiting:
            assert [i["id"] for i in outcome["interrupts"]] == waiting
            assert set(waiting) <= started | known
        else:
            assert outcome == {"type": "success"}


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


class TestResume:
    BODY: ClassVar[dict[str, Any]] = {
        "threadId": "t1",
        "runId": "r2",
        "messages": [
            {"id": "u1", "role": "user", "content": "pay"},
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {"id": "w1", "type": "function", "function": {"name": "x", "arguments": "{}"}}
                ],
            },
        ],
        "resume": [{"interruptId": "w1", "status": "resolved", "payload": {"approved": True}}],
    }

    def test_a_resume_needs_no_new_message(self) -> None:
        parsed = parse_run_input(self.BODY)
        assert parsed.text is None
        assert parsed.resume == (ResumeEntry("w1", "resolved", {"approved": True}),)
        assert parse_run_input({**self.BODY, "messages": []}).text is None

    def test_a_user_message_after_the_calls_is_new(self) -> None:
        new = {"id": "u2", "role": "user", "content": "and then?"}
        body = {**self.BODY, "messages": [*self.BODY["messages"], new]}
        assert parse_run_input(body).text == "and then?"

    def test_a_user_message_without_the_calls_before_it_is_not(self) -> None:
        """A client that keeps no history sends the message that began the turn:
        it is not a new one."""
        body = {**self.BODY, "messages": [{"id": "u1", "role": "user", "content": "pay"}]}
        assert parse_run_input(body).text is None

    def test_an_empty_resume_is_no_resume(self) -> None:
        with pytest.raises(HttpError, match=r"messages\[1\]\.role' must be 'user'"):
            parse_run_input({**self.BODY, "resume": []})

    def test_decisions(self) -> None:
        entries = [
            ResumeEntry("a", "resolved", {"approved": True}),
            ResumeEntry("b", "resolved", {"approved": False, "reason": "no"}),
            ResumeEntry("c", "cancelled"),
            ResumeEntry("d", "cancelled", {"approved": True}),
        ]
        assert decisions_of(entries) == [
            Decision("a", True),
            Decision("b", False, "no"),
            Decision("c", False, "the user cancelled"),
            Decision("d", False, "the user cancelled"),
        ]

    def test_an_interrupt_answered_twice(self) -> None:
        entry = ResumeEntry("a", "resolved", {"approved": True})
        with pytest.raises(AguiRunError, match=r"^resume\[1\]: interrupt 'a' is answered twice$"):
            decisions_of([entry, entry])


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["approved", "reason", "x"]) | st.text(max_size=5), inner, max_size=3
        )
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(_json, st.sampled_from(["resolved", "cancelled"]))
def test_any_payload_is_a_decision_or_a_clear_refusal(payload: Any, status: Any) -> None:
    """Whatever JSON a client puts in a payload: a decision, exactly when the
    interrupt's schema allows it, or a RUN_ERROR naming what is wrong."""
    entry = ResumeEntry("c1", status, payload)
    valid = status == "cancelled" or (
        isinstance(payload, dict)
        and set(payload) <= {"approved", "reason"}
        and isinstance(payload.get("approved"), bool)
        and isinstance(payload.get("reason", ""), str)
    )
    if not valid:
        with pytest.raises(AguiRunError, match=r"^resume\[0\]\.payload: ") as caught:
            decision_of(entry, 0)
        assert caught.value.code == "invalid_decision"
        return
    decision = decision_of(entry, 0)
    assert decision.call_id == "c1"
    if status == "resolved":
        assert decision == Decision("c1", payload["approved"], payload.get("reason", ""))
    else:
        assert not decision.approve


@settings(max_examples=300, deadline=None)
@given(
    _json
    | st.lists(
        st.dictionaries(st.sampled_from(["interruptId", "status", "payload"]), _json, max_size=3),
        max_size=3,
    )
)
def test_any_resume_is_read_or_refused_with_422(resume: Any) -> None:
    """Whatever the ``resume`` field holds: read, or a 422 naming the field."""
    body = {**TestResume.BODY, "resume": resume}
    refusal = None
    try:
        parsed = parse_run_input(json.loads(json.dumps(body)))
    except HttpError as error:
        refusal = error
    if refusal is not None:
        assert refusal.status == 422
        assert "'resume" in refusal.message or "'messages" in refusal.message
    else:
        assert len(parsed.resume) == (len(resume) if isinstance(resume, list) else 0)
