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
from collections.abc import Sequence
from typing import Literal

import attrs

from agentik._json import JsonObject, JsonValue
from agentik.server.http import HttpError, as_list, as_object, check_id, field_str, kind_of
from agentik.toolsets import compile_schema

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
    output_schema: JsonObject | None = None
    """A typed turn: ``forwardedProps.outputSchema``, the JSON Schema the answer
    must match (the run's ``result`` and final state then carry it)."""

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
    schema = _output_schema(obj.get("forwardedProps"))
    if resume:
        text, message_id = _new_text_after(messages, {e.interrupt_id for e in resume})
        return RunInput(thread_id, run_id, text, parent, resume, message_id, schema)
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
        output_schema=schema,
    )


def _output_schema(props: JsonValue) -> JsonObject | None:
    """``forwardedProps.outputSchema``: a usable JSON Schema, None, or 422."""
    if not isinstance(props, dict) or props.get("outputSchema") is None:
        return None
    schema = props["outputSchema"]
    if not isinstance(schema, dict):
        raise _invalid("field 'forwardedProps.outputSchema' must be an object")
    try:
        compile_schema(schema)
    except ValueError as error:
        raise _invalid(f"field 'forwardedProps.outputSchema' is not usable: {error}") from None
    return schema


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
