"""A2A 1.0 tasks out: a task's status, answer and waiting calls, rebuilt from
the stored turn (``view_from_turn``), as ProtoJSON objects (``TaskView``),
and the agent card.

Pure functions, no I/O. A task waiting for input lists its waiting calls in
its status message (a text line and a data part ``{"approvals": [...]}``),
or the question a running tool asks (``{"elicitation": {...}}``); the
client's answers are read in ``_rpc`` (its docstring has the whole format).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from datetime import datetime

import attrs

from agentik._json import JsonObject, JsonValue
from agentik._messages import Message, Role, ToolCall
from agentik._parts import FilePart, Part, TextPart
from agentik.agent import ElicitationRequest, is_superseded
from agentik.server.a2a._answers import HOW_TO_ANSWER, HOW_TO_DECIDE, Decision, parse_decisions
from agentik.server.a2a._rpc import A2A_VERSION, A2AError
from agentik.server.a2a._send import SendParams
from agentik.storage import TurnRecord

TERMINAL = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)


INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"


ENDS_A_STREAM = TERMINAL | {INPUT_REQUIRED}
"""A stream of a task's updates ends at these: done, or waiting for the client."""


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


def artifact(task_id: str, text: str, output: JsonValue = None) -> JsonObject:
    """The answer; a typed turn's (``output``) also as a data part."""
    parts: list[JsonValue] = [{"text": text}]
    if output is not None:
        parts.append({"data": output, "mediaType": "application/json"})
    return {"artifactId": f"{task_id}.answer", "name": "answer", "parts": parts}


def approval_message(task_id: str, context_id: str, waiting: Sequence[ToolCall]) -> JsonObject:
    """The status message of a task waiting for input: a line a person reads,
    and the waiting calls as data a program reads."""
    listed = "; ".join(f"{c.name} {c.arguments} (call {c.id})" for c in waiting)
    calls: list[JsonValue] = [
        {"callId": c.id, "name": c.name, "arguments": c.arguments} for c in waiting
    ]
    return {
        "messageId": f"{task_id}.input",
        "role": "ROLE_AGENT",
        "parts": [
            {"text": f"Waiting for approval: {listed}. To decide, {HOW_TO_DECIDE}."},
            {"data": {"approvals": calls}, "mediaType": "application/json"},
        ],
        "contextId": context_id,
        "taskId": task_id,
    }


def elicitation_json(question: ElicitationRequest) -> JsonObject:
    data: JsonObject = {
        "id": question.id,
        "source": question.source,
        "message": question.message,
        "requestedSchema": question.schema,
    }
    if question.url is not None:  # URL mode: the page to open (a step-up authorization)
        data["url"] = question.url
    return data


def question_message(task_id: str, context_id: str, question: ElicitationRequest) -> JsonObject:
    """The status message of a task a tool's question holds: the question as a
    person reads it, and as data a program reads."""
    return {
        "messageId": f"{task_id}.input",
        "role": "ROLE_AGENT",
        "parts": [
            {
                "text": f"{question.source} asks: {question.message}"
                f" (question {question.id}). To answer, {HOW_TO_ANSWER}."
            },
            {"data": {"elicitation": elicitation_json(question)}, "mediaType": "application/json"},
        ],
        "contextId": context_id,
        "taskId": task_id,
    }


