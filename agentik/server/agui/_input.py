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

import base64
import binascii
import hashlib
from collections.abc import Sequence
from typing import Literal

import attrs

from agentik._json import JsonObject, JsonValue
from agentik._parts import FilePart, ImagePart, InvalidPart, Part
from agentik.server._content import check_sizes
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
    parts: tuple[Part, ...] = ()
    """The new message's images and files (``binary``, ``image``, ``document``)."""

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


def _user_content(
    message: JsonObject, where: str, max_part_bytes: int | None
) -> tuple[str, tuple[Part, ...]]:
    """A user message's text (its text parts, joined) and its images and
    files: ``binary`` parts (``mimeType`` with ``data`` or ``url``), and
    ``image`` and ``document`` parts with a ``data`` or ``url`` source."""
    content = message.get("content")
    parts: list[Part] = []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        pieces = []
        for i, part in enumerate(content):
            at = f"{where}.content[{i}]"
            part_obj = as_object(part, at)
            kind = part_obj.get("type")
            if kind == "text":
                pieces.append(field_str(part_obj, "text", where=f"{at}.", non_empty=False))
            elif kind in ("binary", "image", "document"):
                parts.append(_content_part(part_obj, at))
            else:
                raise _invalid(
                    f"field '{at}.type' must be 'text', 'binary', 'image' or 'document',"
                    f" got {kind!r}"
                )
        text = "".join(pieces)
    else:
        raise _invalid(f"field '{where}.content' must be a string or an array of parts")
    if not text.strip() and not parts:
        raise _invalid(f"field '{where}.content' must contain text, an image or a file")
    if max_part_bytes is not None:
        check_sizes(parts, max_part_bytes, f"field '{where}.content' (images and files)")
    return text, tuple(parts)


def _content_part(part: JsonObject, at: str) -> Part:
    """One image or file part as an ``ImagePart`` (an ``image`` part, or an
    ``image/…`` mimeType) or a ``FilePart``."""
    filename = part.get("filename")
    if filename is not None and not isinstance(filename, str):
        raise _invalid(f"field '{at}.filename' must be a string")
    media: str | None
    if part["type"] == "binary":
        mime = field_str(part, "mimeType", where=f"{at}.")
        media = mime
        data, url = part.get("data"), part.get("url")
        if data is None and url is None:
            raise _invalid(f"field '{at}' needs data or url (an id alone is not supported)")
        image = mime.startswith("image/")
    else:
        source = as_object(part.get("source"), f"{at}.source")
        kind = source.get("type")
        if kind not in ("data", "url"):
            raise _invalid(f"field '{at}.source.type' must be 'data' or 'url', got {kind!r}")
        # Empty data is a file of no bytes; an empty url names nothing.
        value = field_str(source, "value", where=f"{at}.source.", non_empty=kind == "url")
        data, url = (value, None) if kind == "data" else (None, value)
        raw_media = source.get("mimeType")
        if raw_media is not None and not isinstance(raw_media, str):
            raise _invalid(f"field '{at}.source.mimeType' must be a string")
        media = raw_media or None
        image = part["type"] == "image"
    if data is not None and not isinstance(data, str):
        raise _invalid(f"field '{at}' data must be base64 text")
    if url is not None and not isinstance(url, str):
        raise _invalid(f"field '{at}' url must be a string")
    try:
        raw = None if data is None else base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"field '{at}' data must be base64 text") from None
    try:
        if image:
            return ImagePart(url=url, data=raw, media_type=media)
        return FilePart(url=url, data=raw, media_type=media, filename=filename)
    except InvalidPart as error:
        raise _invalid(f"field '{at}': {error}") from None


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


def _new_text_after(
    messages: list[JsonValue], answered: set[str], max_part_bytes: int | None
) -> tuple[str | None, str | None, tuple[Part, ...]]:
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
                return None, None, ()
            text, parts = _user_content(final, f"messages[{last}]", max_part_bytes)
            return text, field_str(final, "id"), parts
    return None, None, ()


def parse_run_input(body: JsonValue, max_part_bytes: int | None = None) -> RunInput:
    """Validate a RunAgentInput. Without ``resume``, the last message must be
    the user's new one; with it, a new message is optional (``_new_text_after``).
    An image or file of the new message past ``max_part_bytes`` is 413."""
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
        answered = {e.interrupt_id for e in resume}
        text, message_id, parts = _new_text_after(messages, answered, max_part_bytes)
        return RunInput(thread_id, run_id, text, parent, resume, message_id, schema, parts)
    if not messages:
        raise _invalid("field 'messages' must end with a user message, got an empty array")
    last = as_object(messages[-1])
    if last.get("role") != "user":
        raise _invalid(
            f"field 'messages[{len(messages) - 1}].role' must be 'user' (the new message),"
            f" got {last.get('role')!r}"
        )
    text, parts = _user_content(last, f"messages[{len(messages) - 1}]", max_part_bytes)
    return RunInput(
        thread_id=thread_id,
        run_id=run_id,
        text=text,
        parent_run_id=parent,
        message_id=field_str(last, "id"),
        output_schema=schema,
        parts=parts,
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
