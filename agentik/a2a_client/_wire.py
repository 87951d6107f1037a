"""A2A 1.0 JSON-RPC, client side: the requests agentik sends, and what it reads
from the answers. Pure functions, no I/O (``_client`` does the HTTP).

Facts from PROTOCOLS.md: ProtoJSON (camelCase), no ``kind`` discriminators,
UPPER_SNAKE enum strings, PascalCase methods, ``A2A-Version: 1.0`` on every
call; a card of version 1.0 lists ``supportedInterfaces`` with
``protocolBinding`` and ``protocolVersion``.

A task is read into an ``Outcome``: ``Done`` (COMPLETED: its text),
``Failed`` (FAILED, CANCELED, REJECTED, AUTH_REQUIRED, or a state this
client does not know: the tool's error), ``Asks`` (INPUT_REQUIRED: a
question for a person) or ``Pending`` (SUBMITTED, WORKING: keep following).
A streamed task is folded from its events (``fold``) into the same task
object GetTask returns, so one reader serves both.

The contextId of a call's message is derived from the agent and the
conversation (``derived_id``), so every call of one conversation continues
one remote conversation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TypeAlias
from urllib.parse import urljoin

import attrs

from agentik._json import JsonObject, JsonValue

A2A_VERSION = "1.0"

PENDING_STATES = frozenset({"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"})
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
FAILED_STATES = {
    "TASK_STATE_FAILED": "failed the task",
    "TASK_STATE_CANCELED": "cancelled the task",
    "TASK_STATE_REJECTED": "rejected the task",
    "TASK_STATE_AUTH_REQUIRED": "needs an authorization it cannot get from agentik",
}
_MAX_SHOWN = 2000
"""A remote agent's words in an error result are cut here: an error is a line, not a log."""


class WireError(Exception):
    """The remote agent sent something that is not A2A 1.0 as this client reads it."""


@attrs.frozen(kw_only=True)
class Card:
    """What the client takes from an agent card."""

    name: str
    description: str
    url: str
    """The JSON-RPC interface's URL (made absolute against the card's URL)."""
    streaming: bool
    skills: tuple[tuple[str, str], ...]
    """(name, description) per skill."""

    def catalog_line(self) -> str:
        """The toolset's description: the agent's own, then its skills."""
        skills = "; ".join(f"{name}: {text}" if text else name for name, text in self.skills)
        line = self.description.strip() or f"The A2A agent {self.name!r}."
        if skills:
            line = f"{line.rstrip('.')}. Skills: {skills}."
        return " ".join(line.split())[:_MAX_SHOWN]


def parse_card(card: JsonValue, card_url: str) -> Card:
    """The card's JSON-RPC 1.0 interface, streaming flag and skills.

    Raises:
        WireError: the card is not an object, or offers no JSON-RPC 1.0 interface.
    """
    if not isinstance(card, dict):
        raise WireError("the agent card is not a JSON object")
    interfaces = card.get("supportedInterfaces")
    url: str | None = None
    if isinstance(interfaces, list):
        for interface in interfaces:
            if (
                isinstance(interface, dict)
                and interface.get("protocolBinding") == "JSONRPC"
                and interface.get("protocolVersion") == A2A_VERSION
                and isinstance(interface.get("url"), str)
            ):
                url = urljoin(card_url, str(interface["url"]))
                break
    if url is None:
        raise WireError(
            "the agent card offers no JSON-RPC interface of A2A 1.0"
            " (supportedInterfaces with protocolBinding 'JSONRPC', protocolVersion '1.0')"
        )
    capabilities = card.get("capabilities")
    streaming = isinstance(capabilities, dict) and capabilities.get("streaming") is True
    skills: list[tuple[str, str]] = []
    raw_skills = card.get("skills")
    for skill in raw_skills if isinstance(raw_skills, list) else []:
        if isinstance(skill, dict):
            name = skill.get("name") or skill.get("id")
            text = skill.get("description")
            if isinstance(name, str) and name:
                skills.append((name, text if isinstance(text, str) else ""))
    name = card.get("name")
    description = card.get("description")
    return Card(
        name=name if isinstance(name, str) else "",
        description=description if isinstance(description, str) else "",
        url=url,
        streaming=streaming,
        skills=tuple(skills),
    )


# --- requests ------------------------------------------------------------------------


def derived_id(prefix: str, *parts: str) -> str:
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    return f"{prefix}-{digest}"


def rpc_body(method: str, params: JsonObject, request_id: int) -> JsonObject:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def text_part(text: str) -> JsonObject:
    return {"text": text}


def data_part(data: JsonValue) -> JsonObject:
    return {"data": data, "mediaType": "application/json"}