@attrs.frozen
class TaskView:
    """A task as stored history shows it."""

    task_id: str
    context_id: str
    state: str
    at: datetime
    answer: str | None = None
    output: JsonValue = None
    """A typed turn's answer as JSON: from the run that returned it, or read
    back from the stored answer of a turn recorded as typed
    (``TurnRecord.output``)."""
    error: str | None = None
    history: tuple[Message, ...] = ()
    waiting: tuple[ToolCall, ...] = ()
    """The calls waiting for a decision (``TASK_STATE_INPUT_REQUIRED``)."""
    question: ElicitationRequest | None = None
    """The question a tool of the running turn asks (``TASK_STATE_INPUT_REQUIRED``)."""

    def status_json(self) -> JsonObject:
        note = None
        if self.question is not None:
            note = question_message(self.task_id, self.context_id, self.question)
        elif self.waiting:
            note = approval_message(self.task_id, self.context_id, self.waiting)
        elif self.error is not None:
            note = agent_message(self.error, self.context_id, self.task_id)
        return status(self.state, self.at, note)

    def to_json(self, *, history_length: int | None = None) -> JsonObject:
        task: JsonObject = {"id": self.task_id, "contextId": self.context_id}
        task["status"] = self.status_json()
        if self.answer is not None:
            task["artifacts"] = [artifact(self.task_id, self.answer, self.output)]
        if history_length is not None and history_length > 0 and self.history:
            messages: list[JsonValue] = [
                _history_message(m, self.context_id, self.task_id, i)
                for i, m in enumerate(self.history)
            ]
            task["history"] = messages[-history_length:]
        return task


def _history_message(message: Message, context_id: str, task_id: str, i: int) -> JsonObject:
    parts: list[JsonValue] = [{"text": message.content}] if message.content else []
    parts += [_a2a_part(part) for part in message.parts]
    return {
        "messageId": f"{task_id}.m{i}",
        "role": "ROLE_USER" if message.role is Role.USER else "ROLE_AGENT",
        "parts": parts,
        "contextId": context_id,
        "taskId": task_id,
    }


def _a2a_part(part: Part) -> JsonObject:
    """A stored part as A2A shows it: ``text``, or ``raw`` (base64) or ``url``
    with its ``mediaType`` and ``filename``."""
    if isinstance(part, TextPart):
        return {"text": part.text}
    shown: JsonObject = (
        {"url": part.url} if part.data is None else {"raw": base64.b64encode(part.data).decode()}
    )
    if part.media_type is not None:
        shown["mediaType"] = part.media_type
    if isinstance(part, FilePart) and part.filename is not None:
        shown["filename"] = part.filename
    return shown


def conversational(messages: Sequence[Message]) -> tuple[Message, ...]:
    """What a task's history shows: the user's and the agent's words (and
    the user's images and files)."""
    return tuple(
        m for m in messages if m.role in (Role.USER, Role.ASSISTANT) and (m.content or m.parts)
    )


def is_finished(turn: Sequence[Message]) -> bool:
    """Whether a stored turn ended with an answer (an assistant message without calls)."""
    last = turn[-1]
    return len(turn) > 1 and last.role is Role.ASSISTANT and not last.tool_calls


def view_from_turn(
    task_id: str,
    context_id: str,
    turn: list[Message],
    *,
    running: bool,
    cancelled: bool,
    record: TurnRecord | None = None,
    resumes: bool = False,
) -> TaskView:
    """A task's state from its stored turn (the user message and what followed
    it) and the turn's record: COMPLETED when it ended with an answer; else
    WORKING while it runs; INPUT_REQUIRED while calls of it wait for a
    decision; CANCELED when it was cancelled (recorded, or here) or a new
    message in its context replaced it while it waited; WORKING too when a
    stop interrupted it (``is_interrupted``) and the agent will resume it
    (``resumes``): a state A2A calls final must never change again; else
    FAILED (it failed, or it was interrupted and will not be resumed)."""
    last = turn[-1]
    at = last.created_at or turn[0].created_at
    assert at is not None, "stored messages carry created_at"
    history = conversational(turn)
    if is_finished(turn):
        output = _stored_output(last.content) if record is not None and record.output else None
        return TaskView(
            task_id,
            context_id,
            "TASK_STATE_COMPLETED",
            at,
            answer=last.content,
            output=output,
            history=history,
        )
    if running:
        return TaskView(task_id, context_id, "TASK_STATE_WORKING", at, history=history)
    record = record or TurnRecord()
    waiting = _waiting(turn, record)
    if waiting:
        return TaskView(task_id, context_id, INPUT_REQUIRED, at, history=history, waiting=waiting)
    replaced = is_superseded(record)
    if cancelled or replaced or record.failure == "cancelled":
        why = "a new message in its context replaced it" if replaced else "the task was canceled"
        return TaskView(task_id, context_id, "TASK_STATE_CANCELED", at, error=why, history=history)
    if resumes and record.failure is None:
        return TaskView(task_id, context_id, "TASK_STATE_WORKING", at, history=history)
    return TaskView(
        task_id,
        context_id,
        "TASK_STATE_FAILED",
        at,
        error="the turn ended without an answer",
        history=history,
    )


