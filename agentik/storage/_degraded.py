"""``full_storage``: every bundle as a ``Storage``, stand-ins for what a seed one lacks.

A ``Storage`` (what agentik's three backends yield, or a user's full backend)
passes through unchanged. A plain ``StorageBundle`` is taken for what its type
says, the four seed stores, whatever objects it holds: nothing here asks a
store what it can do. Its message store and working-memory store are wrapped
in stand-ins that give the rest of the full protocol a degraded behaviour,
the same for every seed backend, and ``Storage.degraded`` says so. The
behaviours, one per capability (docs/storage.md has the table):

- writing without a schedule point: ``submit_nowait`` answers None, so a turn
  awaits ``submit``;
- loading a conversation: ``load_conversation`` reads a page of history, then
  the notes (two reads, not one), with no summary;
- idempotency keys: a keyed retry works (the seed's ``find_idempotency_key``);
  keys cannot be listed: the listings are empty (A2A's ListTasks by context
  then lists what this process remembers), and a turn resumed after a restart
  has lost its key;
- approvals: ``submit_awaiting`` and ``submit_decision`` raise ``StoreError``;
  ``open_chat_agent`` refuses tools that need approval before it starts;
- failed and interrupted turns: ``submit_turn_failure`` records nothing (the
  agent remembers failures in memory, so a restart may resume a failed turn),
  ``turn_record`` is empty, and no conversation is listed as interrupted (an
  interrupted turn resumes when its conversation is next used, not at open);
- delete, export, import: raise ``StoreError`` (``ChatAgent.delete_conversation``
  raises ``TypeError`` first; the server answers 501); no conversation is idle
  (retention deletes nothing);
- summaries: none is kept (``submit_summary`` raises ``StoreError``, the latest
  is None, the list empty); the agent asks the model for none, so a context
  policy keeps the whole tail that fits;
- archived notes: ``list_archived`` raises ``StoreError`` (the server answers 501).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from datetime import datetime
from typing import final

import trio

from agentik._errors import StoreError
from agentik._memory import MemoryEntry
from agentik._messages import Message, TokenStats
from agentik._sync import Pending
from agentik.storage._archive import ArchiveRecord
from agentik.storage._common import check_at_least, check_aware
from agentik.storage._protocols import (
    DEFAULT_PAGE_SIZE,
    MessageStore,
    Storage,
    StorageBundle,
    WorkingMemoryStore,
)
from agentik.storage._values import ConversationSnapshot, KeyedTurn, Summary, TurnRecord


def full_storage(bundle: StorageBundle) -> Storage:
    """``bundle`` itself if it is a ``Storage``; else its seed stores with the
    degraded stand-ins above (``Storage.degraded``)."""
    if isinstance(bundle, Storage):
        return bundle
    return Storage(
        message_store=SeedMessageStore(bundle.message_store, bundle.working_memory_store),
        working_memory_store=SeedWorkingMemoryStore(bundle.working_memory_store),
        reflection_store=bundle.reflection_store,
        skill_store=bundle.skill_store,
        ownership=bundle.ownership,
        secret_store=bundle.secret_store,
        degraded=True,
    )


def _lacks(store: object, kind: str, what: str) -> StoreError:
    return StoreError(
        f"{type(store).__name__} is a seed {kind}: it keeps no {what} (use one of"
        f" agentik's backends, or a Storage whose {kind} implements Full{kind})"
    )


@final
class SeedMessageStore:
    """A seed ``MessageStore`` given the rest of ``FullMessageStore``, degraded."""

    def __init__(self, inner: MessageStore, memory: WorkingMemoryStore) -> None:
        self.inner = inner
        self._memory = memory

    def _lacks(self, what: str) -> StoreError:
        return _lacks(self.inner, "MessageStore", what)

    # --- the seed, as it is ---

    async def append(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Message:
        return await self.inner.append(conversation_id, message, idempotency_key=idempotency_key)

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        return await self.inner.submit(conversation_id, message, idempotency_key=idempotency_key)

    def get_messages(
        self, conversation_id: str, *, after_seq: int = 0, page_size: int = DEFAULT_PAGE_SIZE
    ) -> AsyncIterator[Message]:
        return self.inner.get_messages(conversation_id, after_seq=after_seq, page_size=page_size)

    async def token_stats(self, conversation_id: str) -> TokenStats:
        return await self.inner.token_stats(conversation_id)

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        return await self.inner.find_idempotency_key(conversation_id, key)

    async def list_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        return await self.inner.list_conversations(after=after, limit=limit)

    # --- stand-ins ---

    def submit_nowait(self, conversation_id: str, message: Message) -> Pending[Message] | None:
        return None  # the caller awaits ``submit``

    async def load_conversation(
        self, conversation_id: str, *, page_size: int = DEFAULT_PAGE_SIZE, after_seq: int = 0
    ) -> ConversationSnapshot:
        check_at_least("page_size", page_size, 1)
        messages: builtins.list[Message] = []
        pages = self.inner.get_messages(conversation_id, after_seq=after_seq, page_size=page_size)
        try:
            async for message in pages:
                messages.append(message)
                if len(messages) == page_size:
                    break
        finally:
            if isinstance(pages, AsyncGenerator):  # left suspended by the break
                await pages.aclose()
        memory = await self._memory.list(conversation_id)
        return ConversationSnapshot(tuple(messages), tuple(memory), None)

    async def list_idempotency_keys(
        self, conversation_id: str, *, before_seq: int | None = None, limit: int = 100
    ) -> builtins.list[tuple[int, str]]:
        check_at_least("limit", limit, 0)
        await trio.lowlevel.checkpoint()
        return []

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
        return []

    async def count_idempotency_keys(self, conversation_id: str, *, key_suffix: str = "") -> int:
        await trio.lowlevel.checkpoint()
        return 0

    async def submit_awaiting(
        self, conversation_id: str, message: Message, call_ids: Sequence[str]
    ) -> Pending[Message]:
        raise self._lacks("approvals")

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
        raise self._lacks("approvals")

    async def submit_turn_failure(self, conversation_id: str, seq: int, code: str) -> Pending[None]:
        await trio.lowlevel.checkpoint()
        return Pending.completed(None)  # recorded nowhere: the agent remembers it in memory

    async def submit_turn_output(self, conversation_id: str, seq: int) -> Pending[None]:
        await trio.lowlevel.checkpoint()
        return Pending.completed(None)  # recorded nowhere, as a failure is not

    async def turn_record(self, conversation_id: str, seq: int) -> TurnRecord:
        await trio.lowlevel.checkpoint()
        return TurnRecord()

    async def interrupted_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        check_at_least("limit", limit, 0)
        await trio.lowlevel.checkpoint()
        return []

    async def delete_conversation(
        self, conversation_id: str, *, idle_before: datetime | None = None
    ) -> bool:
        raise self._lacks("way to delete a conversation")

    async def idle_conversations(
        self, before: datetime, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        check_aware(before)
        check_at_least("limit", limit, 0)
        await trio.lowlevel.checkpoint()
        return []

    async def export_conversation(self, conversation_id: str) -> AsyncIterator[ArchiveRecord]:
        raise self._lacks("way to export a conversation")
        yield  # an async generator, as the protocol's method is

    async def import_conversation(
        self, conversation_id: str, records: Sequence[ArchiveRecord]
    ) -> int:
        raise self._lacks("way to import a conversation")

    async def submit_summary(
        self, conversation_id: str, through_seq: int, text: str
    ) -> Pending[Summary]:
        raise self._lacks("summaries")

    async def latest_summary(self, conversation_id: str) -> Summary | None:
        await trio.lowlevel.checkpoint()
        return None

    async def count_blobs(self) -> int:
        """A seed store keeps a message's parts its own way: none counted here."""
        await trio.lowlevel.checkpoint()
        return 0

    async def list_summaries(
        self, conversation_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> builtins.list[Summary]:
        await trio.lowlevel.checkpoint()
        return []


@final
class SeedWorkingMemoryStore:
    """A seed ``WorkingMemoryStore`` given ``list_archived``, which it cannot answer."""

    def __init__(self, inner: WorkingMemoryStore) -> None:
        self.inner = inner

    async def append(self, conversation_id: str, text: str) -> MemoryEntry:
        return await self.inner.append(conversation_id, text)

    async def list(self, conversation_id: str) -> builtins.list[MemoryEntry]:
        return await self.inner.list(conversation_id)

    async def compact(
        self, conversation_id: str, entry_ids: Sequence[int], summary: str
    ) -> MemoryEntry:
        return await self.inner.compact(conversation_id, entry_ids, summary)

    async def archive(self, conversation_id: str, entry_ids: Sequence[int]) -> int:
        return await self.inner.archive(conversation_id, entry_ids)

    async def list_archived(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 100
    ) -> builtins.list[MemoryEntry]:
        raise _lacks(self.inner, "WorkingMemoryStore", "list of archived notes")
