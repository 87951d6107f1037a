"""A2A 1.0 JSON-RPC wire format (ProtoJSON, camelCase), translated to and from agentik.

Pure functions, no I/O. Facts from PROTOCOLS.md: PascalCase method names,
``A2A-Version: 1.0`` on every call (absent means 0.3, answered -32009), no
``kind`` discriminators, UPPER_SNAKE enum strings, errors carrying a
google.rpc.ErrorInfo with the SDK's reason names.

Tasks need no storage of their own. A task id is
``<32 hex digits>.<contextId>``: the hex digits hash the context and the
client's messageId (so a retried SendMessage is the same task), and the id is
the idempotency key of the turn's user message. The context part lets
GetTask find the conversation; the stored turn gives the status and answer.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime

import attrs

from agentik._errors import AgentikError
from agentik._json import JsonObject, JsonValue
from agentik._messages import Message, Role

A2A_VERSION = "1.0"
METHODS = frozenset({"SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask"})
UNSUPPORTED_METHODS = frozenset(
    {
        "SubscribeToTask",
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
        "GetExtendedAgentCard",
    }
)
MAX_CONTEXT_ID = 200
"""As long as any conversation id a client may send (``_native.MAX_ID_LENGTH``)."""
TERMINAL = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"})

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
    """What agentik takes from SendMessage: the text, the conversation, the task id."""

    text: str
    context_id: str
    task_id: str
    message_id: str
    return_immediately: bool = False


def _string(obj: JsonObject, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise invalid_params(f"field '{where}{key}' must be a non-empty string")
    return value


def parse_send(params: JsonObject) -> SendParams:
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
    texts = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            raise invalid_params(f"field 'message.parts[{i}]' must be an object")
        if "text" not in part:
            kinds: list[str] = sorted(k for k in ("raw", "url", "data") if k in part) or ["empty"]
            raise A2AError(
                -32005,
                f"Incompatible content types: message.parts[{i}] is {kinds[0]},"
                " only text parts are supported",
            )
        text = part["text"]
        if not isinstance(text, str):
            raise invalid_params(f"field 'message.parts[{i}].text' must be a string")
        texts.append(text)
    text = "\n".join(texts)
    if not text.strip():
        raise invalid_params("field 'message.parts' must contain text")
    context_id = message.get("contextId")
    if context_id is None:
        context_id = f"ctx-{uuid.uuid4().hex}"
    elif not isinstance(context_id, str) or not valid_context_id(context_id):
        raise invalid_params(
            f"field 'message.contextId' must be 1..{MAX_CONTEXT_ID} printable characters"
        )
    if message.get("taskId") is not None:
        raise A2AError(
            -32004,
            "This operation is not supported: continuing a task (message.taskId);"
            " send a new message in the same contextId instead",
        )
    configuration = params.get("configuration")
    immediately = isinstance(configuration, dict) and configuration.get("returnImmediately") is True
    return SendParams(
        text=text,
        context_id=context_id,
        task_id=make_task_id(context_id, message_id),
        message_id=message_id,
        return_immediately=immediately,
    )


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


def timestamp(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def agent_message(text: str, context_id: str, task_id: str) -> JsonObject:
    return {
        "messageId": f"msg-{uuid.uuid4().hex}",
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
        "contextId": context_id,
        "taskId": task_id,
    }


def status(state: str, at: datetime, message: JsonObject | None = None) -> JsonObject:
    out: JsonObject = {"state": state, "timestamp": timestamp(at)}
    if message is not None:
        out["message"] = message
    return out


def artifact(task_id: str, text: str) -> JsonObject:
    return {"artifactId": f"{task_id}.answer", "name": "answer", "parts": [{"text": text}]}


@attrs.frozen
class TaskView:
    """A task as stored history shows it."""

    task_id: str
    context_id: str
    state: str
    at: datetime
    answer: str | None = None
    error: str | None = None
    history: tuple[Message, ...] = ()

    def to_json(self, *, history_length: int | None = None) -> JsonObject:
        task: JsonObject = {"id": self.task_id, "contextId": self.context_id}
        note = None
        if self.error is not None:
            note = agent_message(self.error, self.context_id, self.task_id)
        task["status"] = status(self.state, self.at, note)
        if self.answer is not None:
            task["artifacts"] = [artifact(self.task_id, self.answer)]
        if history_length is not None and history_length > 0 and self.history:
            messages: list[JsonValue] = [
                _history_message(m, self.context_id, self.task_id, i)
                for i, m in enumerate(self.history)
            ]
            task["history"] = messages[-history_length:]
        return task


def _history_message(message: Message, context_id: str, task_id: str, i: int) -> JsonObject:
    return {
        "messageId": f"{task_id}.m{i}",
        "role": "ROLE_USER" if message.role is Role.USER else "ROLE_AGENT",
        "parts": [{"text": message.content}],
        "contextId": context_id,
        "taskId": task_id,
    }


def view_from_turn(
    task_id: str, context_id: str, turn: list[Message], *, running: bool, cancelled: bool
) -> TaskView:
    """A task's state from its stored turn: the user message and what followed it.

    The turn is complete when it ends with an assistant message without tool
    calls; otherwise it is still running, was cancelled, or failed."""
    last = turn[-1]
    at = last.created_at or turn[0].created_at
    assert at is not None, "stored messages carry created_at"
    conversational = tuple(m for m in turn if m.role in (Role.USER, Role.ASSISTANT) and m.content)
    if last.role is Role.ASSISTANT and not last.tool_calls and len(turn) > 1:
        return TaskView(
            task_id,
            context_id,
            "TASK_STATE_COMPLETED",
            at,
            answer=last.content,
            history=conversational,
        )
    if running:
        return TaskView(task_id, context_id, "TASK_STATE_WORKING", at, history=conversational)
    if cancelled:
        return TaskView(
            task_id,
            context_id,
            "TASK_STATE_CANCELED",
            at,
            error="the task was canceled",
            history=conversational,
        )
    return TaskView(
        task_id,
        context_id,
        "TASK_STATE_FAILED",
        at,
        error="the turn ended without an answer",
        history=conversational,
    )


def agent_card(
    *,
    url: str,
    name: str,
    description: str,
    version: str,
    skills: list[tuple[str, str]],
    bearer_auth: bool,
) -> JsonObject:
    """The 1.0 agent card: supportedInterfaces with protocolVersion, skills from toolsets."""
    card: JsonObject = {
        "name": name,
        "description": description,
        "version": version,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": A2A_VERSION}
        ],
        "capabilities": {"streaming": True, "pushNotifications": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {"id": skill_id, "name": skill_id, "description": text, "tags": ["toolset", skill_id]}
            for skill_id, text in skills
        ]
        or [
            {
                "id": "chat",
                "name": "chat",
                "description": "Answers questions in a conversation.",
                "tags": ["chat"],
            }
        ],
    }
    if bearer_auth:
        card["securitySchemes"] = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
        card["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
    return card
