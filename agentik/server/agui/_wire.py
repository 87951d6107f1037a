"""AG-UI 1.0 wire format: ``RunAgentInput`` in, protocol events out.

Pure translation (sans-I/O, like h11): ``parse_run_input`` validates the
request, ``decisions_of`` reads its answers to interrupts, and an ``AguiRun``
turns the agent's turn events into AG-UI event objects in the order the
client's ``verifyEvents`` accepts: RUN_STARTED first; text and tool-call
blocks opened, fed and closed with matching ids; every block closed before
STATE_SNAPSHOT and RUN_FINISHED; nothing after RUN_ERROR. Optional fields are
left out, never null. The run's bookkeeping (which ids are open) lives for one
request only; the conversation itself, history included, lives in the agent
and its store.

Approvals use AG-UI's interrupts: a turn that pauses ends its run with
``RUN_FINISHED`` whose outcome is ``interrupt``, one interrupt per waiting
call (its id is the call's id, so nothing maps ids between runs), and the
next run answers them in ``resume``. A run may carry several turns (the
decided turn going on, then a new message's turn): ``finish`` ends it once.

A question a running tool asks (MCP elicitation) does not end the run: the
call waits inside it. It becomes a ``CUSTOM`` event named
``agentik.elicitation`` (``value``: ``id``, ``source``, ``message``,
``requestedSchema``), answered through the native route ``POST
/agentik/conversations/{threadId}/elicitations/{id}``; the run then goes on.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from typing import Literal

import attrs

from agentik._json import JsonObject, JsonValue
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.agent import (
    ElicitationAsked,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFinished,
    TurnResult,
)
from agentik.models import TextDelta, ToolCallDelta
from agentik.server.http import HttpError, as_list, as_object, check_id, field_str, kind_of

PROTOCOL_VERSION = "1.0"


CANCELLED_REASON = "the user cancelled"
"""The denial reason of an interrupt answered with status ``cancelled``."""

RESPONSE_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reason": {"type": "string", "description": "Why; a denied call's result says it."},
    },
    "required": ["approved"],
    "additionalProperties": False,
}
"""What a resolved interrupt's ``payload`` must be (sent as its ``responseSchema``)."""

_PAYLOAD_FIELDS = ("approved", "reason")


@attrs.frozen
class ResumeEntry:
    """One answer to an interrupt, as the client sent it (checked for shape only)."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: JsonValue = None


@attrs.frozen
class RunInput:
    """What agentik takes from a RunAgentInput: the thread, the run, the new
    user text (None when a resuming run brings none), and the answers.

    History comes from the store, so earlier messages the client sends are
    only checked for shape, not replayed."""

    thread_id: str
    run_id: str
    text: str | None
    parent_run_id: str | None = None
    resume: tuple[ResumeEntry, ...] = ()
    message_id: str | None = None
    """The new user message's id (with ``text``)."""

    @property
    def turn_key(self) -> str | None:
        """The idempotency key of the new message's turn (``turn_key``)."""
        if self.text is None or self.message_id is None:
            return None
        return turn_key(self.run_id, self.message_id)


def run_ids(run: RunInput) -> str:
    """What the ids of a run's messages start with (``AguiRun.ids``): made
    from the run (and its new message), so the run sent again names its
    messages as the first did."""
    key = run.turn_key
    if key is not None:
        return key
    digest = hashlib.sha256(f"{run.run_id}\x1fresume".encode()).hexdigest()
    return f"agui.{digest[:32]}"


def turn_key(run_id: str, message_id: str) -> str:
    """The idempotency key of the turn a run's new user message starts: the
    run id and the message id, hashed (any length in, a short key out; the
    ``agui.`` prefix keeps it apart from A2A task ids and native keys). The
    store keys it per conversation, so it is scoped to the thread and its
    owner: the run sent again (a client that got no answer retries) is the
    same turn, answered with its first result, never run twice."""
    digest = hashlib.sha256(f"{run_id}\x1f{message_id}".encode()).hexdigest()
    return f"agui.{digest[:32]}"


@attrs.frozen
class Decision:
    """An answer read as ``ChatAgent.decide`` takes it."""

    call_id: str
    approve: bool
    reason: str = ""


class AguiRunError(Exception):
    """Input the AG-UI schema allows but agentik cannot act on: a RUN_ERROR."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


ELICITATION_EVENT = "agentik.elicitation"
"""The CUSTOM event's name for a question a running tool asks the person."""


def _invalid(message: str) -> HttpError:
    return HttpError(422, message, code="invalid_field")


def _user_text(message: JsonObject, where: str) -> str:
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        pieces = []
        for i, part in enumerate(content):
            part_obj = as_object(part, f"{where}.content[{i}]")
            if part_obj.get("type") == "text":
                pieces.append(
                    field_str(part_obj, "text", where=f"{where}.content[{i}].", non_empty=False)
                )
        text = "".join(pieces)
    else:
        raise _invalid(f"field '{where}.content' must be a string or an array of parts")
    if not text.strip():
        raise _invalid(f"field '{where}.content' must contain text")
    return text


def _resume_entries(value: JsonValue) -> tuple[ResumeEntry, ...]:
    entries = []
    for i, item in enumerate(as_list(value, "field 'resume'")):
        where = f"resume[{i}]."
        entry = as_object(item, f"field 'resume[{i}]'")
        interrupt_id = field_str(entry, "interruptId", where=where)
        status = entry.get("status")
        if status == "resolved":
            entries.append(ResumeEntry(interrupt_id, "resolved", entry.get("payload")))
        elif status == "cancelled":
            entries.append(ResumeEntry(interrupt_id, "cancelled", entry.get("payload")))
        elif "status" not in entry:
            raise _invalid(f"field '{where}status' is required")
        else:
            raise _invalid(
                f"field '{where}status' must be 'resolved' or 'cancelled', got {status!r}"
            )
    return tuple(entries)


