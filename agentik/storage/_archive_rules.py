"""What an imported conversation must be: the history the agent itself writes.
Pure: values in, the first broken rule out.

An archive is data from outside (a file a person may have edited), and a
store keeps whatever it is given, so ``FullMessageStore.import_conversation``
checks the whole conversation with ``check_archive`` before anything is
written. A history a model API refuses would fail every later turn of the
conversation for good (a strict backend answers 400 to each), so the rules
are those of the model APIs and of the agent's own turns:

- messages have seqs 1, 2, 3 … and their times;
- no ``system`` message: the agent builds the system prompt afresh for every
  request and never stores one, so a stored one could only be an instruction
  planted by whoever wrote the file;
- only assistant messages carry tool calls, only tool messages answer one;
- a call id is used once in the conversation (Anthropic refuses repeated
  ``tool_use`` ids; a result could not say which call it answers);
- the results of an assistant message's calls come right after it, one per
  call, before any other message; only the conversation's last calls may
  still be open (a turn waiting for approval, or interrupted);
- counts fit a signed 64-bit integer (both SQL backends store them so) and
  token counts are not negative;
- approvals name a call of the assistant message at their seq, once, and are
  decided (``approved`` set) exactly when they have a decision time; a turn
  failure and a typed turn name a user message; summaries chain over the
  messages;
- the records come in the order an export writes them (messages, notes,
  reflections oldest first, approvals, failures and typed turns by seq,
  summaries), so a
  conversation exported again after an import is the same file but for the
  ids of notes and reflections, which the importing store numbers itself.

``ArchiveRuleError`` names the rule and the message (by seq) that breaks it,
and the position of its record (``index``), which the JSON Lines reader turns
into a line number.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from agentik._errors import StoreError
from agentik._messages import Message, Role
from agentik.storage._archive import (
    ArchivedApproval,
    ArchivedFailure,
    ArchivedMessage,
    ArchivedNote,
    ArchivedOutput,
    ArchivedReflection,
    ArchivedSummary,
    ArchiveRecord,
)
from agentik.storage._values import Summary

MAX_INTEGER = 2**63 - 1
"""The largest seq, id or token count: SQLite's INTEGER and PostgreSQL's bigint."""

_ORDER: dict[type, int] = {
    ArchivedMessage: 0,
    ArchivedNote: 1,
    ArchivedReflection: 2,
    ArchivedApproval: 3,
    ArchivedFailure: 4,
    ArchivedOutput: 5,
    ArchivedSummary: 6,
}
_KIND = {
    ArchivedMessage: "message",
    ArchivedNote: "note",
    ArchivedReflection: "reflection",
    ArchivedApproval: "approval",
    ArchivedFailure: "turn failure",
    ArchivedOutput: "typed turn",
    ArchivedSummary: "summary",
}


class ArchiveRuleError(StoreError):
    """An imported conversation breaks a rule; nothing of it was stored."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index
        """Position of the offending record in the sequence checked."""


@attrs.define
class HistoryCheck:
    """The message rules, fed one message at a time (``add`` returns the
    first problem, or None); ``calls`` maps each call id to its message's seq."""

    seq: int = 0
    calls: dict[str, int] = attrs.field(factory=dict)
    waiting: dict[str, None] = attrs.field(factory=dict)
    """Calls of the latest assistant message without a result yet, in order."""
    answered: set[str] = attrs.field(factory=set)
    roles: list[Role] = attrs.field(factory=list)

    def add(self, message: Message) -> str | None:
        seq = self.seq + 1
        if message.seq != seq:
            return f"messages must have seqs 1, 2, 3 … in order: expected {seq}, got {message.seq}"
        if message.created_at is None:
            return f"message {seq} has no created_at"
        self.seq = seq
        self.roles.append(message.role)
        role = message.role
        if role is Role.SYSTEM:
            return (
                f"message {seq} is a system message: agentik never stores one (the system"
                " prompt is built afresh for every request)"
            )
        if message.tool_calls and role is not Role.ASSISTANT:
            return (
                f"message {seq} is a {role.value} message with tool calls:"
                " only assistant messages make calls"
            )
        if message.tool_call_id is not None and role is not Role.TOOL:
            return (
                f"message {seq} is a {role.value} message with a tool_call_id:"
                " only tool results answer a call"
            )
        if message.usage is not None:
            for name in ("prompt_tokens", "completion_tokens"):
                count = getattr(message.usage, name)
                if not 0 <= count <= MAX_INTEGER:
                    return f"message {seq} has {name} {count}: expected 0..{MAX_INTEGER}"
        if role is Role.TOOL:
            return self._result(seq, message.tool_call_id)
        if self.waiting:
            return (
                f"message {seq} ({role.value}) comes while calls {_names(self.waiting)} have no"
                " result: the results of a message's calls follow it"
            )
        for call in message.tool_calls:
            made = self.calls.get(call.id)
            if made is not None:
                return (
                    f"message {seq} makes call {call.id!r} again (message {made} made it):"
                    " a call id is used once in a conversation"
                )
            self.calls[call.id] = seq
            self.waiting[call.id] = None
        return None

    def _result(self, seq: int, call_id: str | None) -> str | None:
        if call_id is None:
            return f"message {seq} is a tool result without a tool_call_id"
        if call_id in self.waiting:
            del self.waiting[call_id]
            self.answered.add(call_id)
            return None
        if call_id in self.answered:
            return f"message {seq} is a second result for call {call_id!r}"
        return f"message {seq} answers call {call_id!r}, which no message before it waits for"


