"""The native API's wire format: turn requests and decisions in, turn results
and events out.

Pure translation, no I/O: JSON of agentik values comes from the one converter
in ``agentik._serde``; stream events become SSE frames named after their kind
(``text_delta``, ``tool_call_started`` …) whose data also carries ``type``.

A turn's JSON carries ``status`` (``finished`` | ``awaiting_approval``) and
``approvals``, the calls waiting for a decision as ``{call_id, name,
arguments}``: never the ``ApprovalRequest`` itself, whose conversation id is
the stored, owner-scoped one (``_owners``), not the id the client sent.
Questions a running tool asks (``elicitation_asked`` frames, ``GET
…/elicitations``) are ``{id, source, message, requested_schema}`` likewise.
"""

from __future__ import annotations

import attrs

from agentik._input import MAX_ID_LENGTH as MAX_ID_LENGTH
from agentik._json import JsonObject, JsonValue
from agentik._messages import Message
from agentik._parts import Part, TextPart
from agentik._serde import converter
from agentik.agent import (
    ApprovalRequest,
    ElicitationAction,
    ElicitationAsked,
    ElicitationRequest,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnFinished,
    TurnResult,
)
from agentik.models import TextDelta, ToolCallDelta
from agentik.server._content import parts_of_json
from agentik.server._settings import Limits
from agentik.server.http import (
    HttpError,
    as_list,
    as_object,
    check_id,
    field_bool,
    field_str,
    optional_str,
)
from agentik.toolsets import compile_schema

MAX_PART_BYTES = Limits().max_part_bytes

MAX_ARCHIVE_IDS = 1000
"""Notes one ``POST …/memory/archive`` may name."""
_MAX_ENTRY_ID = 2**63 - 1  # what SQLite's INTEGER holds


@attrs.frozen
class TurnRequest:
    """A validated ``POST …/turns`` body."""

    text: str
    idempotency_key: str | None = None
    output_schema: JsonObject | None = None
    """A typed turn: the JSON Schema the answer must match (``"output"`` in the answer)."""
    parts: tuple[Part, ...] = ()
    """Images and files (``"content"``: the text parts joined are ``text``)."""


@attrs.frozen
class DecisionRequest:
    """A validated ``POST …/approvals/{call_id}`` body."""

    approve: bool
    reason: str = ""


@attrs.frozen
class ArchiveRequest:
    """A validated ``POST …/memory/archive`` body: distinct note ids, in the order sent."""

    entry_ids: tuple[int, ...]


@attrs.frozen
class ElicitationAnswer:
    """A validated ``POST …/elicitations/{id}`` body."""

    action: ElicitationAction = "accept"
    content: JsonObject | None = None


ACTIONS: tuple[ElicitationAction, ...] = ("accept", "decline", "cancel")


def parse_turn_request(body: JsonValue, max_part_bytes: int = MAX_PART_BYTES) -> TurnRequest:
    """``{"text": …}`` or ``{"content": [parts]}``, with an optional
    ``idempotency_key`` and ``output_schema``; a part past ``max_part_bytes``
    is 413 (``part_too_large``)."""
    obj = as_object(body)
    unknown = sorted(set(obj) - {"text", "content", "idempotency_key", "output_schema"})
    if unknown:
        raise HttpError(422, f"unknown field '{unknown[0]}'", code="invalid_field")
    key = optional_str(obj, "idempotency_key")
    if key is not None:
        check_id(key, "field 'idempotency_key'")
    schema = obj.get("output_schema")
    if schema is not None:
        schema = as_object(schema, "field 'output_schema'")
        try:
            compile_schema(schema)
        except ValueError as error:  # refused before anything is stored
            raise HttpError(
                422, f"field 'output_schema' is not usable: {error}", code="invalid_field"
            ) from None
    if "content" not in obj:
        return TurnRequest(text=field_str(obj, "text"), idempotency_key=key, output_schema=schema)
    if "text" in obj:
        raise HttpError(422, "give field 'text' or field 'content', not both", code="invalid_field")
    parts = parts_of_json(obj["content"], max_part_bytes, "content")
    text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
    others = tuple(p for p in parts if not isinstance(p, TextPart))
    if not others and not text:
        raise HttpError(422, "field 'content' holds no text, image or file", code="invalid_field")
    return TurnRequest(text=text, idempotency_key=key, output_schema=schema, parts=others)