def _call_ids(message: JsonObject) -> set[str]:
    """The ids of an assistant message's ``toolCalls`` (malformed ones ignored:
    earlier messages are not used, only looked through)."""
    calls = message.get("toolCalls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return set()
    ids = set()
    for call in calls:
        call_id = call.get("id") if isinstance(call, dict) else None
        if isinstance(call_id, str):
            ids.add(call_id)
    return ids


def _new_text_after(messages: list[JsonValue], answered: set[str]) -> tuple[str | None, str | None]:
    """A resuming run's new user message (its text and id): the last message,
    if it is the user's and comes after the assistant message carrying an
    answered call (where the client's history puts a message typed after the
    interrupt)."""
    last = len(messages) - 1
    for i in range(last - 1, -1, -1):
        message = messages[i]
        if isinstance(message, dict) and _call_ids(message) & answered:
            final = as_object(messages[last])
            if final.get("role") != "user":
                return None, None
            return _user_text(final, f"messages[{last}]"), field_str(final, "id")
    return None, None


def parse_run_input(body: JsonValue) -> RunInput:
    """Validate a RunAgentInput. Without ``resume``, the last message must be
    the user's new one; with it, a new message is optional (``_new_text_after``)."""
    obj = as_object(body)
    thread_id = check_id(field_str(obj, "threadId"), "field 'threadId'")
    run_id = field_str(obj, "runId")
    messages = as_list(obj.get("messages"), "field 'messages'") if "messages" in obj else None
    if messages is None:
        raise _invalid("field 'messages' is required")
    version = obj.get("protocolVersion")
    if version is not None and (not isinstance(version, str) or version.split(".")[0] != "1"):
        raise _invalid(f"field 'protocolVersion' must be '{PROTOCOL_VERSION}', got {version!r}")
    parent = obj.get("parentRunId")
    if parent is not None and not isinstance(parent, str):
        raise _invalid("field 'parentRunId' must be a string")
    for i, message in enumerate(messages):
        message_obj = as_object(message, f"field 'messages[{i}]'")
        field_str(message_obj, "id", where=f"messages[{i}].")
        field_str(message_obj, "role", where=f"messages[{i}].")
    resume = _resume_entries(obj["resume"]) if obj.get("resume") is not None else ()
    if resume:
        text, message_id = _new_text_after(messages, {e.interrupt_id for e in resume})
        return RunInput(thread_id, run_id, text, parent, resume, message_id)
    if not messages:
        raise _invalid("field 'messages' must end with a user message, got an empty array")
    last = as_object(messages[-1])
    if last.get("role") != "user":
        raise _invalid(
            f"field 'messages[{len(messages) - 1}].role' must be 'user' (the new message),"
            f" got {last.get('role')!r}"
        )
    text = _user_text(last, f"messages[{len(messages) - 1}]")
    return RunInput(
        thread_id=thread_id,
        run_id=run_id,
        text=text,
        parent_run_id=parent,
        message_id=field_str(last, "id"),
    )


def decision_of(entry: ResumeEntry, index: int = 0) -> Decision:
    """The decision an answer carries; ``AguiRunError`` (``invalid_decision``)
    when its payload is not one ``RESPONSE_SCHEMA`` allows. ``cancelled``
    denies, whatever the payload."""
    if entry.status == "cancelled":
        return Decision(entry.interrupt_id, False, CANCELLED_REASON)
    where = f"resume[{index}].payload"
    payload = entry.payload
    if payload is None:
        raise AguiRunError(
            f'{where}: a resolved interrupt needs a payload {{"approved": true|false,'
            ' "reason"?: string}',
            "invalid_decision",
        )
    if not isinstance(payload, dict):
        raise AguiRunError(
            f"{where}: must be an object, got {kind_of(payload)}", "invalid_decision"
        )
    for key in payload:
        if key not in _PAYLOAD_FIELDS:
            raise AguiRunError(
                f"{where}: field {key!r} is not allowed (expected 'approved', 'reason')",
                "invalid_decision",
            )
    approved = payload.get("approved")
    if not isinstance(approved, bool):
        got = "missing" if "approved" not in payload else f"got {kind_of(approved)}"
        raise AguiRunError(
            f"{where}: field 'approved' must be a boolean, {got}", "invalid_decision"
        )
    reason = payload.get("reason", "")
    if not isinstance(reason, str):
        raise AguiRunError(
            f"{where}: field 'reason' must be a string, got {kind_of(reason)}", "invalid_decision"
        )
    return Decision(entry.interrupt_id, approved, reason)


def decisions_of(entries: Sequence[ResumeEntry]) -> list[Decision]:
    """Every answer's decision, all checked before any is taken; an interrupt
    answered twice is refused too."""
    decisions = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if entry.interrupt_id in seen:
            raise AguiRunError(
                f"resume[{i}]: interrupt {entry.interrupt_id!r} is answered twice",
                "invalid_decision",
            )
        seen.add(entry.interrupt_id)
        decisions.append(decision_of(entry, i))
    return decisions


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
        return [
            *events,
            {"type": "STATE_SNAPSHOT", "snapshot": state},
            {
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
            },
        ]

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
