"""AG-UI 1.0 wire format: ``RunAgentInput`` in, protocol events out.

Pure translation (sans-I/O, like h11): ``parse_run_input`` validates the
request, and an ``AguiRun`` turns the agent's turn events into AG-UI event
objects in the order the client's ``verifyEvents`` accepts: RUN_STARTED
first; text and tool-call blocks opened, fed and closed with matching ids;
every block closed before STATE_SNAPSHOT and RUN_FINISHED; nothing after
RUN_ERROR. Optional fields are left out, never null. The run's bookkeeping
(which ids are open) lives for one request only; the conversation itself,
history included, lives in the agent and its store.
"""

from __future__ import annotations

import uuid

import attrs

from agentik._json import JsonObject, JsonValue
from agentik.agent._events import (
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFinished,
)
from agentik.models import TextDelta, ToolCallDelta
from agentik.server._errors import HttpError
from agentik.server._native import check_id
from agentik.server._request import as_list, as_object, field_str

PROTOCOL_VERSION = "1.0"


@attrs.frozen
class RunInput:
    """What agentik takes from a RunAgentInput: the thread, the run, the new user text.

    History comes from the store, so earlier messages the client sends are
    only checked for shape, not replayed."""

    thread_id: str
    run_id: str
    text: str
    parent_run_id: str | None = None


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


def parse_run_input(body: JsonValue) -> RunInput:
    """Validate a RunAgentInput; the last message must be the user's new one."""
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
    if not messages:
        raise _invalid("field 'messages' must end with a user message, got an empty array")
    last = as_object(messages[-1])
    if last.get("role") != "user":
        raise _invalid(
            f"field 'messages[{len(messages) - 1}].role' must be 'user' (the new message),"
            f" got {last.get('role')!r}"
        )
    text = _user_text(last, f"messages[{len(messages) - 1}]")
    return RunInput(thread_id=thread_id, run_id=run_id, text=text, parent_run_id=parent)


def _new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


@attrs.define
class AguiRun:
    """Translates one run's turn events into AG-UI events (camelCase dicts)."""

    thread_id: str
    run_id: str
    model_name: str = "agentik"
    _text_id: str | None = None
    _assistant_id: str | None = None
    """The assistant message the open tool calls belong to."""
    _calls_by_index: dict[int, str] = attrs.field(factory=dict)
    _open_calls: list[str] = attrs.field(factory=list)
    _started_calls: set[str] = attrs.field(factory=set)
    _after_results: bool = False
    """A tool result was sent: the next streamed piece starts a new assistant message."""
    _ended: bool = False

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
                "messageId": _new_id("tool"),
                "toolCallId": event.call.id,
                "content": event.content,
                "role": "tool",
            }
            self._after_results = True
            return [*self._close_all(), result]
        if isinstance(event, TurnFinished):
            return self._finish(event)
        return self.error(event.message, event.code)

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
            self._assistant_id = _new_id("msg")
        return self._assistant_id

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

    def _finish(self, event: TurnFinished) -> list[JsonObject]:
        usage = event.result.usage
        self._ended = True
        return [
            *self._close_all(),
            {"type": "STATE_SNAPSHOT", "snapshot": {"activeToolsets": list(event.active_toolsets)}},
            {
                "type": "RUN_FINISHED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "outcome": {"type": "success"},
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
