"""AG-UI 1.0 events out: an ``AguiRun`` turns the agent's turn events into
AG-UI event objects in the order the client's ``verifyEvents`` accepts.

RUN_STARTED first; text and tool-call blocks opened, fed and closed with
matching ids; every block closed before STATE_SNAPSHOT and RUN_FINISHED;
nothing after RUN_ERROR. Optional fields are left out, never null. A turn
that pauses ends its run with ``RUN_FINISHED`` whose outcome is
``interrupt``, one interrupt per waiting call (its id is the call's id); a
tool's question is a ``CUSTOM`` event (``ELICITATION_EVENT``). The run's
bookkeeping (which ids are open) lives for one request only (``_input`` has
the request side and the module docstring of the whole wire format).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

import attrs

from agentik._json import JsonObject, JsonValue
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik._serde import converter
from agentik.agent import (
    ElicitationAsked,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFinished,
    TurnResult,
)
from agentik.models import TextDelta, ToolCallDelta
from agentik.server.agui._input import ELICITATION_EVENT, PROTOCOL_VERSION, RESPONSE_SCHEMA


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _run_usage(result: TurnResult, known: frozenset[str]) -> TokenUsage:
    """The tokens this run's model calls used for ``result``'s turn: all of
    them for a turn begun here; for a turn going on after a decision, only the
    answers after the message with the decided calls (AG-UI: usage does not
    carry across the pause, the earlier run reported its own)."""
    messages = result.messages
    for i, message in enumerate(messages):
        if any(call.id in known for call in message.tool_calls):
            usage = TokenUsage()
            for later in messages[i + 1 :]:
                if later.usage is not None:
                    usage += later.usage
            return usage
    return result.usage


def _turn_key(result: TurnResult) -> int:
    """One key per turn (its user message's seq), so a turn reported twice in a
    run (a decision that left others waiting, then the last one) counts once."""
    first = result.messages[0] if result.messages else None
    return -1 if first is None or first.seq is None else first.seq


@attrs.define
class AguiRun:
    """Translates one run's turn events into AG-UI events (camelCase dicts).

    ``known_calls``: calls the client already has from an earlier run (the
    ones waiting for a decision): never started again, only given results."""

    thread_id: str
    run_id: str
    model_name: str = "agentik"
    known_calls: frozenset[str] = frozenset()
    ids: str = attrs.field(factory=lambda: _new_id("run"))
    """What the ids of the messages this run sends start with: the same for
    the run sent again (``run_ids``), so its replay names them the same."""
    _ids_made: int = 0
    _text_id: str | None = None
    _assistant_id: str | None = None
    """The assistant message the open tool calls belong to."""
    _calls_by_index: dict[int, str] = attrs.field(factory=dict)
    _open_calls: list[str] = attrs.field(factory=list)
    _started_calls: set[str] = attrs.field(factory=set)
    _after_results: bool = False
    """A tool result was sent: the next streamed piece starts a new assistant message."""
    _ended: bool = False
    _last: TurnFinished | None = None
    """The last turn that finished in this run: ``finish`` reports it."""
    _usage: dict[int, TokenUsage] = attrs.field(factory=dict)

    def __attrs_post_init__(self) -> None:
        self._started_calls.update(self.known_calls)

    @property
    def ended(self) -> bool:
        """RUN_FINISHED or RUN_ERROR was sent: nothing more follows."""
        return self._ended

    @property
    def result(self) -> TurnResult | None:
        """The result of the last turn that finished in this run."""
        return None if self._last is None else self._last.result

    def start(self, parent_run_id: str | None = None) -> list[JsonObject]:
        event: JsonObject = {
            "type": "RUN_STARTED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "protocolVersion": PROTOCOL_VERSION,
        }
        if parent_run_id is not None:
            event["parentRunId"] = parent_run_id
        return [event]

    def translate(self, event: TurnEvent) -> list[JsonObject]:
        if self._ended:
            return []
        if isinstance(event, TextDelta | ToolCallDelta) and self._after_results:
            self._after_results = False
            self._assistant_id = None
            self._calls_by_index.clear()
        if isinstance(event, TextDelta):
            return self._text(event.text)
        if isinstance(event, ToolCallDelta):
            return self._call_delta(event)
        if isinstance(event, ToolCallStarted):
            return self._call_started(event)
        if isinstance(event, ToolCallFinished):
            result: JsonObject = {
                "type": "TOOL_CALL_RESULT",
                "messageId": self._next_id("tool"),
                "toolCallId": event.call.id,
                "content": event.content,
                "role": "tool",
            }
            self._after_results = True
            return [*self._close_all(), result]
        if isinstance(event, ElicitationAsked):
            # The run stays open (the call waits in it): not an interrupt, which
            # ends a run, but a CUSTOM event; the answer goes to the native route.
            question = event.request
            custom: JsonObject = {
                "type": "CUSTOM",
                "name": ELICITATION_EVENT,
                "value": {
                    "id": question.id,
                    "source": question.source,
                    "message": question.message,
                    "requestedSchema": question.schema,
                    **({"url": question.url} if question.url is not None else {}),
                },
            }
            return [custom]
        if isinstance(event, TurnFinished):
            # The run may go on with another turn (a new message after the
            # decided one): the next text is a new assistant message.
            self._last = event
            self._usage[_turn_key(event.result)] = _run_usage(event.result, self.known_calls)
            self._after_results = True
            return self._close_all()
        return self.error(event.message, event.code)

    def replay(self, result: TurnResult, active_toolsets: Iterable[str]) -> list[JsonObject]:
        """A decided turn's result as events (a retried resume: nothing ran
        again): what followed the decided calls, then the result."""
        calls = {c.id: c for m in result.messages for c in m.tool_calls}
        out: list[JsonObject] = []
        for message in _after_known(result.messages, self.known_calls):
            for event in _events_of(message, calls):
                out += self.translate(event)
        return out + self.translate(TurnFinished(result, tuple(active_toolsets)))

    def replay_turn(self, finished: TurnFinished) -> list[JsonObject]:
        """A whole turn from its result, as the run that ran it streamed it: the
        run sent again, whose turn the agent answered from storage."""
        result = finished.result
        calls = {c.id: c for m in result.messages for c in m.tool_calls}
        out: list[JsonObject] = []
        for message in result.messages[1:]:
            for event in _events_of(message, calls):
                out += self.translate(event)
        return out + self.translate(finished)

    def finish(self) -> list[JsonObject]:
        """End the run: STATE_SNAPSHOT, then RUN_FINISHED (the interrupt outcome
        when the last turn waits for decisions); RUN_ERROR if no turn finished."""
        if self._ended:
            return []
        last = self._last
        if last is None:
            return self.error("the turn ended without a result", "turn_failed")
        self._ended = True
        result = last.result
        events = self._close_all()
        waiting = [a.call for a in result.approvals]
        for call in waiting:
            if call.id not in self._started_calls:
                events += self._call_started(ToolCallStarted(call))
        state: JsonObject = {"activeToolsets": list(last.active_toolsets)}
        outcome: JsonObject = {"type": "success"}
        if waiting:
            state["awaitingApproval"] = [call.id for call in waiting]
            outcome = {"type": "interrupt", "interrupts": [_interrupt(c) for c in waiting]}
        usage = TokenUsage()
        for turn_usage in self._usage.values():
            usage += turn_usage
        finished: JsonObject = {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": outcome,
            "usage": [
                {
                    "provider": "agentik",
                    "model": self.model_name,
                    "inputTokens": usage.prompt_tokens,
                    "outputTokens": usage.completion_tokens,
                    "totalTokens": usage.total_tokens,
                }
            ],
        }
        if result.output is not None:
            # A typed turn: its output is the run's result (what the client's
            # ``runAgent()`` returns) and part of the final state.
            output: JsonValue = converter.unstructure(result.output)
            state["output"] = finished["result"] = output
        return [*events, {"type": "STATE_SNAPSHOT", "snapshot": state}, finished]

    def error(self, message: str, code: str | None = None) -> list[JsonObject]:
        """Close what is open, then RUN_ERROR; nothing follows it."""
        if self._ended:
            return []
        events = self._close_all()
        error: JsonObject = {"type": "RUN_ERROR", "message": message}
        if code is not None:
            error["code"] = code
        self._ended = True
        return [*events, error]

    def _assistant(self) -> str:
        if self._assistant_id is None:
            self._assistant_id = self._next_id("msg")
        return self._assistant_id

    def _next_id(self, kind: str) -> str:
        self._ids_made += 1
        return f"{self.ids}.{kind}{self._ids_made}"

    def _text(self, delta: str) -> list[JsonObject]:
        events: list[JsonObject] = []
        if self._open_calls:
            events += self._close_calls()
        if not delta:
            return events
        if self._text_id is None:
            self._text_id = self._assistant()
            events.append(
                {"type": "TEXT_MESSAGE_START", "messageId": self._text_id, "role": "assistant"}
            )
        events.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": self._text_id, "delta": delta})
        return events

    def _open_call(self, call_id: str, name: str) -> list[JsonObject]:
        events = self._close_text()
        self._open_calls.append(call_id)
        self._started_calls.add(call_id)
        return [
            *events,
            {
                "type": "TOOL_CALL_START",
                "toolCallId": call_id,
                "toolCallName": name,
                "parentMessageId": self._assistant(),
            },
        ]

    def _call_delta(self, delta: ToolCallDelta) -> list[JsonObject]:
        events: list[JsonObject] = []
        call_id = self._calls_by_index.get(delta.index)
        if call_id is None:
            if delta.id is None or delta.name is None:
                return []  # a fragment before its call's first piece cannot be placed
            call_id = delta.id
            self._calls_by_index[delta.index] = call_id
            if call_id not in self._started_calls:
                events += self._open_call(call_id, delta.name)
        if delta.arguments and call_id in self._open_calls:
            events.append(
                {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": delta.arguments}
            )
        return events

    def _call_started(self, event: ToolCallStarted) -> list[JsonObject]:
        call = event.call
        if call.id in self._started_calls:
            return self._close_all()
        events = self._open_call(call.id, call.name)
        if call.arguments:
            events.append(
                {"type": "TOOL_CALL_ARGS", "toolCallId": call.id, "delta": call.arguments}
            )
        return events + self._close_all()

    def _close_text(self) -> list[JsonObject]:
        if self._text_id is None:
            return []
        event: JsonObject = {"type": "TEXT_MESSAGE_END", "messageId": self._text_id}
        self._text_id = None
        return [event]

    def _close_calls(self) -> list[JsonObject]:
        events: list[JsonObject] = [
            {"type": "TOOL_CALL_END", "toolCallId": c} for c in self._open_calls
        ]
        self._open_calls.clear()
        return events

    def _close_all(self) -> list[JsonObject]:
        return self._close_text() + self._close_calls()


def _interrupt(call: ToolCall) -> JsonObject:
    return {
        "id": call.id,
        "reason": "tool_call",
        "message": f"Approve the call of tool {call.name!r}?",
        "toolCallId": call.id,
        "responseSchema": RESPONSE_SCHEMA,
    }


def _after_known(messages: Sequence[Message], known: frozenset[str]) -> Sequence[Message]:
    """The messages after the one carrying the decided calls."""
    for i, message in enumerate(messages):
        if any(call.id in known for call in message.tool_calls):
            return messages[i + 1 :]
    return ()


def _events_of(message: Message, calls: dict[str, ToolCall]) -> list[TurnEvent]:
    """A stored message as the turn events that made it."""
    if message.role is Role.TOOL:
        call = calls.get(message.tool_call_id or "")
        return [] if call is None else [ToolCallFinished(call, message.content)]
    if message.role is not Role.ASSISTANT:
        return []
    events: list[TurnEvent] = [TextDelta(message.content)] if message.content else []
    events += [
        ToolCallDelta(index=i, arguments=c.arguments, id=c.id, name=c.name)
        for i, c in enumerate(message.tool_calls)
    ]
    return events
