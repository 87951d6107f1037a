"""The full store protocols over a writer and a reader pool, for any SQL backend.

Writes become closures over the backend's queries (``SqlQueries``: the SQL
both share, over its dialect) sent to the writer; reads run them on the
reader pool. Arguments are checked here, before they are queued, so a misuse
fails in the caller's task. SQLite and PostgreSQL differ only in the
``SqlQueries`` and the writer's engine they bring.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Coroutine, Sequence
from datetime import datetime
from functools import partial
from typing import Generic, TypeVar, final

from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
from agentik._messages import Message, TokenStats
from agentik._sync import Pending
from agentik.storage._archive import ArchiveRecord
from agentik.storage._archive_rules import check_archive
from agentik.storage._common import check_at_least, check_aware, to_micros
from agentik.storage._protocols import DEFAULT_PAGE_SIZE
from agentik.storage._readers import ReaderPool
from agentik.storage._rows import MessageRow
from agentik.storage._sql_lifecycle import SqlQueries
from agentik.storage._values import ConversationSnapshot, KeyedTurn, Summary, TurnRecord
from agentik.storage._writer import MessageSession, Writer, WriterStats

C = TypeVar("C")
S = TypeVar("S", bound=MessageSession)


@final
class SqlMessageStore(Generic[C, S]):
    """``FullMessageStore`` over the backend's writer, readers and queries."""

    def __init__(self, writer: Writer[S], readers: ReaderPool[C], queries: SqlQueries[C]) -> None:
        self._writer = writer
        self._readers = readers
        self._q = queries

    def writer_stats(self) -> WriterStats:
        """Counters of the bundle's writer (batch sizes, queue depth) for metrics."""
        return self._writer.stats()

    def append(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Coroutine[object, object, Message]:
        # Not ``async def``: it hands out the writer's coroutine instead of
        # wrapping it in one more (this runs once per stored message).
        return self._writer.append(conversation_id, message, idempotency_key)

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        return await self._writer.submit_append(conversation_id, message, idempotency_key)

    def submit_nowait(self, conversation_id: str, message: Message) -> Pending[Message] | None:
        return self._writer.submit_append_nowait(conversation_id, message)

    async def submit_awaiting(
        self, conversation_id: str, message: Message, call_ids: Sequence[str]
    ) -> Pending[Message]:
        insert = MessageRow(conversation_id, message, None)
        return await self._writer.submit(
            partial(self._q.insert_awaiting, insert=insert, call_ids=tuple(call_ids)),
            conversation_id=conversation_id,
        )

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
        insert = None if result is None else MessageRow(conversation_id, result, None)
        return await self._writer.submit(
            partial(
                self._q.decide,
                conversation_id=conversation_id,
                seq=seq,
                call_id=call_id,
                approve=approve,
                reason=reason,
                result=insert,
            ),
            conversation_id=conversation_id,
        )

    async def submit_turn_failure(self, conversation_id: str, seq: int, code: str) -> Pending[None]:
        return await self._writer.submit(
            partial(
                self._q.insert_turn_failure, conversation_id=conversation_id, seq=seq, code=code
            ),
            conversation_id=conversation_id,
        )

    async def submit_turn_output(self, conversation_id: str, seq: int) -> Pending[None]:
        return await self._writer.submit(
            partial(self._q.insert_turn_output, conversation_id=conversation_id, seq=seq),
            conversation_id=conversation_id,
        )

    async def turn_record(self, conversation_id: str, seq: int) -> TurnRecord:
        return await self._readers.read(
            partial(self._q.turn_record, conversation_id=conversation_id, seq=seq)
        )

    async def interrupted_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        check_at_least("limit", limit, 0)
        return await self._readers.read(
            partial(self._q.interrupted_conversations, after=after, limit=limit)
        )

    async def get_messages(
        self, conversation_id: str, *, after_seq: int = 0, page_size: int = DEFAULT_PAGE_SIZE
    ) -> AsyncIterator[Message]:
        check_at_least("page_size", page_size, 1)
        position = after_seq
        while True:
            page = await self._readers.read(
                partial(
                    self._q.message_page,
                    conversation_id=conversation_id,
                    after_seq=position,
                    limit=page_size,
                )
            )
            for message in page:
                yield message
            if len(page) < page_size:
                return
            assert page[-1].seq is not None
            position = page[-1].seq

    async def load_conversation(
        self, conversation_id: str, *, page_size: int = DEFAULT_PAGE_SIZE, after_seq: int = 0
    ) -> ConversationSnapshot:
        """A page of history after ``after_seq``, the active notes and the latest
        summary: one read, with the others of a burst (``read_together``)."""
        check_at_least("page_size", page_size, 1)
        return await self._readers.read_together(
            self._q.conversation_snapshots, (conversation_id, page_size, after_seq)
        )

    async def submit_summary(
        self, conversation_id: str, through_seq: int, text: str
    ) -> Pending[Summary]:
        return await self._writer.submit(
            partial(
                self._q.insert_summary,
                conversation_id=conversation_id,
                through_seq=through_seq,
                text=text,
            )
        )

    async def latest_summary(self, conversation_id: str) -> Summary | None:
        return await self._readers.read(
            partial(self._q.latest_summary, conversation_id=conversation_id)
        )

    async def list_summaries(
        self, conversation_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> builtins.list[Summary]:
        return await self._readers.read(
            partial(
                self._q.list_summaries,
                conversation_id=conversation_id,
                after_seq=after_seq,
                limit=limit,
            )
        )

    async def token_stats(self, conversation_id: str) -> TokenStats:
        return await self._readers.read(
            partial(self._q.token_stats, conversation_id=conversation_id)
        )

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        return await self._readers.read(
            partial(self._q.find_idempotency_key, conversation_id=conversation_id, key=key)
        )

    async def list_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        check_at_least("limit", limit, 0)
        return await self._readers.read(
            partial(self._q.list_conversations, after=after, limit=limit)
        )

    async def list_idempotency_keys(
        self, conversation_id: str, *, before_seq: int | None = None, limit: int = 100
    ) -> builtins.list[tuple[int, str]]:
        check_at_least("limit", limit, 0)
        return await self._readers.read(
            partial(
                self._q.list_idempotency_keys,
                conversation_id=conversation_id,
                before_seq=before_seq,
                limit=limit,
            )
        )

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
        return await self._readers.read(
            partial(
                self._q.list_keyed_turns,
                conversation_id=conversation_id,
                before_seq=before_seq,
                limit=limit,
                key_suffix=key_suffix,
                max_messages=max_messages,
            )
        )

    async def count_idempotency_keys(self, conversation_id: str, *, key_suffix: str = "") -> int:
        return await self._readers.read(
            partial(
                self._q.count_idempotency_keys,
                conversation_id=conversation_id,
                key_suffix=key_suffix,
            )
        )

    async def count_blobs(self) -> int:
        return await self._readers.read(self._q.count_blobs)

    # --- a conversation as a whole ---

    async def delete_conversation(
        self, conversation_id: str, *, idle_before: datetime | None = None
    ) -> bool:
        cutoff = None if idle_before is None else to_micros(idle_before)
        return await self._writer.write(
            partial(
                self._q.delete_conversation,
                conversation_id=conversation_id,
                idle_before_us=cutoff,
            )
        )

    async def idle_conversations(
        self, before: datetime, *, after: str | None = None, limit: int = 100
    ) -> builtins.list[str]:
        check_at_least("limit", limit, 0)
        return await self._readers.read(
            partial(
                self._q.idle_conversations, before_us=to_micros(before), after=after, limit=limit
            )
        )

    async def export_conversation(self, conversation_id: str) -> AsyncIterator[ArchiveRecord]:
        after = 0
        while True:
            page = await self._readers.read(
                partial(
                    self._q.archived_messages,
                    conversation_id=conversation_id,
                    after_seq=after,
                    limit=DEFAULT_PAGE_SIZE,
                )
            )
            for record in page:
                yield record
            if len(page) < DEFAULT_PAGE_SIZE:
                break
            after = page[-1].message.seq or after
        for rest in await self._readers.read(
            partial(self._q.archived_rest, conversation_id=conversation_id)
        ):
            yield rest

    async def import_conversation(
        self, conversation_id: str, records: Sequence[ArchiveRecord]
    ) -> int:
        records = tuple(records)
        check_archive(records)  # the whole conversation, before anything is queued
        return await self._writer.write(
            partial(
                self._q.import_conversation,
                conversation_id=conversation_id,
                records=records,
            )
        )


@final
class SqlWorkingMemoryStore(Generic[C, S]):
    def __init__(self, writer: Writer[S], readers: ReaderPool[C], queries: SqlQueries[C]) -> None:
        self._writer = writer
        self._readers = readers
        self._q = queries

    async def append(self, conversation_id: str, text: str) -> MemoryEntry:
        return await self._writer.write(
            partial(self._q.append_memory, conversation_id=conversation_id, text=text)
        )

    async def list(self, conversation_id: str) -> builtins.list[MemoryEntry]:
        return await self._readers.read(
            partial(self._q.list_memory, conversation_id=conversation_id)
        )

    async def list_archived(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 100
    ) -> builtins.list[MemoryEntry]:
        return await self._readers.read(
            partial(
                self._q.list_archived_memory,
                conversation_id=conversation_id,
                after_id=after_id,
                limit=limit,
            )
        )

    async def compact(
        self, conversation_id: str, entry_ids: Sequence[int], summary: str
    ) -> MemoryEntry:
        return await self._writer.write(
            partial(
                self._q.compact_memory,
                conversation_id=conversation_id,
                entry_ids=tuple(entry_ids),
                summary=summary,
            )
        )

    async def archive(self, conversation_id: str, entry_ids: Sequence[int]) -> int:
        return await self._writer.write(
            partial(
                self._q.archive_memory, conversation_id=conversation_id, entry_ids=tuple(entry_ids)
            )
        )


@final
class SqlReflectionStore(Generic[C, S]):
    def __init__(self, writer: Writer[S], readers: ReaderPool[C], queries: SqlQueries[C]) -> None:
        self._writer = writer
        self._readers = readers
        self._q = queries

    async def insert(self, conversation_id: str, text: str) -> Reflection:
        return await self._writer.write(
            partial(self._q.insert_reflection, conversation_id=conversation_id, text=text)
        )

    async def list_recent(self, limit: int) -> builtins.list[Reflection]:
        check_at_least("limit", limit, 0)
        return await self._readers.read(partial(self._q.recent_reflections, limit=limit))

    async def count(self) -> int:
        return await self._readers.read(self._q.count_reflections)

    async def list_for_conversation(self, conversation_id: str) -> builtins.list[Reflection]:
        return await self._readers.read(
            partial(self._q.reflections_of, conversation_id=conversation_id)
        )

    async def delete_older_than(self, cutoff: datetime) -> int:
        check_aware(cutoff)
        return await self._writer.write(partial(self._q.delete_reflections_before, cutoff=cutoff))


@final
class SqlSkillStore(Generic[C, S]):
    def __init__(self, writer: Writer[S], readers: ReaderPool[C], queries: SqlQueries[C]) -> None:
        self._writer = writer
        self._readers = readers
        self._q = queries

    async def catalog(self) -> builtins.list[SkillSummary]:
        return await self._readers.read(self._q.skill_catalog)

    async def upsert(self, skill: Skill) -> Skill:
        return await self._writer.write(partial(self._q.upsert_skill, skill=skill))

    async def remove(self, name: str) -> bool:
        return await self._writer.write(partial(self._q.remove_skill, name=name))

    async def exists(self, name: str) -> bool:
        return await self._readers.read(partial(self._q.skill_exists, name=name))

    async def all(self) -> builtins.list[Skill]:
        return await self._readers.read(self._q.all_skills)

    async def get(self, name: str) -> Skill | None:
        return await self._readers.read(partial(self._q.get_skill, name=name))
