"""A conversation as a whole, for both SQL backends: delete it, find idle
ones, export it as records and import them back. ``SqlQueries``, the last of
the shared query classes, is what a backend's ``_queries`` instantiates.

``conversation_tables`` is every table with rows keyed by conversation that a
delete empties, in the writer's transaction (one request, one savepoint), so
it is all or nothing. A table added later joins ``CONVERSATION_TABLES``:
``tests/storage/test_lifecycle_contract.py`` fails for a table with a
``conversation_id`` column that is not in it (or in PostgreSQL's
``postgres._queries.KEPT_TABLES``, kept on purpose; none today).

A delete or an import is fenced like an append (``SeqFence.fence``): with
several nodes on PostgreSQL, refused unless this node owns the conversation,
its shard's row locked until the batch commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypeVar, cast

from agentik._errors import StoreError
from agentik._memory import MemoryEntry, Reflection
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
from agentik.storage._common import from_micros
from agentik.storage._dialect import SqlSession
from agentik.storage._rows import MessageRow, tool_calls_json
from agentik.storage._sql_messages import MESSAGE_COLUMNS, WALK_AFTER, WALK_ALL
from agentik.storage._sql_turns import TurnQueries
from agentik.storage._values import Approval, Summary

C = TypeVar("C")

CONVERSATION_TABLES = (
    "message",
    "memory_entry",
    "reflection",
    "approval",
    "turn_failure",
    "turn_output",
    "summary",
    "blob_use",
)

# As ``list_conversations``: one index probe per conversation walked, then one
# for its newest message; reads follow the conversations walked, not their length.
_IDLE = """
SELECT id FROM next
WHERE id IS NOT NULL
  AND (SELECT {created} FROM message WHERE conversation_id = next.id
       ORDER BY seq DESC LIMIT 1) < :before
