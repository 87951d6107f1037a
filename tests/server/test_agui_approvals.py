"""Human approval of tool calls over AG-UI, end to end: a real server on
127.0.0.1, a real SQLite file, requests built from the ``ag-ui-protocol``
models and every stream parsed into them and checked against the client's
ordering rules.

The mapping (docs/server.md, "AG-UI"): a turn that pauses ends its run with
the waiting calls streamed (no result) and ``RUN_FINISHED`` with the interrupt
outcome, one interrupt per call (its id is the call's id); the next run
answers them in ``resume`` and streams the turn going on.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from ag_ui.core import (
    AssistantMessage,
    EventType,
    FunctionCall,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    StateSnapshotEvent,
    ToolCall,
    ToolCallResultEvent,
    UserMessage,
)

from agentik import Message
from agentik._serde import converter
from tests.agent.helpers import assert_valid_history
from tests.server.agui_bank import RUNS, Served, serving
from tests.server.agui_rules import check_events, parse_sse


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


@pytest.fixture
async def served(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Served]:
    async with serving(nursery, tmp_path / "agentik.db") as running:
        yield running


@attrs.define
class Thread:
    """One AG-UI thread as a client keeps it: the messages so far (built from
    the events as @ag-ui/client builds them) and the interrupts left open."""

    served: Served
    thread_id: str
    owner: str | None = None
    messages: list[Any] = attrs.Factory(list)
    interrupts: list[Any] = attrs.Factory(list)
    runs: int = 0

    async def post(self, body: dict[str, Any]) -> list[Any]:
        async with self.served.client(self.owner) as client:
            response = await client.post(
                "/agui", json=body, headers={"Accept": "text/event-stream"}
            )
        assert response.status_code == 200, response.text
        events = check_events(parse_sse(response.text))
        self._apply(events)
        return events

    def body(self, resume: list[ResumeEntry] | None = None) -> dict[str, Any]:
        self.runs += 1
        run = RunAgentInput(
            thread_id=self.thread_id,
            run_id=f"{self.thread_id}-run-{self.runs}",
            protocol_version="1.0",
            state={},
            messages=self.messages,
            tools=[],
            context=[],
            forwarded_props={},
            resume=resume,
        )
        return run.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def say(self, text: str) -> list[Any]:
        self.messages.append(UserMessage(id=f"u{len(self.messages)}", content=text))
        return await self.post(self.body())

    async def resume(self, *entries: ResumeEntry, then: str | None = None) -> list[Any]:
        if then is not None:
            self.messages.append(UserMessage(id=f"u{len(self.messages)}", content=then))
        return await self.post(self.body(list(entries)))

    def _apply(self, events: list[Any]) -> None:
        """What the client does with a run's messages and its interrupts."""
        calls: dict[str, ToolCall] = {}
        for event in events:
            if event.type == EventType.TOOL_CALL_START:
                call = ToolCall(
                    id=event.tool_call_id,
                    function=FunctionCall(name=event.tool_call_name, arguments=""),
                )
                calls[call.id] = call
                self.messages.append(AssistantMessage(id=f"a-{call.id}", tool_calls=[call]))
            elif event.type == EventType.TOOL_CALL_ARGS:
                calls[event.tool_call_id].function.arguments += event.delta
            elif event.type == EventType.RUN_FINISHED:
                outcome = event.outcome
                self.interrupts = list(outcome.interrupts) if outcome.type == "interrupt" else []


def approve(interrupt_id: str, reason: str | None = None) -> ResumeEntry:
    payload: dict[str, Any] = {"approved": True}
    if reason is not None:
        payload["reason"] = reason
    return ResumeEntry(interrupt_id=interrupt_id, status="resolved", payload=payload)


def deny(interrupt_id: str, reason: str | None = None) -> ResumeEntry:
    payload: dict[str, Any] = {"approved": False}
    if reason is not None:
        payload["reason"] = reason
    return ResumeEntry(interrupt_id=interrupt_id, status="resolved", payload=payload)


def kinds(events: list[Any]) -> list[str]:
    return [e.type.value for e in events]


def text_of(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT)


def results(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.tool_call_id, e.content) for e in events if isinstance(e, ToolCallResultEvent)]


def finished(events: list[Any]) -> RunFinishedEvent:
    end = events[-1]
    assert isinstance(end, RunFinishedEvent), events
    return end