def check_summaries(summaries: Sequence[Summary], messages: int) -> None:
    """An imported chain of summaries (the importing store checks it): each
    covers more than the one before, and only messages the conversation has."""
    covered = 0
    for summary in summaries:
        if not covered < summary.through_seq <= messages or summary.created_at is None:
            raise StoreError(
                f"an imported summary through seq {summary.through_seq} must cover more"
                f" than the one before (through seq {covered}) and at most the"
                f" {messages} messages"
            )
        covered = summary.through_seq


def _names(calls: dict[str, None]) -> str:
    shown = ", ".join(repr(c) for c in list(calls)[:3])
    return shown + (", …" if len(calls) > 3 else "")


def check_archive(records: Sequence[ArchiveRecord]) -> None:
    """Raise ``ArchiveRuleError`` for the first record that breaks a rule."""
    history = HistoryCheck()
    keys: dict[str, int] = {}
    approvals: set[tuple[int, str]] = set()
    rank = 0
    last: ArchiveRecord | None = None
    for index, record in enumerate(records):
        order = _ORDER[type(record)]
        if order < rank:
            raise ArchiveRuleError(
                f"a {_KIND[type(record)]} record comes after the {_KIND[type(last)]} records:"
                " an archive lists messages, notes, reflections, approvals, turn failures"
                " and summaries, in that order",
                index,
            )
        rank = order
        problem = _problem(record, last, history, keys, approvals)
        if problem is not None:
            raise ArchiveRuleError(problem, index)
        last = record


def _problem(
    record: ArchiveRecord,
    last: ArchiveRecord | None,
    history: HistoryCheck,
    keys: dict[str, int],
    approvals: set[tuple[int, str]],
) -> str | None:
    if isinstance(record, ArchivedMessage):
        problem = history.add(record.message)
        key = record.idempotency_key
        if problem is None and key is not None:
            if key in keys:
                return (
                    f"message {history.seq} reuses idempotency key {key!r} of message {keys[key]}"
                )
            keys[key] = history.seq
        return problem
    if isinstance(record, ArchivedNote):
        return _id_problem("note", record.entry.id)
    if isinstance(record, ArchivedReflection):
        if isinstance(last, ArchivedReflection) and (
            record.reflection.created_at < last.reflection.created_at
        ):
            return "reflections must be listed oldest first"
        return _id_problem("reflection", record.reflection.id)
    if isinstance(record, ArchivedApproval):
        return _approval_problem(record, last, history, approvals)
    if isinstance(record, ArchivedFailure):
        earlier = last.seq if isinstance(last, ArchivedFailure) else None
        return _turn_mark_problem(record.seq, earlier, history, "turn failure")
    if isinstance(record, ArchivedOutput):
        earlier = last.seq if isinstance(last, ArchivedOutput) else None
        return _turn_mark_problem(record.seq, earlier, history, "typed turn")
    summary = record.summary
    covered = last.summary.through_seq if isinstance(last, ArchivedSummary) else 0
    if not covered < summary.through_seq <= history.seq or summary.created_at is None:
        return (
            f"a summary through seq {summary.through_seq} must cover more than the one"
            f" before (through seq {covered}) and at most the {history.seq} messages,"
            " and have its created_at"
        )
    return None


def _id_problem(kind: str, value: int) -> str | None:
    if 1 <= value <= MAX_INTEGER:
        return None
    return f"a {kind} has id {value}: expected 1..{MAX_INTEGER}"


def _approval_problem(
    record: ArchivedApproval,
    last: ArchiveRecord | None,
    history: HistoryCheck,
    approvals: set[tuple[int, str]],
) -> str | None:
    approval = record.approval
    seq, call_id = approval.seq, approval.call_id
    if isinstance(last, ArchivedApproval) and seq < last.approval.seq:
        return "approvals must be listed by seq"
    if history.calls.get(call_id) != seq:
        return f"an approval names call {call_id!r} of message {seq}, which made no such call"
    if (seq, call_id) in approvals:
        return f"call {call_id!r} has two approvals"
    approvals.add((seq, call_id))
    if (approval.approved is None) != (record.decided_at is None):
        return (
            f"the approval of call {call_id!r} must have a decided_at exactly when it is"
            " decided (approved true or false)"
        )
    return None


def _turn_mark_problem(
    seq: int, earlier: int | None, history: HistoryCheck, kind: str
) -> str | None:
    """A record that marks one turn (its failure, its typed answer): by seq,
    one per turn, on a user message."""
    if earlier is not None and seq <= earlier:
        return f"{kind}s must be listed by seq, one per turn"
    if not 1 <= seq <= history.seq or history.roles[seq - 1] is not Role.USER:
        return f"a {kind} names seq {seq}, which is not a user message"
    return None