def _stored_output(text: str) -> JsonValue:
    """A typed turn's stored answer (validated JSON when it was stored) as its data."""
    try:
        value: JsonValue = json.loads(text)
    except ValueError:
        return None
    return value


def is_interrupted(turn: Sequence[Message], record: TurnRecord) -> bool:
    """Whether stored state shows a stop cut the turn short: no answer, no
    failure recorded, no call waiting for a decision, not replaced. Such a
    turn is resumed if it is its conversation's last and the agent resumes
    interrupted turns (``ChatAgent.resumes_interrupted``)."""
    replaced = is_superseded(record)
    return (
        not is_finished(turn)
        and record.failure is None
        and not replaced
        and not _waiting(turn, record)
    )


def retried_decisions(
    send: SendParams, turn: Sequence[Message], record: TurnRecord
) -> list[Decision] | None:
    """A follow-up on a task that no longer waits, read as its last decision
    sent again (a client that got no answer retries): the decisions it makes
    about the calls decided last (those of the turn's last pause), when each
    was taken that same way. None otherwise: no decision of those calls, or
    one the other way (a new decision, which a task that no longer waits
    does not take)."""
    decided = [a for a in record.approvals if a.approved is not None]
    if not decided:
        return None
    last = max(a.seq for a in decided)
    taken = {a.call_id: a.approved for a in decided if a.seq == last}
    calls = [c for m in turn if m.seq == last for c in m.tool_calls if c.id in taken]
    try:
        decisions = parse_decisions(send, calls)
    except A2AError:
        return None
    if any(decision.approve != taken[decision.call_id] for decision in decisions):
        return None
    return decisions


def _waiting(turn: Sequence[Message], record: TurnRecord) -> tuple[ToolCall, ...]:
    """The turn's calls without a result that its record says wait for a person."""
    pending = {a.call_id for a in record.approvals if a.approved is None}
    if not pending:
        return ()
    answered = {m.tool_call_id for m in turn if m.tool_call_id is not None}
    return tuple(c for m in turn for c in m.tool_calls if c.id in pending and c.id not in answered)


def agent_card(
    *,
    url: str,
    name: str,
    description: str,
    version: str,
    skills: list[tuple[str, str]],
    bearer_auth: bool,
    input_modes: Sequence[str] = ("text/plain",),
) -> JsonObject:
    """The 1.0 agent card: supportedInterfaces with protocolVersion, skills from toolsets."""
    card: JsonObject = {
        "name": name,
        "description": description,
        "version": version,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": A2A_VERSION}
        ],
        # What is implemented, no more: streaming (SendStreamingMessage and
        # SubscribeToTask), no push notifications, no extended card. A message is
        # text, and images and files (raw or url parts) when the model takes
        # them (``input_modes``; a data part is only a decision on a waiting
        # task, which the text "approve"/"deny" also makes: not an input mode);
        # answers are text, and a waiting task's status message carries its
        # calls as JSON data.
        "capabilities": {"streaming": True, "pushNotifications": False, "extendedAgentCard": False},
        "defaultInputModes": list[JsonValue](input_modes),
        "defaultOutputModes": ["text/plain", "application/json"],
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