def run_error(events: list[Any]) -> RunErrorEvent:
    end = events[-1]
    assert isinstance(end, RunErrorEvent), events
    assert kinds(events) == ["RUN_STARTED", "RUN_ERROR"], "refused before anything ran"
    return end


async def pay(thread: Thread, amount: int = 5) -> list[Any]:
    """Enable the bank toolset, then ask for a wire: the run ends interrupted."""
    await thread.say('call enable_toolset {"name": "bank"}')
    return await thread.say(f'call bank_wire {{"amount": {amount}}}')


async def history(served: Served, thread_id: str, owner: str | None = None) -> list[Any]:
    async with served.client(owner) as client:
        response = await client.get(f"/agentik/conversations/{thread_id}/messages")
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


async def test_a_paused_turn_ends_its_run_with_an_interrupt(served: Served) -> None:
    """The waiting call is streamed (START/ARGS/END, no result), the state names
    it, and RUN_FINISHED carries one interrupt for it: reason ``tool_call``, its
    id the call's, and the answer's schema."""
    thread = Thread(served, "t-pause")
    events = await pay(thread)
    starts = [e for e in events if e.type == EventType.TOOL_CALL_START]
    assert [s.tool_call_name for s in starts] == ["bank_wire"]
    call_id = starts[0].tool_call_id
    args = "".join(e.delta for e in events if e.type == EventType.TOOL_CALL_ARGS)
    assert json.loads(args) == {"amount": 5}
    assert EventType.TOOL_CALL_END in [e.type for e in events]
    assert results(events) == [], "the call waits: it has no result"
    [snapshot] = [e for e in events if isinstance(e, StateSnapshotEvent)]
    assert snapshot.snapshot == {"activeToolsets": ["bank"], "awaitingApproval": [call_id]}
    end = finished(events)
    assert end.outcome is not None and end.outcome.type == "interrupt"
    [interrupt] = end.outcome.interrupts
    assert interrupt.id == call_id
    assert interrupt.tool_call_id == call_id
    assert interrupt.reason == "tool_call"
    assert interrupt.message == "Approve the call of tool 'bank_wire'?"
    assert interrupt.response_schema is not None
    assert interrupt.response_schema["required"] == ["approved"]
    assert end.usage is not None and end.usage[0].total_tokens > 0
    assert RUNS == []


