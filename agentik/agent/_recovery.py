"""Reading a turn's state back from its stored messages. Pure.

After a restart (or a reload) a conversation's last turn is in one of these
states, told apart by its messages and its ``TurnRecord``:

- finished: its last message is an assistant answer without tool calls;
- failed: the record holds a failure (the turn reported it; left alone);
- waiting: some call without a result waits for a decision;
- superseded: a new message came while its calls waited (they were denied
  with ``SUPERSEDED_REASON``), and that message is not stored (lost with a
  failed write or a crash): over, as the person moved on; left alone;
- interrupted: none of the above (the process stopped mid-turn): resumed.

``resume_event`` turns the stored state into the ``Resume`` event that puts a
fresh ``TurnMachine`` where the turn stopped.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from agentik._errors import TurnError
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.agent._events import TurnResult
from agentik.agent._turn_events import SUPERSEDED_REASON, CallPlan, Resume
from agentik.storage import TurnRecord


class StoredState(enum.Enum):
    FINISHED = "finished"
    FAILED = "failed"
    WAITING = "waiting"
    SUPERSEDED = "superseded"
    INTERRUPTED = "interrupted"


def last_turn_start(history: Sequence[Message]) -> int | None:
    """Index of the last user message, None if there is none."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].role is Role.USER:
            return i
    return None


def is_finished(turn: Sequence[Message]) -> bool:
    """Whether ``turn`` (a user message and what followed) ended with an answer."""
    last = turn[-1]
    return len(turn) > 1 and last.role is Role.ASSISTANT and not last.tool_calls


def open_calls(turn: Sequence[Message]) -> list[ToolCall]:
    """The turn's recorded calls that have no result, in the order made."""
    answered = {m.tool_call_id for m in turn if m.tool_call_id is not None}
    return [c for m in turn for c in m.tool_calls if c.id not in answered]


def status_of(turn: Sequence[Message], record: TurnRecord) -> StoredState:
    if is_finished(turn):
        return StoredState.FINISHED
    if record.failure is not None:
        return StoredState.FAILED
    waiting = {a.call_id for a in record.approvals if a.approved is None}
    if any(call.id in waiting for call in open_calls(turn)):
        return StoredState.WAITING
    if is_superseded(record):
        return StoredState.SUPERSEDED
    return StoredState.INTERRUPTED


def is_superseded(record: TurnRecord) -> bool:
    """Whether a new message superseded the turn while calls of it waited:
    they were denied with ``SUPERSEDED_REASON`` (written with the denials, so
    it survives a restart that lost the new message)."""
    return any(a.approved is False and a.reason == SUPERSEDED_REASON for a in record.approvals)


def resume_event(
    turn: Sequence[Message],
    record: TurnRecord,
    plan: Callable[[ToolCall], CallPlan],
) -> Resume:
    """The ``Resume`` event for ``turn`` as stored: model calls made, its open
    calls planned by ``plan``, and their decisions (the machine decides what
    follows: at the step limit, it fails once the calls are answered)."""
    steps = sum(1 for m in turn if m.role is Role.ASSISTANT)
    calls = open_calls(turn)
    ids = {c.id for c in calls}
    decisions = {a.call_id: a.approved for a in record.approvals if a.call_id in ids}
    return Resume(
        steps,
        [plan(call) for call in calls],
        awaiting=frozenset(c for c, approved in decisions.items() if approved is None),
        approved=frozenset(c for c, approved in decisions.items() if approved is True),
    )


def turn_messages(history: Sequence[Message], start: int) -> list[Message]:
    """The turn starting at ``history[start]``: its user message and what
    follows up to the next user message."""
    out = [history[start]]
    for message in history[start + 1 :]:
        if message.role is Role.USER:
            break
        out.append(message)
    return out


def replay_of(turn: Sequence[Message]) -> TurnResult | None:
    """The result of ``turn`` (its user message first) if it finished."""
    last = turn[-1]
    if len(turn) < 2 or last.role is not Role.ASSISTANT or last.tool_calls:
        return None
    return TurnResult(last.content, turn, usage_of(turn))


def usage_of(messages: Sequence[Message]) -> TokenUsage:
    usage = TokenUsage()
    for m in messages:
        if m.usage is not None:
            usage += m.usage
    return usage


def not_resumable(key: str) -> TurnError:
    """A turn sent again with its idempotency ``key`` that did not finish and
    has later turns after it: nothing resumes it (409 over HTTP)."""
    return TurnError(
        f"the turn with idempotency key {key!r} did not finish and later"
        " turns followed it; it cannot be resumed",
        code="not_resumable",
    )