def parse_decision(body: JsonValue) -> DecisionRequest:
    """``{"approve": bool, "reason": str}``; ``reason`` may be left out, null or empty."""
    obj = as_object(body)
    unknown = sorted(set(obj) - {"approve", "reason"})
    if unknown:
        raise HttpError(422, f"unknown field '{unknown[0]}'", code="invalid_field")
    approve = field_bool(obj, "approve")
    reason = "" if obj.get("reason") is None else field_str(obj, "reason", non_empty=False)
    return DecisionRequest(approve, reason)


def parse_archive(body: JsonValue) -> ArchiveRequest:
    """``{"entry_ids": [int, ...]}``: 1..``MAX_ARCHIVE_IDS`` note ids (repeats
    count once); not ``1.0``, ``"1"``, ``true`` or a negative number."""
    obj = as_object(body)
    unknown = sorted(set(obj) - {"entry_ids"})
    if unknown:
        raise HttpError(422, f"unknown field '{unknown[0]}'", code="invalid_field")
    if "entry_ids" not in obj:
        raise HttpError(422, "field 'entry_ids' is required", code="invalid_field")
    raw = as_list(obj["entry_ids"], "field 'entry_ids'")
    if not 1 <= len(raw) <= MAX_ARCHIVE_IDS:
        raise HttpError(
            422,
            f"field 'entry_ids' must hold 1..{MAX_ARCHIVE_IDS} note ids, got {len(raw)}",
            code="invalid_field",
        )
    for value in raw:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_ENTRY_ID:
            raise HttpError(
                422,
                f"field 'entry_ids' must hold positive integer note ids, got {value!r:.40}",
                code="invalid_field",
            )
    ids = [value for value in raw if isinstance(value, int)]
    return ArchiveRequest(tuple(dict.fromkeys(ids)))


def parse_elicitation_answer(body: JsonValue) -> ElicitationAnswer:
    """``{"action": "accept"|"decline"|"cancel", "content": {...}}``; ``action``
    defaults to ``accept``, ``content`` may be left out (the schema's defaults)."""
    obj = as_object(body)
    unknown = sorted(set(obj) - {"action", "content"})
    if unknown:
        raise HttpError(422, f"unknown field '{unknown[0]}'", code="invalid_field")
    action = optional_str(obj, "action") or "accept"
    if action not in ACTIONS:
        raise HttpError(
            422,
            f"field 'action' must be 'accept', 'decline' or 'cancel', got {action[:40]!r}",
            code="invalid_field",
        )
    content = obj.get("content")
    if content is not None:
        content = as_object(content, "field 'content'")
    return ElicitationAnswer(action, content)


def elicitation_json(request: ElicitationRequest) -> JsonObject:
    """A question as a client sees it (never its stored, owner-scoped conversation id)."""
    question: JsonObject = {
        "id": request.id,
        "source": request.source,
        "message": request.message,
        "requested_schema": request.schema,
    }
    if request.url is not None:  # URL mode: the page to open (a step-up authorization)
        question["url"] = request.url
    return question


def approval_json(request: ApprovalRequest) -> JsonObject:
    call = request.call
    return {"call_id": call.id, "name": call.name, "arguments": call.arguments}


def message_json(message: Message) -> JsonObject:
    data: JsonObject = converter.unstructure(message)
    return data


def turn_result_json(result: TurnResult) -> JsonObject:
    data: JsonObject = converter.unstructure(result)
    data["approvals"] = [approval_json(a) for a in result.approvals]
    if result.output is None:  # an untyped turn: its JSON as it always was
        data.pop("output", None)
    return data


def native_event(event: TurnEvent) -> tuple[str, JsonObject]:
    """The SSE event name and data object for one turn event."""
    data: JsonObject
    if isinstance(event, TextDelta):
        name, data = "text_delta", {"text": event.text}
    elif isinstance(event, ToolCallDelta):
        name, data = "tool_call_delta", converter.unstructure(event)
    elif isinstance(event, ToolCallStarted):
        name, data = "tool_call_started", {"call": converter.unstructure(event.call)}
    elif isinstance(event, ToolCallFinished):
        name = "tool_call_finished"
        data = {
            "call": converter.unstructure(event.call),
            "content": event.content,
            "is_error": event.is_error,
        }
    elif isinstance(event, ElicitationAsked):
        name, data = "elicitation_asked", {"elicitation": elicitation_json(event.request)}
    elif isinstance(event, TurnFinished):
        name = "turn_finished"
        data = {
            "result": turn_result_json(event.result),
            "active_toolsets": list(event.active_toolsets),
        }
    else:
        name, data = "turn_failed", {"code": event.code, "message": event.message}
        if event.retry_after is not None:  # model_unavailable: what the backend asked
            data["retry_after"] = event.retry_after
    return name, {"type": name, **data}
