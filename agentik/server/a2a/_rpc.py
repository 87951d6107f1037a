"""A2A 1.0 JSON-RPC wire format (ProtoJSON, camelCase): the envelope, its errors, task ids.

Pure functions, no I/O; a SendMessage's params are read in ``_send``, a
follow-up's decisions and answers in ``_answers``, and the tasks going back
out are ``_views``. Facts from PROTOCOLS.md: PascalCase method names,
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
"""

from __future__ import annotations

import hashlib

import attrs

from agentik._errors import AgentikError
from agentik._json import JsonObject, JsonValue

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


def task_not_found() -> A2AError:
    """The protocol's own text, without the id the client sent: the A2A TCK
    reads "501" anywhere in an error's text as "not implemented", and a
    random id it sent held those digits about one run in 190."""
    return A2AError(-32001, "Task not found")


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
