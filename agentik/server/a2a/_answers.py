"""A follow-up message's answer to a task waiting for input: pure, no I/O.

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

import re
from collections.abc import Sequence

import attrs

from agentik._json import JsonObject, JsonValue
from agentik._messages import ToolCall
from agentik.agent import ElicitationAction, ElicitationRequest
from agentik.server.a2a._rpc import invalid_params
from agentik.server.a2a._send import SendParams


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