async def test_approve_runs_the_call_and_streams_the_rest(served: Served) -> None:
    """The resumed run sends the call's result against the original id (no
    second START), then the model's answer; usage counts this run's model calls."""
    thread = Thread(served, "t-approve")
    await pay(thread)
    [interrupt] = thread.interrupts
    events = await thread.resume(approve(interrupt.id))
    assert EventType.TOOL_CALL_START not in [e.type for e in events]
    assert results(events) == [(interrupt.tool_call_id, "sent 5")]
    assert text_of(events) == "bank_wire returned: sent 5"
    end = finished(events)
    assert end.outcome is not None and end.outcome.type == "success"
    assert end.usage is not None
    answer_tokens = -(-len("bank_wire returned: sent 5") // 4)
    assert end.usage[0].output_tokens == answer_tokens, "only the model call of this run"
    assert thread.interrupts == []
    assert RUNS == ["wire 5"]
    stored = await history(served, "t-approve")
    assert [m["role"] for m in stored[-4:]] == ["user", "assistant", "tool", "assistant"]
    assert stored[-2]["content"] == "sent 5"


async def test_deny_gives_the_model_the_reason(served: Served) -> None:
    thread = Thread(served, "t-deny")
    await pay(thread)
    [interrupt] = thread.interrupts
    events = await thread.resume(deny(interrupt.id, "too much"))
    assert results(events) == [(interrupt.tool_call_id, "denied: too much")]
    assert text_of(events) == "bank_wire returned: denied: too much"
    assert finished(events).outcome.type == "success"  # type: ignore[union-attr]
    assert RUNS == []


async def test_cancelled_denies(served: Served) -> None:
    """An abandoned interrupt (status ``cancelled``) denies its call; any payload
    sent with it is ignored."""
    thread = Thread(served, "t-cancel")
    await pay(thread)
    [interrupt] = thread.interrupts
    entry = ResumeEntry(interrupt_id=interrupt.id, status="cancelled", payload={"approved": True})
    events = await thread.resume(entry)
    assert results(events) == [(interrupt.tool_call_id, "denied: the user cancelled")]
    assert RUNS == []


async def test_several_calls_each_decided(served: Served) -> None:
    """Three calls at once: the one needing no approval runs in the first run;
    the other two are two interrupts; answering both runs the approved one."""
    thread = Thread(served, "t-several")
    await thread.say('call enable_toolset {"name": "bank"}')
    events = await thread.say("several")
    assert [content for _, content in results(events)] == ["100"]
    first, second = thread.interrupts
    assert RUNS == ["balance"]
    events = await thread.resume(deny(first.id, "no"), approve(second.id))
    assert results(events) == [(first.id, "denied: no"), (second.id, "sent 2")]
    assert text_of(events) == (
        "bank_balance returned: 100\nbank_wire returned: denied: no\nbank_wire returned: sent 2"
    )
    assert finished(events).outcome.type == "success"  # type: ignore[union-attr]
    assert RUNS == ["balance", "wire 2"]
    assert_valid_history_json(await history(served, "t-several"))


async def test_a_partial_answer_interrupts_again_with_the_rest(served: Served) -> None:
    """Answering one of two: it is decided (a denial's result streams; an
    approved call waits for the other), and the run ends with the other's
    interrupt; answering that one finishes the turn."""
    thread = Thread(served, "t-partial")
    await thread.say('call enable_toolset {"name": "bank"}')
    await thread.say("several")
    first, second = thread.interrupts
    events = await thread.resume(approve(first.id))
    assert results(events) == []
    end = finished(events)
    assert end.outcome is not None and end.outcome.type == "interrupt"
    assert [i.id for i in end.outcome.interrupts] == [second.id]
    assert RUNS == ["balance"], "an approved call runs once every call is decided"
    events = await thread.resume(deny(second.id))
    assert results(events) == [(second.id, "denied"), (first.id, "sent 1")]
    assert finished(events).outcome.type == "success"  # type: ignore[union-attr]
    assert RUNS == ["balance", "wire 1"]


async def test_a_decision_survives_a_restart(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Pause, stop the server and close the storage, start again on the same
    file: the next run's answer is taken and the turn finishes."""
    database = tmp_path / "agentik.db"
    async with serving(nursery, database) as first:
        thread = Thread(first, "t-restart")
        await pay(thread, 7)
    assert RUNS == []
    async with serving(nursery, database) as second:
        thread.served = second
        [interrupt] = thread.interrupts
        events = await thread.resume(approve(interrupt.id))
        assert results(events) == [(interrupt.id, "sent 7")]
        assert finished(events).outcome.type == "success"  # type: ignore[union-attr]
        assert_valid_history_json(await history(second, "t-restart"))
    assert RUNS == ["wire 7"]


async def test_another_owner_cannot_decide(nursery: trio.Nursery, tmp_path: Path) -> None:
    """bob's run on alice's thread id is bob's own thread: alice's call is not
    waiting there, and the answer is the one for a call that never existed."""
    async with serving(nursery, tmp_path / "owners.db", owners=True) as served:
        alice = Thread(served, "shared", owner="alice")
        await pay(alice)
        [interrupt] = alice.interrupts
        bob = Thread(served, "shared", owner="bob", messages=list(alice.messages))
        error = run_error(await bob.resume(approve(interrupt.id)))
        ghost = Thread(served, "shared", owner="bob")
        never = run_error(await ghost.resume(approve("call_that_never_was")))
        assert error.code == never.code == "not_waiting"
        assert error.message == (
            f"call {interrupt.id!r} is not waiting for approval in conversation 'shared'"
        )
        assert never.message == (
            "call 'call_that_never_was' is not waiting for approval in conversation 'shared'"
        )
        assert RUNS == []
        events = await alice.resume(approve(interrupt.id))
        assert results(events) == [(interrupt.id, "sent 5")]
        assert RUNS == ["wire 5"]


async def test_a_new_message_while_calls_wait_is_refused(served: Served) -> None:
    """Without ``resume``, a run on a thread whose calls wait is a RUN_ERROR
    (AG-UI: omitting an interrupt is not abandoning it); nothing is stored."""
    thread = Thread(served, "t-refused")
    await pay(thread)
    before = await history(served, "t-refused")
    [interrupt] = thread.interrupts
    error = run_error(await thread.say("never mind"))
    assert error.code == "awaiting_approval"
    assert error.message == (
        f"tool calls wait for a decision: {interrupt.id!r}; answer each in 'resume'"
        " (status 'cancelled' denies it)"
    )
    assert await history(served, "t-refused") == before
    thread.messages.pop()  # the refused message (@ag-ui/client would not even send it)
    events = await thread.resume(approve(interrupt.id))
    assert results(events) == [(interrupt.id, "sent 5")]


async def test_answers_and_a_new_message_in_one_run(served: Served) -> None:
    """A user message after the interrupted calls is sent once they are decided:
    one run streams the turn going on, then the new turn."""
    thread = Thread(served, "t-both")
    await pay(thread)
    [interrupt] = thread.interrupts
    events = await thread.resume(approve(interrupt.id), then="thanks")
    assert results(events) == [(interrupt.id, "sent 5")]
    assert text_of(events) == "bank_wire returned: sent 5You said: thanks"
    starts = [e for e in events if e.type == EventType.TEXT_MESSAGE_START]
    assert len(starts) == 2, "two answers, two messages"
    assert finished(events).outcome.type == "success"  # type: ignore[union-attr]
    stored = await history(served, "t-both")
    assert [m["content"] for m in stored[-2:]] == ["thanks", "You said: thanks"]


async def test_a_new_message_must_come_with_every_answer(served: Served) -> None:
    thread = Thread(served, "t-uncovered")
    await thread.say('call enable_toolset {"name": "bank"}')
    await thread.say("several")
    first, second = thread.interrupts
    before = await history(served, "t-uncovered")
    error = run_error(await thread.resume(approve(first.id), then="and now?"))
    assert error.code == "awaiting_approval"
    assert repr(second.id) in error.message
    assert await history(served, "t-uncovered") == before
    assert RUNS == ["balance"]


async def test_the_same_answer_again_is_safe(served: Served) -> None:
    """A retried resume (the client lost the first reply): nothing runs twice;
    the run reports the turn as it ended."""
    thread = Thread(served, "t-replay")
    await pay(thread)
    [interrupt] = thread.interrupts
    first = await thread.resume(approve(interrupt.id))
    again = await thread.resume(approve(interrupt.id))
    assert results(again) == results(first) == [(interrupt.id, "sent 5")]
    assert text_of(again) == text_of(first)
    assert finished(again).outcome.type == "success"  # type: ignore[union-attr]
    assert RUNS == ["wire 5"]
    error = run_error(await thread.resume(deny(interrupt.id)))
    assert error.code == "already_decided"
    assert error.message == f"call {interrupt.id!r} was already approved"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"status": "resolved", "payload": {"approve": True}},
            "resume[0].payload: field 'approve' is not allowed (expected 'approved', 'reason')",
        ),
        (
            {"status": "resolved", "payload": {"approved": "yes"}},
            "resume[0].payload: field 'approved' must be a boolean, got a string",
        ),
        (
            {"status": "resolved"},
            "resume[0].payload: a resolved interrupt needs a payload"
            ' {"approved": true|false, "reason"?: string}',
        ),
        (
            {"status": "resolved", "payload": {"approved": False, "reason": 3}},
            "resume[0].payload: field 'reason' must be a string, got a number",
        ),
        (
            {"status": "resolved", "payload": {"approved": True, "editedArgs": {}}},
            "resume[0].payload: field 'editedArgs' is not allowed (expected 'approved', 'reason')",
        ),
    ],
)
async def test_a_bad_answer_is_a_run_error_and_changes_nothing(
    served: Served, entry: dict[str, Any], message: str
) -> None:
    thread = Thread(served, "t-bad")
    await pay(thread)
    [interrupt] = thread.interrupts
    body = thread.body()
    body["resume"] = [{"interruptId": interrupt.id, **entry}]
    error = run_error(await thread.post(body))
    assert error.code == "invalid_decision"
    assert error.message == message
    assert RUNS == []
    events = await thread.resume(approve(interrupt.id))
    assert results(events) == [(interrupt.id, "sent 5")], "the call still waited"


