"""One conversation of the in-memory backend, and its archive form.

``InMemoryMessageStore`` keeps a ``Conversation`` per id; export reads its
records back out (``archived_messages``, ``archived_ledger``) and import
rebuilds one from checked records (``restored``), the notes and reflections
the records carry handed back for their own stores.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from datetime import datetime

import attrs

from agentik._errors import StoreError
from agentik._memory import Reflection
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
from agentik.storage._archive_rules import check_summaries
from agentik.storage._values import Approval, KeyedTurn, Summary


@attrs.define
class Conversation:
    """One conversation's history, keys, ledger and summaries."""

    messages: list[Message] = attrs.Factory(list)
    """``messages[i]`` has ``seq == i + 1``."""
    keys: dict[str, int] = attrs.Factory(dict)
    """Idempotency key -> seq."""
    keyed: list[tuple[int, str]] = attrs.Factory(list)
    """``(seq, key)`` in seq order (appends only grow it): bisected for a page."""
    approvals: dict[tuple[int, str], Approval] = attrs.Factory(dict)
    """``(seq, call id)`` -> its approval, in the order they were recorded."""
    approval_times: dict[tuple[int, str], tuple[datetime, datetime | None]] = attrs.Factory(dict)
    """``(seq, call id)`` -> when it was asked and decided (for export)."""
    failures: dict[int, tuple[str, datetime]] = attrs.Factory(dict)
    """Seq of a failed turn's user message -> its code and when it was recorded."""
    outputs: dict[int, datetime] = attrs.Factory(dict)
    """Seqs of the user messages of turns that answered with a typed output."""
    summaries: list[Summary] = attrs.Factory(list)
    """Oldest first; each covers more than the one before."""
    blobs: set[str] = attrs.Factory(set)
    """Hashes of the blobs its messages' parts hold (``InMemoryMessageStore._blobs``)."""

    def interrupted(self) -> bool:
        """Whether the last turn is interrupted (``interrupted_conversations``)."""
        messages = self.messages
        last = messages[-1] if messages else None
        if last is None or (last.role is Role.ASSISTANT and not last.tool_calls):
            return False
        start = next((m.seq for m in reversed(messages) if m.role is Role.USER), None)
        if start is None or start in self.failures:
            return False
        return not any(
            at > start and approval.approved is None for (at, _), approval in self.approvals.items()
        )

    def keys_before(self, before_seq: int | None) -> list[tuple[int, str]]:
        """``(seq, key)`` of its keyed messages before ``before_seq``, newest first."""
        return sorted(
            (
                (seq, key)
                for key, seq in self.keys.items()
                if before_seq is None or seq < before_seq
            ),
            reverse=True,
        )

    def keyed_turns(
        self, before_seq: int | None, limit: int, key_suffix: str, max_messages: int
    ) -> list[KeyedTurn]:
        """Its turns whose user message has a key ending in ``key_suffix``, newest
        first: that message and at most ``max_messages - 1`` after it, up to the
        next user message."""
        keyed, messages = self.keyed, self.messages
        position = len(keyed) if before_seq is None else bisect_left(keyed, (before_seq,))
        turns: list[KeyedTurn] = []
        while position > 0 and len(turns) < limit:
            position -= 1
            seq, key = keyed[position]
            if not key.endswith(key_suffix):
                continue
            turn = [messages[seq - 1]]
            for message in messages[seq : seq - 1 + max_messages]:
                if message.role is Role.USER:
                    break
                turn.append(message)
            turns.append(KeyedTurn(key=key, messages=tuple(turn)))
        return turns

    def archived_messages(self) -> Iterator[ArchivedMessage]:
        """Its messages as archive records, each with its idempotency key."""
        keys = {seq: key for key, seq in self.keys.items()}
        for message in list(self.messages):
            yield ArchivedMessage(message=message, idempotency_key=keys.get(message.seq or 0))

    def archived_ledger(self) -> Iterator[ArchiveRecord]:
        """Its approvals, failures, typed outputs and summaries as archive records."""
        # By seq; a message's approvals stay in the order they were recorded.
        for key, approval in sorted(self.approvals.items(), key=_seq_of):
            asked, decided = self.approval_times[key]
            yield ArchivedApproval(approval=approval, created_at=asked, decided_at=decided)
        for seq, (code, at) in sorted(self.failures.items()):
            yield ArchivedFailure(seq=seq, code=code, created_at=at)
        for seq, at in sorted(self.outputs.items()):
            yield ArchivedOutput(seq=seq, created_at=at)
        for summary in list(self.summaries):
            yield ArchivedSummary(summary=summary)


def restored(
    records: Sequence[ArchiveRecord],
) -> tuple[Conversation, list[ArchivedNote], list[Reflection]]:
    """The conversation ``records`` (checked by ``check_archive``) hold, its
    messages' parts as given, and the notes and reflections among them;
    ``StoreError`` when its seqs, keys or summaries do not hold together."""
    conversation = Conversation()
    notes: list[ArchivedNote] = []
    reflections: list[Reflection] = []
    for record in records:
        if isinstance(record, ArchivedMessage):
            message = record.message
            expected = len(conversation.messages) + 1
            if message.seq != expected or message.created_at is None:
                raise StoreError(_bad_seq(message.seq, expected))
            conversation.messages.append(message)  # its blobs are kept once it all checks
            key = record.idempotency_key
            if key is not None:
                if key in conversation.keys:
                    raise StoreError(f"idempotency key {key!r} appears twice")
                conversation.keys[key] = expected
                conversation.keyed.append((expected, key))
        elif isinstance(record, ArchivedNote):
            notes.append(record)
        elif isinstance(record, ArchivedReflection):
            reflections.append(record.reflection)
        elif isinstance(record, ArchivedApproval):
            at = (record.approval.seq, record.approval.call_id)
            conversation.approvals[at] = record.approval
            conversation.approval_times[at] = (record.created_at, record.decided_at)
        elif isinstance(record, ArchivedFailure):
            conversation.failures[record.seq] = (record.code, record.created_at)
        elif isinstance(record, ArchivedOutput):
            conversation.outputs[record.seq] = record.created_at
        else:
            conversation.summaries.append(record.summary)
    check_summaries(conversation.summaries, len(conversation.messages))
    return conversation, notes, reflections


def _seq_of(item: tuple[tuple[int, str], Approval]) -> int:
    return item[0][0]


def _bad_seq(seq: int | None, expected: int) -> str:
    return f"imported messages must have seqs 1, 2, 3 … in order: expected {expected}, got {seq}"
