"""SendMessage's params (A2A 1.0 ProtoJSON), read into ``SendParams``: pure, no I/O.

A new message takes text, ``raw`` (base64) and ``url`` parts and becomes a
turn; a message naming a task (``message.taskId``) is a follow-up to a task
that waits for input, with text and data parts (read by ``_answers``). Every
refusal is an ``A2AError`` naming the field (-32602), or -32005 for a part
of the wrong kind.
"""

from __future__ import annotations

import base64
import binascii
import uuid

import attrs

from agentik._json import JsonObject, JsonValue
from agentik._parts import FilePart, ImagePart, InvalidPart, Part
from agentik.server._content import check_sizes
from agentik.server.a2a._rpc import (
    MAX_CONTEXT_ID,
    A2AError,
    context_of,
    invalid_params,
    make_task_id,
    task_not_found,
    valid_context_id,
)
from agentik.toolsets import compile_schema


@attrs.frozen
class SendParams:
    """What agentik takes from SendMessage: the text, the conversation, the task id.

    ``follow_up``: the message named an existing task (``message.taskId``), whose
    id is then ``task_id``; its parts decide (``parse_decisions``)."""

    text: str
    context_id: str
    task_id: str
    message_id: str
    return_immediately: bool = False
    follow_up: bool = False
    data: tuple[JsonValue, ...] = ()
    """The data parts' values, in order (only a follow-up may carry them)."""
    parts: tuple[Part, ...] = ()
    """Images and files: ``raw`` (base64) and ``url`` parts, in order."""
    output_schema: JsonObject | None = None
    """A typed turn: ``message.metadata.outputSchema``, the JSON Schema the
    answer must match (the artifact then carries it as a data part too)."""


def _string(obj: JsonObject, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise invalid_params(f"field '{where}{key}' must be a non-empty string")
    return value


def _content_part(part: JsonObject, where: str) -> Part:
    """An A2A ``raw`` or ``url`` part as an ``ImagePart`` (an ``image/…``
    mediaType) or a ``FilePart``; -32602 naming the field."""
    media = part.get("mediaType")
    filename = part.get("filename")
    if media is not None and not isinstance(media, str):
        raise invalid_params(f"field '{where}.mediaType' must be a string")
    if filename is not None and not isinstance(filename, str):
        raise invalid_params(f"field '{where}.filename' must be a string")
    url: str | None = None
    data: bytes | None = None
    if "raw" in part:
        raw = part["raw"]
        if not isinstance(raw, str):
            raise invalid_params(f"field '{where}.raw' must be base64 text")
        data = _base64(raw, f"{where}.raw")
        media = media or "application/octet-stream"
    else:
        given = part["url"]
        if not isinstance(given, str) or not given:
            raise invalid_params(f"field '{where}.url' must be a non-empty string")
        url = given
    try:
        if media is not None and media.startswith("image/"):
            return ImagePart(url=url, data=data, media_type=media)
        return FilePart(url=url, data=data, media_type=media or None, filename=filename)
    except InvalidPart as error:
        raise invalid_params(f"field '{where}': {error}") from None


def _base64(text: str, where: str) -> bytes:
    """ProtoJSON bytes: standard or URL-safe base64, padded or not."""
    padded = text + "=" * (-len(text) % 4)
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(padded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
    raise invalid_params(f"field '{where}' must be base64 text")


def parse_send(params: JsonObject, max_part_bytes: int | None = None) -> SendParams:
    """SendMessage's params; ``max_part_bytes``: a larger raw part refuses the
    message with 413 before anything is stored."""
    message = params.get("message")
    if not isinstance(message, dict):
        raise invalid_params("field 'message' must be an object")
    message_id = _string(message, "messageId", "message.")
    role = message.get("role")
    if role != "ROLE_USER":
        raise invalid_params(f"field 'message.role' must be 'ROLE_USER', got {role!r}")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise invalid_params("field 'message.parts' must be a non-empty array")
    task_ref = message.get("taskId")
    if task_ref is not None and (not isinstance(task_ref, str) or not task_ref):
        raise invalid_params("field 'message.taskId' must be a non-empty string")
    texts, data, content = _read_parts(parts, follow_up=task_ref is not None)
    if max_part_bytes is not None:
        check_sizes(content, max_part_bytes, "message.parts (raw and url)")
    text = "\n".join(texts)
    context_id = message.get("contextId")
    if context_id is not None and (
        not isinstance(context_id, str) or not valid_context_id(context_id)
    ):
        raise invalid_params(
            f"field 'message.contextId' must be 1..{MAX_CONTEXT_ID} printable characters"
        )
    configuration = params.get("configuration")
    immediately = isinstance(configuration, dict) and configuration.get("returnImmediately") is True
    if task_ref is not None:
        task_context = context_of(task_ref)
        if task_context is None:
            raise task_not_found()
        if context_id is not None and context_id != task_context:
            raise invalid_params(
                f"field 'message.contextId' is {context_id!r} but task {task_ref!r}"
                f" belongs to context {task_context!r}"
            )
        return SendParams(
            text=text,
            context_id=task_context,
            task_id=task_ref,
            message_id=message_id,
            return_immediately=immediately,
            follow_up=True,
            data=tuple(data),
        )
    if not text.strip() and not content:
        raise invalid_params("field 'message.parts' must contain text, an image or a file")
    output_schema = _output_schema(message.get("metadata"))
    if context_id is None:
        context_id = f"ctx-{uuid.uuid4().hex}"
    return SendParams(
        text=text,
        context_id=context_id,
        task_id=make_task_id(context_id, message_id),
        message_id=message_id,
        return_immediately=immediately,
        output_schema=output_schema,
        parts=tuple(content),
    )


def _read_parts(
    parts: list[JsonValue], *, follow_up: bool
) -> tuple[list[str], list[JsonValue], list[Part]]:
    """A message's texts, data values and content parts, in order: a new message
    takes text, raw and url parts, a ``follow_up`` (to a task waiting for input)
    text and data parts; anything else is -32005 naming the part."""
    texts: list[str] = []
    data: list[JsonValue] = []
    content: list[Part] = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            raise invalid_params(f"field 'message.parts[{i}]' must be an object")
        if "text" in part:
            text = part["text"]
            if not isinstance(text, str):
                raise invalid_params(f"field 'message.parts[{i}].text' must be a string")
            texts.append(text)
        elif "data" in part and follow_up:
            data.append(part["data"])
        elif ("raw" in part or "url" in part) and not follow_up:
            content.append(_content_part(part, f"message.parts[{i}]"))
        else:
            kinds: list[str] = sorted(k for k in ("raw", "url", "data") if k in part) or ["empty"]
            raise A2AError(
                -32005,
                f"Incompatible content types: message.parts[{i}] is {kinds[0]},"
                " a new message takes text, raw and url parts, a message to a"
                " task that waits for input text and data parts",
            )
    return texts, data, content


def _output_schema(metadata: JsonValue) -> JsonObject | None:
    """``message.metadata.outputSchema``: a usable JSON Schema, or -32602."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise invalid_params("field 'message.metadata' must be an object")
    schema = metadata.get("outputSchema")
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise invalid_params("field 'message.metadata.outputSchema' must be an object")
    try:
        compile_schema(schema)
    except ValueError as error:
        raise invalid_params(
            f"field 'message.metadata.outputSchema' is not usable: {error}"
        ) from None
    return schema
