"""A2A 1.0 JSON-RPC wire format (ProtoJSON, camelCase): the requests, translated to agentik.

Pure functions, no I/O; the tasks going back out are ``_views``. Facts from
PROTOCOLS.md: PascalCase method names,
``A2A-Version: 1.0`` on every call (absent means 0.3, answered -32009), no
``kind`` discriminators, UPPER_SNAKE enum strings, errors carrying a
google.rpc.ErrorInfo with the SDK's reason names.

Tasks need no storage of their own. A task id is
``<32 hex digits>.<contextId>``: the hex digits hash the context and the
client's messageId (so a retried SendMessage is the same task), and the id is
the idempotency key of the turn's user message. The context part lets
GetTask find the conversation; the stored turn gives the status and answer,
and the turn's record (``TurnRecord``) which calls wait for a person
(``TASK_STATE_INPUT_REQUIRED``) or that it was cancelled.

A task waiting for input lists its waiting calls in its status message: a
text line, and a data part ``{"approvals": [{"callId", "name",
"arguments"}]}`` (``arguments`` the JSON text the model sent). The client's
next message on the task decides (``parse_decisions``): a data part
``{"approve": bool, "reason"?: str, "callId"?: str}`` (without ``callId``,
every waiting call), or ``{"decisions": [{"callId", "approve", "reason"?}]}``,
or the text ``approve`` / ``deny``, optionally followed by a reason.

A task whose running turn a tool's question holds (MCP elicitation) waits for
input too: its status message is the question, a text line and a data part
``{"elicitation": {"id", "source", "message", "requestedSchema"}}``; the
client's next message answers it (``parse_elicitation_answer``): a data part
``{"elicitation": id, "action"?: "accept"|"decline"|"cancel", "content"?: {...}}``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import uuid
from collections.abc import Sequence

import attrs

from agentik._errors import AgentikError
from agentik._json import JsonObject, JsonValue
from agentik._messages import ToolCall
from agentik._parts import FilePart, ImagePart, InvalidPart, Part
from agentik.agent import ElicitationAction, ElicitationRequest
from agentik.server._content import check_sizes
from agentik.toolsets import compile_schema

A2A_VERSION = "1.0"


METHODS = frozenset(
    {
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
    }
)


UNSUPPORTED_METHODS = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "GetExtendedAgentCard",
    }
)


MAX_CONTEXT_ID = 200
"""As long as any conversation id a client may send (``_native.MAX_ID_LENGTH``)."""


_REASONS = {
    -32001: "TASK_NOT_FOUND",
    -32002: "TASK_NOT_CANCELABLE",
    -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    -32004: "UNSUPPORTED_OPERATION",
    -32005: "CONTENT_TYPE_NOT_SUPPORTED",
    -32007: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    -32009: "VERSION_NOT_SUPPORTED",
    -32600: "INVALID_REQUEST",
    -32601: "METHOD_NOT_FOUND",
    -32602: "INVALID_PARAMS",
    -32603: "INTERNAL_ERROR",
}


class A2AError(AgentikError):
    """A JSON-RPC error to send back: its code, and a message naming the value."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def task_not_found(task_id: str) -> A2AError:
    return A2AError(-32001, f"Task not found: {task_id!r}")


def invalid_params(message: str) -> A2AError:
    return A2AError(-32602, f"Invalid params: {message}")


def rpc_error(request_id: JsonValue, error: A2AError) -> JsonObject:
    body: JsonObject = {"code": error.code, "message": error.message}
    reason = _REASONS.get(error.code)
    if reason is not None:
        body["data"] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "a2a-protocol.org",
                "metadata": {},
            }
        ]
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def rpc_result(request_id: JsonValue, result: JsonValue) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


@attrs.frozen
class RpcCall:
    id: JsonValue
    method: str
    params: JsonObject


def request_id_of(body: JsonValue) -> JsonValue:
    """The id to answer with, even for a request too broken to parse further."""
    if isinstance(body, dict):
        value = body.get("id")
        if isinstance(value, str | int) and not isinstance(value, bool):
            return value
    return None


def is_notification(body: JsonValue) -> bool:
    """A JSON-RPC 2.0 notification: a request object without an ``id`` member
    (``"id": null`` is a request). The server runs nothing and answers nothing
    (HTTP 204), unless the object is not a valid request at all (-32600)."""
    return isinstance(body, dict) and "id" not in body