def user_message(
    parts: Sequence[JsonObject],
    *,
    message_id: str,
    context_id: str | None = None,
    task_id: str | None = None,
) -> JsonObject:
    message: JsonObject = {"messageId": message_id, "role": "ROLE_USER", "parts": list(parts)}
    if context_id is not None:
        message["contextId"] = context_id
    if task_id is not None:
        message["taskId"] = task_id
    return message


def send_params(message: JsonObject, *, return_immediately: bool) -> JsonObject:
    params: JsonObject = {"message": message}
    if return_immediately:
        params["configuration"] = {"returnImmediately": True}
    return params


# --- answers -------------------------------------------------------------------------


class RpcFault(Exception):
    """A JSON-RPC error the remote agent answered."""

    def __init__(self, code: object, message: str) -> None:
        super().__init__(f"error {code}: {message}")
        self.code = code
        self.message = message


def rpc_result(reply: JsonValue) -> JsonObject:
    """The ``result`` object of a JSON-RPC reply.

    Raises:
        RpcFault: the reply is an error.
        WireError: the reply is neither a result object nor an error.
    """
    if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
        raise WireError("the answer is not a JSON-RPC 2.0 object")
    error = reply.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        raise RpcFault(error.get("code"), shown(message if isinstance(message, str) else ""))
    result = reply.get("result")
    if not isinstance(result, dict):
        raise WireError("the JSON-RPC answer has neither an object 'result' nor an 'error'")
    return result


Reply: TypeAlias = "tuple[str, JsonObject]"
"""``("task", task)`` or ``("message", message)``."""


def send_result(result: JsonObject) -> Reply:
    """SendMessage's result: a task or a message."""
    task = result.get("task")
    if isinstance(task, dict):
        check_task(task)
        return "task", task
    message = result.get("message")
    if isinstance(message, dict):
        return "message", message
    raise WireError("SendMessage answered neither a 'task' nor a 'message'")


def check_task(task: JsonObject) -> JsonObject:
    if not isinstance(task.get("id"), str) or not task["id"]:
        raise WireError("a task without a string 'id'")
    status = task.get("status")
    if not isinstance(status, dict) or not isinstance(status.get("state"), str):
        raise WireError(f"task {task['id']!r} has no status state")
    return task


def fold(
    task: JsonObject | None, result: JsonObject
) -> tuple[JsonObject | None, JsonObject | None]:
    """One streamed event applied to the task seen so far: (the task now, a
    message the agent answered with instead of a task, if that is the event).

    Raises:
        WireError: an event of another task, or of no kind this client knows.
    """
    if isinstance(result.get("task"), dict):
        new = check_task(dict(result["task"]))  # type: ignore[arg-type]
        return new, None
    if isinstance(result.get("message"), dict):
        message = result["message"]
        assert isinstance(message, dict)
        return task, message
    for kind in ("statusUpdate", "artifactUpdate"):
        update = result.get(kind)
        if not isinstance(update, dict):
            continue
        task_id = update.get("taskId")
        if not isinstance(task_id, str) or not task_id:
            raise WireError(f"a {kind} without a string 'taskId'")
        if task is not None and task_id != task["id"]:
            raise WireError(f"a {kind} of task {task_id!r} in the stream of {task['id']!r}")
        current: JsonObject = (
            dict(task)
            if task is not None
            else {"id": task_id, "status": {"state": "TASK_STATE_WORKING"}}
        )
        if kind == "statusUpdate":
            status = update.get("status")
            if not isinstance(status, dict) or not isinstance(status.get("state"), str):
                raise WireError("a statusUpdate without a status state")
            current["status"] = status
        else:
            current["artifacts"] = _with_artifact(current.get("artifacts"), update)
        return current, None
    raise WireError(f"a stream event of no known kind (keys {sorted(result)[:5]})")


def _with_artifact(artifacts: JsonValue, update: JsonObject) -> list[JsonValue]:
    artifact = update.get("artifact")
    if not isinstance(artifact, dict):
        raise WireError("an artifactUpdate without an artifact")
    kept = list(artifacts) if isinstance(artifacts, list) else []
    artifact_id = artifact.get("artifactId")
    for i, old in enumerate(kept):
        if isinstance(old, dict) and old.get("artifactId") == artifact_id:
            if update.get("append") is True:
                old_parts = old.get("parts")
                new_parts = artifact.get("parts")
                merged = dict(old)
                merged["parts"] = [
                    *(old_parts if isinstance(old_parts, list) else []),
                    *(new_parts if isinstance(new_parts, list) else []),
                ]
                kept[i] = merged
            else:
                kept[i] = artifact
            return kept
    kept.append(artifact)
    return kept


# --- outcomes ------------------------------------------------------------------------


@attrs.frozen
class Done:
    text: str


@attrs.frozen
class Failed:
    message: str


