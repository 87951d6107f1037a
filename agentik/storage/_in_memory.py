"""The in-memory backend: plain dicts and lists, for tests, demos and benchmarks.

Every method checkpoints first and then applies its change without awaiting,
so a change is atomic with respect to other trio tasks: seq numbers are
gapless per conversation and a write is visible as soon as it returns. Writes
apply at once, so ``submit`` hands back an already resolved ``Pending``. Values
handed out are immutable or fresh lists, never the store's own containers.

Here: the message store and the bundle (``in_memory_storage``). Beside it: a
conversation's state and archive form (``_in_memory_conversation``), the
working memory and reflection stores (``_in_memory_notes``), the skill store
(``_in_memory_skills``).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import final

import attrs
import outcome
import trio

from agentik._errors import DuplicateKeyError, StoreError
from agentik._messages import Message, Role, TokenStats
from agentik._parts import Part, TextPart, blob_hash
from agentik._sync import Pending
from agentik.storage._archive import (
    ArchivedReflection,
    ArchiveRecord,
)
from agentik.storage._archive_rules import check_archive
from agentik.storage._common import Clock, check_at_least, to_micros, utc_now
from agentik.storage._in_memory_conversation import Conversation, restored
from agentik.storage._in_memory_notes import InMemoryReflectionStore, InMemoryWorkingMemoryStore
from agentik.storage._in_memory_skills import InMemorySkillStore
from agentik.storage._protocols import DEFAULT_PAGE_SIZE, Storage
from agentik.storage._secrets import InMemorySecretStore
from agentik.storage._values import (
    Approval,
    ConversationSnapshot,
    KeyedTurn,
    Summary,
    TurnRecord,
)


@final
class InMemoryMessageStore:
    """Histories kept in a dict of lists."""

    def __init__(
        self,
        clock: Clock = utc_now,
        *,
        notes: InMemoryWorkingMemoryStore | None = None,
        reflections: InMemoryReflectionStore | None = None,
    ) -> None:
        self._conversations: dict[str, Conversation] = {}
        self._blobs: dict[str, tuple[bytes, set[str]]] = {}
        """Hash -> a part's inline data, kept once, and the conversations using it."""
        self._clock = clock
        # The bundle's other stores, so a conversation is deleted, exported and
        # imported whole (``in_memory_storage`` wires them).
        self._notes = notes
        self._reflections = reflections

    async def append(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Message:
        pending = await self.submit(conversation_id, message, idempotency_key=idempotency_key)
        return await pending.wait()

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        await trio.lowlevel.checkpoint()
        return self._add(conversation_id, message, idempotency_key)

    def submit_nowait(self, conversation_id: str, message: Message) -> Pending[Message] | None:
        """``submit`` without the checkpoint: there is always room."""
        return self._add(conversation_id, message, None)

    def _add(
        self, conversation_id: str, message: Message, idempotency_key: str | None
    ) -> Pending[Message]:
        now = self._clock()
        conversation = self._conversations.get(conversation_id)
        if idempotency_key is not None and conversation is not None:
            seq = conversation.keys.get(idempotency_key)
            if seq is not None:
                pending: Pending[Message] = Pending()
                pending.set(outcome.Error(_duplicate(conversation_id, idempotency_key, seq)))
                return pending
        if conversation is None:
            conversation = self._conversations[conversation_id] = Conversation()
        parts = message.parts
        # Positional, not ``attrs.evolve`` (several times dearer, once per message);
        # a test pins Message's field order.
        stored = Message(
            message.role,
            message.content,
            message.tool_calls,
            message.tool_call_id,
            message.usage,
            len(conversation.messages) + 1,
            now,
            self._keep_blobs(conversation_id, conversation, parts) if parts else parts,
        )
        conversation.messages.append(stored)
        if idempotency_key is not None:
            conversation.keys[idempotency_key] = len(conversation.messages)
            conversation.keyed.append((len(conversation.messages), idempotency_key))
        return Pending.completed(stored)

    def _keep_blobs(
        self, conversation_id: str, conversation: Conversation, parts: Sequence[Part]
    ) -> tuple[Part, ...]:
        """``parts`` holding the store's one copy of each inline data."""
        kept: builtins.list[Part] = []
        for part in parts:
            if isinstance(part, TextPart) or part.data is None:
                kept.append(part)
                continue
            key = blob_hash(part.data)
            stored, users = self._blobs.setdefault(key, (part.data, set()))
            users.add(conversation_id)
            conversation.blobs.add(key)
            kept.append(part if stored is part.data else attrs.evolve(part, data=stored))
        return tuple(kept)

    def _drop_blobs(self, conversation_id: str, conversation: Conversation) -> None:
        for key in conversation.blobs:
            _, users = self._blobs[key]
            users.discard(conversation_id)
            if not users:
                del self._blobs[key]

    async def count_blobs(self) -> int:
        await trio.lowlevel.checkpoint()
        return len(self._blobs)

    async def get_messages(
        self, conversation_id: str, *, after_seq: int = 0, page_size: int = DEFAULT_PAGE_SIZE
    ) -> AsyncIterator[Message]:
        check_at_least("page_size", page_size, 1)
        position = max(after_seq, 0)
        while True:
            await trio.lowlevel.checkpoint()
            conversation = self._conversations.get(conversation_id)
            page = (
                []
                if conversation is None
                else conversation.messages[position : position + page_size]
            )
            for message in page:
                yield message
            if len(page) < page_size:
                return
            position += page_size

    async def load_conversation(
        self, conversation_id: str, *, page_size: int = DEFAULT_PAGE_SIZE, after_seq: int = 0
    ) -> ConversationSnapshot:
        """A page of history, the active notes and the latest summary, as of one
        moment (nothing awaits in between)."""
        check_at_least("page_size", page_size, 1)
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        start = max(after_seq, 0)
        messages = () if conversation is None else conversation.messages[start : start + page_size]
        summaries = () if conversation is None else conversation.summaries
        notes = [] if self._notes is None else self._notes._active_of(conversation_id)
        return ConversationSnapshot(
            tuple(messages), tuple(notes), summaries[-1] if summaries else None
        )

    async def token_stats(self, conversation_id: str) -> TokenStats:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        usages = [] if conversation is None else [m.usage for m in conversation.messages]
        counted = [u for u in usages if u is not None]
        return TokenStats(
            prompt_tokens=sum(u.prompt_tokens for u in counted),
            completion_tokens=sum(u.completion_tokens for u in counted),
            messages=len(counted),
        )

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        return None if conversation is None else conversation.keys.get(key)

    async def list_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        check_at_least("limit", limit, 0)
        await trio.lowlevel.checkpoint()
        ids = sorted(c for c in self._conversations if after is None or c > after)
        return ids[:limit]

    async def list_idempotency_keys(
        self, conversation_id: str, *, before_seq: int | None = None, limit: int = 100
    ) -> builtins.list[tuple[int, str]]:
        check_at_least("limit", limit, 0)
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        return [] if conversation is None else conversation.keys_before(before_seq)[:limit]

    async def list_keyed_turns(
        self,
        conversation_id: str,
        *,
        before_seq: int | None = None,
        limit: int = 100,
        key_suffix: str = "",
        max_messages: int = 1000,
    ) -> builtins.list[KeyedTurn]:
        check_at_least("limit", limit, 0)
        check_at_least("max_messages", max_messages, 1)
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return []
        return conversation.keyed_turns(before_seq, limit, key_suffix, max_messages)

    async def count_idempotency_keys(self, conversation_id: str, *, key_suffix: str = "") -> int:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return 0
        return sum(key.endswith(key_suffix) for key in conversation.keys)

    # --- the turn ledger --------------------------------------------------------

    async def submit_awaiting(
        self, conversation_id: str, message: Message, call_ids: Sequence[str]
    ) -> Pending[Message]:
        await trio.lowlevel.checkpoint()
        calls = {call.id for call in message.tool_calls}
        unknown = [c for c in call_ids if c not in calls]
        if unknown or len(set(call_ids)) != len(call_ids):
            return Pending.failed(StoreError(_awaiting_error(call_ids, unknown)))
        pending = self._add(conversation_id, message, None)
        stored = pending.result()
        assert stored.seq is not None
        conversation = self._conversations[conversation_id]
        asked = stored.created_at or self._clock()
        for call_id in call_ids:
            at = (stored.seq, call_id)
            conversation.approvals[at] = Approval(seq=stored.seq, call_id=call_id)
            conversation.approval_times[at] = (asked, None)
        return pending

    async def submit_decision(
        self,
        conversation_id: str,
        seq: int,
        call_id: str,
        *,
        approve: bool,
        reason: str = "",
        result: Message | None = None,
    ) -> Pending[Message | None]:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        approval = None if conversation is None else conversation.approvals.get((seq, call_id))
        if conversation is None or approval is None or approval.approved is not None:
            return Pending.failed(StoreError(_not_waiting(conversation_id, seq, call_id)))
        stored = None if result is None else self._add(conversation_id, result, None).result()
        decided = attrs.evolve(approval, approved=approve, reason=reason)
        conversation.approvals[(seq, call_id)] = decided
        asked, _ = conversation.approval_times[(seq, call_id)]
        now = stored.created_at if stored is not None and stored.created_at else self._clock()
        conversation.approval_times[(seq, call_id)] = (asked, now)
        return Pending.completed(stored)

    async def submit_turn_failure(self, conversation_id: str, seq: int, code: str) -> Pending[None]:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        if conversation is None or not 1 <= seq <= len(conversation.messages):
            return Pending.failed(StoreError(f"conversation {conversation_id!r} has no seq {seq}"))
        conversation.failures[seq] = (code, self._clock())
        return Pending.completed(None)

    async def submit_turn_output(self, conversation_id: str, seq: int) -> Pending[None]:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        if conversation is None or not 1 <= seq <= len(conversation.messages):
            return Pending.failed(StoreError(f"conversation {conversation_id!r} has no seq {seq}"))
        conversation.outputs.setdefault(seq, self._clock())
        return Pending.completed(None)

    async def turn_record(self, conversation_id: str, seq: int) -> TurnRecord:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return TurnRecord()
        end = next(
            (m.seq for m in conversation.messages[seq:] if m.role is Role.USER and m.seq),
            len(conversation.messages) + 1,
        )
        approvals = tuple(a for (at, _), a in conversation.approvals.items() if seq < at < end)
        failure = conversation.failures.get(seq)
        return TurnRecord(
            approvals=approvals,
            failure=None if failure is None else failure[0],
            output=seq in conversation.outputs,
        )

    async def interrupted_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        check_at_least("limit", limit, 0)
        await trio.lowlevel.checkpoint()
        found = [
            conversation_id
            for conversation_id, conversation in self._conversations.items()
            if (after is None or conversation_id > after) and conversation.interrupted()
        ]
        return sorted(found)[:limit]

    # --- a conversation as a whole: delete, export, import ------------------------

    async def delete_conversation(
        self, conversation_id: str, *, idle_before: datetime | None = None
    ) -> bool:
        cutoff = None if idle_before is None else to_micros(idle_before)
        await trio.lowlevel.checkpoint()
        self._clock()  # every write reads the clock once, as the SQLite writer does per batch
        if cutoff is not None:
            conversation = self._conversations.get(conversation_id)
            newest = None if conversation is None else conversation.messages[-1].created_at
            if newest is None or to_micros(newest) >= cutoff:
                return False
        dropped = self._conversations.pop(conversation_id, None)
        found = dropped is not None
        if dropped is not None:
            self._drop_blobs(conversation_id, dropped)
        if self._notes is not None:
            found = self._notes._drop(conversation_id) or found
        if self._reflections is not None:
            found = self._reflections._drop(conversation_id) or found
        return found

    async def idle_conversations(
        self, before: datetime, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        check_at_least("limit", limit, 0)
        cutoff = to_micros(before)
        await trio.lowlevel.checkpoint()
        idle = []
        for conversation_id, conversation in self._conversations.items():
            if (after is not None and conversation_id <= after) or not conversation.messages:
                continue
            newest = conversation.messages[-1].created_at
            if newest is not None and to_micros(newest) < cutoff:
                idle.append(conversation_id)
        return sorted(idle)[:limit]

    async def export_conversation(self, conversation_id: str) -> AsyncIterator[ArchiveRecord]:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        if conversation is not None:
            for message in conversation.archived_messages():
                yield message
        if self._notes is not None:
            for note in self._notes._of(conversation_id):
                yield note
        if self._reflections is not None:
            for reflection in await self._reflections.list_for_conversation(conversation_id):
                yield ArchivedReflection(reflection=reflection)
        if conversation is not None:
            for record in conversation.archived_ledger():
                yield record

    async def import_conversation(
        self, conversation_id: str, records: Sequence[ArchiveRecord]
    ) -> int:
        await trio.lowlevel.checkpoint()
        self._clock()
        check_archive(records)
        if self._holds_anything(conversation_id):
            raise StoreError(
                f"conversation {conversation_id!r} already holds data; delete it before importing"
            )
        conversation, notes, reflections = restored(records)
        if conversation.messages:
            conversation.messages[:] = [
                attrs.evolve(m, parts=self._keep_blobs(conversation_id, conversation, m.parts))
                if m.parts
                else m
                for m in conversation.messages
            ]
            self._conversations[conversation_id] = conversation
        if self._notes is not None:
            self._notes._restore(conversation_id, notes)
        if self._reflections is not None:
            self._reflections._restore(conversation_id, reflections)
        return len(conversation.messages)

    def _holds_anything(self, conversation_id: str) -> bool:
        return (
            conversation_id in self._conversations
            or (self._notes is not None and bool(self._notes._of(conversation_id)))
            or (
                self._reflections is not None
                and any(
                    r.conversation_id == conversation_id
                    for r in self._reflections._reflections.values()
                )
            )
        )

    # --- summaries ----------------------------------------------------------------

    async def submit_summary(
        self, conversation_id: str, through_seq: int, text: str
    ) -> Pending[Summary]:
        await trio.lowlevel.checkpoint()
        now = self._clock()  # every write reads the clock once, refused or not, as a writer's batch
        conversation = self._conversations.get(conversation_id)
        if conversation is None or not 1 <= through_seq <= len(conversation.messages):
            return Pending.failed(
                StoreError(
                    f"conversation {conversation_id!r} has no message {through_seq}"
                    " to summarize up to"
                )
            )
        summaries = conversation.summaries
        if summaries and through_seq <= summaries[-1].through_seq:
            covered = summaries[-1].through_seq
            return Pending.failed(
                StoreError(
                    f"a summary of conversation {conversation_id!r} must cover more than the"
                    f" latest (through seq {covered}), got through seq {through_seq}"
                )
            )
        summary = Summary(through_seq=through_seq, text=text, created_at=now)
        summaries.append(summary)
        return Pending.completed(summary)

    async def latest_summary(self, conversation_id: str) -> Summary | None:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        if conversation is None or not conversation.summaries:
            return None
        return conversation.summaries[-1]

    async def list_summaries(
        self, conversation_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> builtins.list[Summary]:
        await trio.lowlevel.checkpoint()
        conversation = self._conversations.get(conversation_id)
        if conversation is None:
            return []
        later = [s for s in conversation.summaries if s.through_seq > after_seq]
        return later[:limit]


def _awaiting_error(call_ids: Sequence[str], unknown: Sequence[str]) -> str:
    if unknown:
        return f"calls {builtins.list(unknown)!r} are not tool calls of the message"
    return f"call ids must be unique, got {builtins.list(call_ids)!r}"


def _not_waiting(conversation_id: str, seq: int, call_id: str) -> str:
    return (
        f"call {call_id!r} of message {seq} in conversation {conversation_id!r}"
        " is not waiting for a decision"
    )


def _duplicate(conversation_id: str, key: str, seq: int) -> DuplicateKeyError:
    return DuplicateKeyError(
        f"idempotency key {key!r} was already used in conversation {conversation_id!r}"
        f" (message seq {seq})"
    )


def in_memory_storage(*, clock: Clock = utc_now) -> Storage:
    """A fresh bundle of in-memory stores; nothing survives the process.

    Args:
        clock: where timestamps come from (aware UTC); every write reads it
            exactly once, so two backends given equal clocks agree exactly.
    """
    notes = InMemoryWorkingMemoryStore(clock)
    reflections = InMemoryReflectionStore(clock)
    return Storage(
        message_store=InMemoryMessageStore(clock, notes=notes, reflections=reflections),
        working_memory_store=notes,
        reflection_store=reflections,
        skill_store=InMemorySkillStore(clock),
        secret_store=InMemorySecretStore(),
    )