def parse_call(body: JsonValue, version: str | None) -> RpcCall:
    """Validate the JSON-RPC envelope and the protocol version."""
    if not isinstance(body, dict):
        raise A2AError(-32600, "Invalid Request: the body must be a JSON-RPC object")
    if body.get("jsonrpc") != "2.0":
        raise A2AError(-32600, "Invalid Request: field 'jsonrpc' must be '2.0'")
    request_id = body.get("id")
    if request_id is not None and (
        isinstance(request_id, bool) or not isinstance(request_id, str | int)
    ):
        raise A2AError(-32600, "Invalid Request: field 'id' must be a string or an integer")
    method = body.get("method")
    if not isinstance(method, str):
        raise A2AError(-32600, "Invalid Request: field 'method' must be a string")
    params = body.get("params", {})
    if not isinstance(params, dict):
        raise A2AError(-32602, "Invalid params: field 'params' must be an object")
    if version is None or version.strip() != A2A_VERSION:
        shown = "absent (0.3)" if version is None else repr(version)
        raise A2AError(-32009, f"Version not supported: A2A-Version is {shown}, expected '1.0'")
    if method in UNSUPPORTED_METHODS:
        code = -32003 if "PushNotification" in method else -32004
        what = "Push Notification is" if code == -32003 else "This operation is"
        raise A2AError(code, f"{what} not supported: {method}")
    if method not in METHODS:
        raise A2AError(-32601, f"Method not found: {method!r}")
    return RpcCall(id=request_id, method=method, params=params)


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
        elif "data" in part and task_ref is not None:
            data.append(part["data"])
        elif ("raw" in part or "url" in part) and task_ref is None:
            content.append(_content_part(part, f"message.parts[{i}]"))
        else:
            kinds: list[str] = sorted(k for k in ("raw", "url", "data") if k in part) or ["empty"]
            raise A2AError(
                -32005,
                f"Incompatible content types: message.parts[{i}] is {kinds[0]},"
                " a new message takes text, raw and url parts, a message to a"
                " task that waits for input text and data parts",
            )
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
            raise task_not_found(task_ref)
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


@attrs.frozen
class Decision:
    """A person's decision about one waiting call, as a follow-up message says it."""

    call_id: str
    approve: bool
    reason: str = ""


_TEXT_DECISION = re.compile(r"(approve|deny)\b[\s:,.-]*(.*)", re.IGNORECASE | re.DOTALL)


HOW_TO_DECIDE = (
    "answer 'approve' or 'deny' (a reason may follow), or send one data part"
    ' {"approve": true|false, "reason": "..."} (for one call of several, add "callId",'
    ' or send {"decisions": [{"callId": "...", "approve": ..., "reason": "..."}]})'
)


def parse_decisions(send: SendParams, waiting: Sequence[ToolCall]) -> list[Decision]:
    """The decisions a follow-up message gives for ``waiting`` (the task's
    waiting calls), in order; -32602 naming the fault otherwise."""
    ids = [call.id for call in waiting]
    if len(send.data) > 1:
        raise invalid_params(f"a decision is one data part, got {len(send.data)}")
    if not send.data:
        found = _TEXT_DECISION.fullmatch(send.text.strip())
        if found is None:
            raise invalid_params(
                f"task {send.task_id!r} waits for approval of call(s)"
                f" {', '.join(map(repr, ids))}: {HOW_TO_DECIDE}"
            )
        approve = found.group(1).lower() == "approve"
        return [Decision(call_id, approve, found.group(2).strip()) for call_id in ids]
    data = send.data[0]
    if not isinstance(data, dict) or not ({"approve", "decisions"} & data.keys()):
        raise invalid_params(f"the data part must be a decision: {HOW_TO_DECIDE}")
    if "decisions" in data:
        _only(data, {"decisions"}, "")
        entries = data["decisions"]
        if not isinstance(entries, list) or not entries:
            raise invalid_params("field 'decisions' must be a non-empty array")
        decisions = [_decision(entry, f"decisions[{i}].", ids) for i, entry in enumerate(entries)]
        seen = [d.call_id for d in decisions]
        if len(set(seen)) != len(seen):
            raise invalid_params("field 'decisions' names a call more than once")
        return decisions
    if "callId" in data:
        return [_decision(data, "", ids)]
    _only(data, {"approve", "reason"}, "")
    one = _decision({**data, "callId": ids[0]}, "", ids) if ids else None
    if one is None:
        raise invalid_params(f"task {send.task_id!r} has no call waiting for approval")
    return [Decision(call_id, one.approve, one.reason) for call_id in ids]