@attrs.frozen
class Pending:
    state: str


@attrs.frozen(kw_only=True)
class Question:
    """What an INPUT_REQUIRED task asks, and how the person's answer goes back.

    ``kind``: ``elicitation`` (an agentik agent's tool asks: the answer goes back
    as its ``{"elicitation": id, ...}`` data part), ``approval`` (an agentik
    agent's calls wait for approval: ``{"approve": bool, "reason"?}``), or
    ``text`` (any other agent: the answer is a text message).
    """

    message: str
    schema: JsonObject
    kind: str
    remote_id: str | None = None


@attrs.frozen
class Asks:
    question: Question


Outcome: TypeAlias = Done | Failed | Pending | Asks

TEXT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "Your answer to the agent."}},
    "required": ["text"],
}
APPROVAL_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "description": "Approve the waiting calls."},
        "reason": {"type": "string", "description": "Why (optional)."},
    },
    "required": ["approve"],
}


def shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"


def parts_text(parts: JsonValue) -> str:
    """The text of a list of parts: text parts as they are, data parts as JSON."""
    lines: list[str] = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            lines.append(str(part["text"]))
        elif "data" in part:
            lines.append(json.dumps(part["data"], ensure_ascii=False, sort_keys=True))
        elif isinstance(part.get("url"), str):
            lines.append(str(part["url"]))
    return "\n".join(lines)


def _status_parts(task: JsonObject) -> JsonValue:
    status = task.get("status")
    message = status.get("message") if isinstance(status, dict) else None
    return message.get("parts") if isinstance(message, dict) else None


def answer_text(task: JsonObject) -> str:
    """A completed task's answer: its artifacts' parts, else its status message."""
    artifacts = task.get("artifacts")
    texts = [
        parts_text(a.get("parts"))
        for a in (artifacts if isinstance(artifacts, list) else [])
        if isinstance(a, dict)
    ]
    text = "\n".join(t for t in texts if t)
    return text or parts_text(_status_parts(task))


def outcome(agent: str, task: JsonObject) -> Outcome:
    """What a task's state means for the tool call that follows it."""
    status = task.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    if state == "TASK_STATE_COMPLETED":
        return Done(answer_text(task) or f"a2a agent {agent!r} completed the task with no text")
    if state in PENDING_STATES:
        assert isinstance(state, str)
        return Pending(state)
    if state == INPUT_REQUIRED:
        return Asks(question_of(agent, task))
    said = shown(parts_text(_status_parts(task)))
    why = f": {said}" if said else ""
    if isinstance(state, str) and state in FAILED_STATES:
        return Failed(f"a2a agent {agent!r} {FAILED_STATES[state]}{why}")
    return Failed(
        f"a2a agent {agent!r} reported the task state {shown(str(state))!r}, unknown here"
    )


def question_of(agent: str, task: JsonObject) -> Question:
    """The question of an INPUT_REQUIRED task, from its status message."""
    parts = _status_parts(task)
    texts = [
        str(p["text"])
        for p in (parts if isinstance(parts, list) else [])
        if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]
    message = shown("\n".join(texts)) or f"a2a agent {agent!r} needs more input"
    for part in parts if isinstance(parts, list) else []:
        data = part.get("data") if isinstance(part, dict) else None
        if not isinstance(data, dict):
            continue
        asked = data.get("elicitation")
        if isinstance(asked, dict) and isinstance(asked.get("id"), str):
            schema = asked.get("requestedSchema")
            text = asked.get("message")
            return Question(
                message=shown(text) if isinstance(text, str) and text else message,
                schema=schema if isinstance(schema, dict) else {},
                kind="elicitation",
                remote_id=str(asked["id"]),
            )
        if isinstance(data.get("approvals"), list):
            return Question(message=message, schema=APPROVAL_SCHEMA, kind="approval")
    return Question(message=message, schema=TEXT_SCHEMA, kind="text")


def answer_parts(
    question: Question, action: str, content: JsonObject | None
) -> list[JsonObject] | None:
    """The parts of the follow-up message that answers ``question``; None when the
    answer is to stop (the task is then cancelled)."""
    content = content or {}
    if question.kind == "elicitation":
        data: JsonObject = {"elicitation": question.remote_id, "action": action}
        if action == "accept":
            data["content"] = content
        return [data_part(data)]
    if question.kind == "approval":
        if action != "accept":
            return [data_part({"approve": False, "reason": f"the person {action}d"})]
        decision: JsonObject = {"approve": content.get("approve") is True}
        if isinstance(content.get("reason"), str) and content["reason"]:
            decision["reason"] = content["reason"]
        return [data_part(decision)]
    if action != "accept":
        return None
    return [text_part(str(content.get("text", "")))]