async def test_a_malformed_resume_is_422(served: Served) -> None:
    """What the AG-UI schema itself refuses is refused before the run, as any
    malformed input."""
    thread = Thread(served, "t-422")
    body = thread.body()
    for resume, message in [
        ("x", "field 'resume' must be an array, got a string"),
        ([{"status": "resolved"}], "field 'resume[0].interruptId' is required"),
        (
            [{"interruptId": "c", "status": "done"}],
            "field 'resume[0].status' must be 'resolved' or 'cancelled', got 'done'",
        ),
    ]:
        async with served.client() as client:
            response = await client.post("/agui", json={**body, "resume": resume})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["message"] == message


def assert_valid_history_json(messages: list[dict[str, Any]]) -> None:
    """The stored history, as the native API shows it, is valid for the model."""
    assert_valid_history([converter.structure(m, Message) for m in messages])


async def test_a_client_that_leaves_loses_nothing(served: Served) -> None:
    """A client that leaves mid-run (here once the call has run) does not stop
    the turn; its retried resume runs nothing again and replays the result."""
    thread = Thread(served, "t-leave")
    await pay(thread)
    [interrupt] = thread.interrupts
    body = thread.body([approve(interrupt.id)])
    async with served.client() as client, client.stream("POST", "/agui", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:") and json.loads(line[5:])["type"] == "TOOL_CALL_RESULT":
                break  # leave: the connection closes here
    again = await thread.resume(approve(interrupt.id))
    assert results(again) == [(interrupt.id, "sent 5")]
    assert text_of(again) == "bank_wire returned: sent 5"
    assert RUNS == ["wire 5"]
    assert_valid_history_json(await history(served, "t-leave"))


async def test_the_turn_log_speaks_the_same_words(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """One line per run that answers, in the turn log's vocabulary."""
    thread = Thread(served, "t-log")
    await pay(thread)
    [interrupt] = thread.interrupts
    caplog.set_level(logging.INFO, logger="agentik.server")
    await thread.say("hello?")
    thread.messages.pop()
    await thread.resume(ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload=1))
    await thread.resume(approve(interrupt.id))
    await thread.resume(deny(interrupt.id))
    outcomes = [
        m.split("outcome=")[1].split()[0]
        for m in caplog.messages
        if m.startswith("turn transport=agui conversation=t-log")
    ]
    assert outcomes == [
        "refused:awaiting_approval",
        "refused:invalid_decision",
        "finished",
        "refused:already_decided",
    ]


ODD_PAYLOADS: list[Any] = [
    0,
    True,
    "approve",
    [],
    [{"approved": True}],
    {},
    {"reason": "no"},
    {"approved": None},
    {"approved": 1},
    {"approved": "true"},
    {"approved": True, "reason": None},
    {"approved": True, "reason": ["x"]},
    {"approved": True, "APPROVED": True},
    {"approved": {"approved": True}},
    {"approved": True, "x": {"y": [1, 2, {"z": None}]}},
]


async def test_no_payload_gets_past_the_schema(served: Served) -> None:
    """Odd payloads over HTTP, one after another on the same waiting call:
    each a 200 stream ending in RUN_ERROR ``invalid_decision``, never a 5xx,
    and the call waits on (the approval at the end runs it once)."""
    thread = Thread(served, "t-odd")
    await pay(thread)
    [interrupt] = thread.interrupts
    for payload in ODD_PAYLOADS:
        body = thread.body()
        body["resume"] = [{"interruptId": interrupt.id, "status": "resolved", "payload": payload}]
        error = run_error(await thread.post(body))
        assert error.code == "invalid_decision", payload
        assert error.message.startswith("resume[0].payload: "), error.message
    assert RUNS == []
    events = await thread.resume(approve(interrupt.id, "ok"))
    assert results(events) == [(interrupt.id, "sent 5")]
    assert RUNS == ["wire 5"]


async def test_a_call_with_invalid_arguments_is_never_an_interrupt(served: Served) -> None:
    """A wire of ``"lots"`` gets the schema's error as its result in the same
    run, which finishes with outcome success: no interrupt, nothing waiting."""
    thread = Thread(served, "t-invalid")
    await thread.say('call enable_toolset {"name": "bank"}')
    events = await thread.say('call bank_wire {"amount": "lots"}')
    end = finished(events)
    assert end.outcome is not None and end.outcome.type == "success"
    assert thread.interrupts == []
    [(call_id, content)] = results(events)
    assert content == (
        "error: invalid arguments for tool 'bank_wire': field 'amount' must be an integer,"
        ' got a string "lots"'
    )
    [snapshot] = [e for e in events if isinstance(e, StateSnapshotEvent)]
    assert snapshot.snapshot == {"activeToolsets": ["bank"]}
    assert RUNS == []
    stored = await history(served, "t-invalid")
    assert [m["tool_call_id"] for m in stored if m["role"] == "tool"][-1] == call_id