def _only(obj: JsonObject, allowed: set[str], where: str) -> None:
    extra = sorted(obj.keys() - allowed)
    if extra:
        raise invalid_params(f"field '{where}{extra[0]}' is not part of a decision")


def _decision(entry: JsonValue, where: str, waiting: list[str]) -> Decision:
    if not isinstance(entry, dict):
        raise invalid_params(f"field '{where.rstrip('.')}' must be an object")
    _only(entry, {"callId", "approve", "reason"}, where)
    call_id = entry.get("callId")
    if not isinstance(call_id, str) or not call_id:
        raise invalid_params(f"field '{where}callId' must be a non-empty string")
    if call_id not in waiting:
        shown_ids = ", ".join(map(repr, waiting)) or "none"
        raise invalid_params(
            f"call {call_id!r} does not wait for approval in this task (waiting: {shown_ids})"
        )
    approve = entry.get("approve")
    if not isinstance(approve, bool):
        raise invalid_params(f"field '{where}approve' must be true or false")
    reason = entry.get("reason", "")
    if not isinstance(reason, str):
        raise invalid_params(f"field '{where}reason' must be a string")
    return Decision(call_id, approve, reason)


def valid_context_id(context_id: str) -> bool:
    """Printable (so it cannot carry the owner separator) and bounded, like every id."""
    return 0 < len(context_id) <= MAX_CONTEXT_ID and context_id.isprintable()


def make_task_id(context_id: str, message_id: str) -> str:
    digest = hashlib.sha256(f"{context_id}\0{message_id}".encode()).hexdigest()[:32]
    return f"{digest}.{context_id}"


def context_of(task_id: str) -> str | None:
    """The context (conversation) a task id names, or None for an id we never made."""
    digest, sep, context_id = task_id.partition(".")
    if not sep or len(digest) != 32 or not context_id:
        return None
    if any(c not in "0123456789abcdef" for c in digest):
        return None
    return context_id


def history_length(params: JsonObject) -> int | None:
    """GetTask and ListTasks carry ``historyLength`` in their params, SendMessage
    in ``configuration``."""
    where = ""
    configuration = params.get("configuration")
    if isinstance(configuration, dict):
        params, where = configuration, "configuration."
    value = params.get("historyLength")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid_params(f"field '{where}historyLength' must be a non-negative integer")
    return value


def task_id_param(params: JsonObject) -> str:
    task_id = params.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise invalid_params("field 'id' must be a non-empty string")
    return task_id


_ACTIONS: dict[str, ElicitationAction] = {
    "accept": "accept",
    "decline": "decline",
    "cancel": "cancel",
}


@attrs.frozen
class ElicitationAnswer:
    """A person's answer to a tool's question, as a follow-up message says it."""

    elicitation_id: str
    action: ElicitationAction
    content: JsonObject | None


def parse_elicitation_answer(send: SendParams, question: ElicitationRequest) -> ElicitationAnswer:
    """The answer a follow-up message gives to ``question``; -32602 naming the fault."""
    data = send.data[0] if len(send.data) == 1 else None
    if not isinstance(data, dict) or "elicitation" not in data:
        raise invalid_params(
            f"task {send.task_id!r} asks a question ({question.id}): {HOW_TO_ANSWER}"
        )
    extra = sorted(data.keys() - {"elicitation", "action", "content"})
    if extra:
        raise invalid_params(f"field {extra[0]!r} is not part of an answer")
    eid = data["elicitation"]
    if eid != question.id:
        raise invalid_params(
            f"question {eid!r} does not wait in task {send.task_id!r} (waiting: {question.id!r})"
        )
    action = _ACTIONS.get(str(data.get("action", "accept")))
    if action is None:
        raise invalid_params(
            f"field 'action' must be 'accept', 'decline' or 'cancel', got {data.get('action')!r}"
        )
    content = data.get("content")
    if content is not None and not isinstance(content, dict):
        raise invalid_params("field 'content' must be an object")
    return ElicitationAnswer(question.id, action, content)


HOW_TO_ANSWER = (
    'send one data part {"elicitation": "<id>", "action": "accept", "content": {...}}'
    ' (fields left out take the schema\'s defaults), or "action": "decline" or "cancel"'
)