LIMIT :limit
"""


class SqlQueries(TurnQueries[C]):
    """Every query a SQL backend's stores run (``_sql_stores``)."""

    conversation_tables: tuple[str, ...] = CONVERSATION_TABLES

    def delete_conversation(
        self, session: SqlSession[C], conversation_id: str, idle_before_us: int | None
    ) -> bool:
        """Empty every table of the conversation (only if its newest message is
        older than ``idle_before_us``, when given); True if any row went."""
        session.seqs.fence(conversation_id)
        d = self.d
        connection = session.connection
        key = d.text(conversation_id)
        if idle_before_us is not None:
            # FOR UPDATE (PostgreSQL): a turn appended by another writer
            # meanwhile (a CLI beside a server) waits, then counts as newest.
            newest = d.row(
                connection,
                d.sql(
                    "SELECT {created} FROM message WHERE conversation_id = ?"
                    " ORDER BY seq DESC LIMIT 1{for_update}"
                ),
                (key,),
            )
            if newest is None or d.time_of(newest[0]) >= from_micros(idle_before_us):
                return False
        used = d.rows(
            connection, d.sql("SELECT hash FROM blob_use WHERE conversation_id = ?"), (key,)
        )
        deleted = 0
        for table in self.conversation_tables:
            deleted += d.changed(
                connection, d.sql(f"DELETE FROM {table} WHERE conversation_id = ?"), (key,)
            )
        for (hash_,) in used:
            self._drop_blob_if_unused(connection, cast("str", hash_))
        # The next append starts again at seq 1: the cached last seq must go
        # (if this savepoint rolls back, forgetting only costs a look-up).
        session.seqs.forget(conversation_id)
        return deleted > 0

    def _drop_blob_if_unused(self, connection: C, hash_: str) -> None:
        """Delete a blob no conversation uses any more. On PostgreSQL another
        node may be storing it for a conversation of its own at this moment:
        its use row holds the blob (the foreign key), so the delete fails and
        the blob stays, which is what that conversation needs."""
        d = self.d
        try:
            with d.guard(connection):
                d.changed(
                    connection,
                    d.sql(
                        "DELETE FROM blob WHERE hash = ?"
                        " AND NOT EXISTS (SELECT 1 FROM blob_use WHERE hash = ?)"
                    ),
                    (hash_, hash_),
                )
        except d.foreign_key_violation:
            pass

    def idle_conversations(
        self, connection: C, before_us: int, after: str | None, limit: int
    ) -> list[str]:
        d = self.d
        walk, params = (WALK_ALL, {}) if after is None else (WALK_AFTER, {"after": d.text(after)})
        rows = d.rows(
            connection,
            d.sql(walk + _IDLE),
            {**params, "before": d.time(from_micros(before_us)), "limit": limit},
        )
        return [d.text_of(row[0]) for row in rows]

    def archived_messages(
        self, connection: C, conversation_id: str, after_seq: int, limit: int
    ) -> list[ArchivedMessage]:
        d = self.d
        rows = d.rows(
            connection,
            d.sql(
                f"SELECT {MESSAGE_COLUMNS}, idempotency_key FROM message"
                " WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?"
            ),
            (d.text(conversation_id), after_seq, limit),
        )
        blobs = self.blobs_of(connection, rows)
        return [
            ArchivedMessage(
                message=self.message_of(row[:-1], blobs),
                idempotency_key=None if row[-1] is None else d.text_of(row[-1]),
            )
            for row in rows
        ]

    def archived_rest(self, connection: C, conversation_id: str) -> list[ArchiveRecord]:
        """Notes, reflections, approvals, failures and summaries, from one
        snapshot (one read transaction), so they agree with each other."""
        d = self.d
        key = (d.text(conversation_id),)
        out: list[ArchiveRecord] = []
        with d.snapshot(connection):
            for note_id, text, created, archived in d.rows(
                connection,
                d.sql(
                    "SELECT id, text, {created}, archived FROM memory_entry"
                    " WHERE conversation_id = ? ORDER BY id"
                ),
                key,
            ):
                entry = MemoryEntry(
                    id=note_id,
                    conversation_id=conversation_id,
                    text=d.text_of(text),
                    created_at=d.time_of(created),
                )
                out.append(ArchivedNote(entry=entry, archived=bool(archived)))
            for reflection_id, text, created in d.rows(
                connection,
                d.sql(
                    "SELECT id, text, {created} FROM reflection WHERE conversation_id = ?"
                    " ORDER BY {created}, id"
                ),
                key,
            ):
                reflection = Reflection(
                    id=reflection_id,
                    conversation_id=conversation_id,
                    text=d.text_of(text),
                    created_at=d.time_of(created),
                )
                out.append(ArchivedReflection(reflection=reflection))
            for seq, call_id, approved, reason, created, decided in d.rows(
                connection,
                d.sql(
                    "SELECT seq, call_id, approved, reason, {created}, {decided} FROM approval"
                    " WHERE conversation_id = ? ORDER BY seq, ordinal"
                ),
                key,
            ):
                approval = Approval(
                    seq=seq,
                    call_id=d.text_of(call_id),
                    approved=None if approved is None else bool(approved),
                    reason=d.text_of(reason),
                )
                out.append(
                    ArchivedApproval(
                        approval=approval,
                        created_at=d.time_of(created),
                        decided_at=None if decided is None else d.time_of(decided),
                    )
                )
            for seq, code, created in d.rows(
                connection,
                d.sql(
                    "SELECT seq, code, {created} FROM turn_failure WHERE conversation_id = ?"
                    " ORDER BY seq"
                ),
                key,
            ):
                out.append(
                    ArchivedFailure(seq=seq, code=d.text_of(code), created_at=d.time_of(created))
                )
            for seq, created in d.rows(
                connection,
                d.sql(
                    "SELECT seq, {created} FROM turn_output WHERE conversation_id = ? ORDER BY seq"
                ),
                key,
            ):
                out.append(ArchivedOutput(seq=seq, created_at=d.time_of(created)))
            for row in d.rows(
                connection,
                d.sql(
                    "SELECT through_seq, text, {created} FROM summary WHERE conversation_id = ?"
                    " ORDER BY through_seq"
                ),
                key,
            ):
                out.append(ArchivedSummary(summary=self._summary(row)))
        return out

    def _holds_anything(self, connection: C, key: object) -> bool:
        d = self.d
        return any(
            d.row(
                connection,
                d.sql(f"SELECT 1 FROM {table} WHERE conversation_id = ? LIMIT 1"),
                (key,),
            )
            is not None
            for table in self.conversation_tables
        )

    def import_conversation(
        self, session: SqlSession[C], conversation_id: str, records: Sequence[ArchiveRecord]
    ) -> int:
        """Insert the records as the (empty) conversation; return how many messages."""
        session.seqs.fence(conversation_id)
        d = self.d
        connection = session.connection
        key = d.text(conversation_id)
        if self._holds_anything(connection, key):
            raise StoreError(
                f"conversation {conversation_id!r} already holds data; delete it before importing"
            )
        messages = 0
        ordinals: dict[int, int] = {}
        summaries: list[Summary] = []
        for record in records:
            if isinstance(record, ArchivedMessage):
                messages += 1
                self._insert_message(connection, conversation_id, record, messages)
            elif isinstance(record, ArchivedNote):
                entry = record.entry
                d.changed(
                    connection,
                    d.sql(
                        "INSERT INTO memory_entry (conversation_id, text, {created}, archived)"
                        " VALUES (?, ?, ?, ?)"
                    ),
                    (
                        key,
                        d.text(entry.text),
                        d.time(_at(entry.created_at, "note")),
                        record.archived,
                    ),
                )
            elif isinstance(record, ArchivedReflection):
                reflection = record.reflection
                d.changed(
                    connection,
                    d.sql(
                        "INSERT INTO reflection (conversation_id, text, {created}) VALUES (?, ?, ?)"
                    ),
                    (
                        key,
                        d.text(reflection.text),
                        d.time(_at(reflection.created_at, "reflection")),
                    ),
                )
            elif isinstance(record, ArchivedApproval):
                approval = record.approval
                ordinal = ordinals[approval.seq] = ordinals.get(approval.seq, -1) + 1
                decided = record.decided_at
                d.changed(
                    connection,
                    d.sql(
                        "INSERT INTO approval (conversation_id, seq, call_id, ordinal, approved,"
                        " reason, {created}, {decided}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                    ),
                    (
                        key,
                        approval.seq,
                        d.text(approval.call_id),
                        ordinal,
                        approval.approved,
                        d.text(approval.reason),
                        d.time(record.created_at),
                        None if decided is None else d.time(decided),
                    ),
                )
            elif isinstance(record, ArchivedFailure):
                d.changed(
                    connection,
                    d.sql(
                        "INSERT INTO turn_failure (conversation_id, seq, code, {created})"
                        " VALUES (?, ?, ?, ?)"
                    ),
                    (key, record.seq, d.text(record.code), d.time(record.created_at)),
                )
            elif isinstance(record, ArchivedOutput):
                d.changed(
                    connection,
                    d.sql(
                        "INSERT INTO turn_output (conversation_id, seq, {created}) VALUES (?, ?, ?)"
                    ),
                    (key, record.seq, d.time(record.created_at)),
                )
            else:
                summaries.append(record.summary)
        check_summaries(summaries, messages)
        for summary in summaries:
            assert summary.created_at is not None  # check_summaries says so
            d.changed(
                connection,
                d.sql(
                    "INSERT INTO summary (conversation_id, through_seq, text, {created})"
                    " VALUES (?, ?, ?, ?)"
                ),
                (key, summary.through_seq, d.text(summary.text), d.time(summary.created_at)),
            )
        session.seqs.forget(conversation_id)
        return messages

    def _insert_message(
        self, connection: C, conversation_id: str, record: ArchivedMessage, expected: int
    ) -> None:
        message = record.message
        if message.seq != expected or message.created_at is None:
            raise StoreError(
                "imported messages must have seqs 1, 2, 3 … in order:"
                f" expected {expected}, got {message.seq}"
            )
        d = self.d
        insert = MessageRow(conversation_id, message, record.idempotency_key)
        idempotency_key = record.idempotency_key
        try:
            # PostgreSQL refuses every statement after a unique violation until
            # a savepoint is rolled back: this one, so the error can name the key.
            with d.guard(connection):
                d.changed(
                    connection,
                    d.sql(
                        "INSERT INTO message (conversation_id, seq, role, content, tool_calls,"
                        " tool_call_id, prompt_tokens, completion_tokens, {created},"
                        " idempotency_key, parts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    ),
                    (
                        d.text(conversation_id),
                        expected,
                        insert.role,
                        d.text(message.content),
                        tool_calls_json(message.tool_calls) if message.tool_calls else None,
                        None if message.tool_call_id is None else d.text(message.tool_call_id),
                        insert.prompt_tokens,
                        insert.completion_tokens,
                        d.time(message.created_at),
                        None if idempotency_key is None else d.text(idempotency_key),
                        insert.parts,
                    ),
                )
        except d.unique_violation as error:
            raise StoreError(
                f"idempotency key {idempotency_key!r} appears twice in the import"
            ) from error
        if insert.blobs:
            self.insert_blobs(connection, conversation_id, insert.blobs)


def _at(created_at: datetime | None, what: str) -> datetime:
    if created_at is None:
        raise StoreError(f"an imported {what} needs its created_at, got none")
    return created_at
