"""A conversation as a whole, on PostgreSQL: delete it, find idle ones,
export it as records and import them back (``LifecycleQueries``; SQLite's is
``sqlite._lifecycle_queries``, whose rules these follow).

``CONVERSATION_TABLES`` is every table with rows keyed by conversation that a
delete empties, in the writer's transaction (the request's savepoint), so it
is all or nothing. ``KEPT_TABLES`` are keyed by conversation but outlive a
delete on purpose: ``conversation_owner`` says which node runs the
conversation, not what it holds; the node that deleted it (it must own it)
goes on owning it, so its writer's fence keeps passing and no other node can
slip in (docs/scale-out.md). ``tests/storage/test_lifecycle_contract.py``
fails for a table with a ``conversation_id`` column in neither tuple.

With ownership on, a delete or an import is fenced like an append: refused
unless this node owns the conversation, and its ownership row stays locked
until the batch commits, so a takeover waits for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import cast

import psycopg
from psycopg import errors

from agentik._errors import StoreError
from agentik._memory import MemoryEntry, Reflection
from agentik.storage._archive import (
    ArchivedApproval,
    ArchivedFailure,
    ArchivedMessage,
    ArchivedNote,
    ArchivedReflection,
    ArchivedSummary,
    ArchiveRecord,
)
from agentik.storage._common import from_micros
from agentik.storage._rows import MessageRow, tool_calls_json
from agentik.storage._values import Approval, Summary
from agentik.storage.postgres._queries import _MESSAGE_COLUMNS, Session, _message, _MessageRow

CONVERSATION_TABLES = (
    "message",
    "memory_entry",
    "reflection",
    "approval",
    "turn_failure",
    "summary",
)
KEPT_TABLES = ("conversation_owner",)


def delete_conversation(session: Session, conversation_id: str, idle_before_us: int | None) -> bool:
    """Empty every table of the conversation (only if its newest message is
    older than ``idle_before_us``, when given); True if any row went."""
    session.seqs.fence(conversation_id)
    connection = session.connection
    key = conversation_id.encode()
    if idle_before_us is not None:
        # FOR UPDATE: a turn appended by another writer meanwhile (a CLI
        # beside a server) waits, and its message then counts as newest.
        newest = connection.execute(
            "SELECT created_at FROM message WHERE conversation_id = %s"
            " ORDER BY seq DESC LIMIT 1 FOR UPDATE",
            (key,),
        ).fetchone()
        if newest is None or cast("datetime", newest[0]) >= from_micros(idle_before_us):
            return False
    deleted = 0
    for table in CONVERSATION_TABLES:
        cursor = connection.execute(f"DELETE FROM {table} WHERE conversation_id = %s", (key,))
        deleted += cursor.rowcount
    # The next append starts again at seq 1 (if this savepoint rolls back,
    # forgetting only costs a look-up).
    session.seqs.forget(conversation_id)
    return deleted > 0


# As ``list_conversations``: one index probe per conversation walked, then one
# for its newest message; reads follow the conversations walked, not their length.
_IDLE = """
WITH RECURSIVE next(id) AS (
    SELECT (SELECT conversation_id FROM message WHERE conversation_id {first} %(after)s
            ORDER BY conversation_id LIMIT 1)
    UNION ALL
    SELECT (SELECT conversation_id FROM message WHERE conversation_id > next.id
            ORDER BY conversation_id LIMIT 1)
    FROM next WHERE next.id IS NOT NULL
)
SELECT id FROM next
WHERE id IS NOT NULL
  AND (SELECT created_at FROM message WHERE conversation_id = next.id
       ORDER BY seq DESC LIMIT 1) < %(before)s
LIMIT %(limit)s
"""
_FIRST_IDLE = _IDLE.format(first=">=")
_IDLE_AFTER = _IDLE.format(first=">")


def idle_conversations(
    connection: psycopg.Connection, before_us: int, after: str | None, limit: int
) -> list[str]:
    rows = connection.execute(
        _FIRST_IDLE if after is None else _IDLE_AFTER,
        {
            "after": (after or "").encode(),
            "before": from_micros(before_us),
            "limit": limit,
        },
    ).fetchall()
    return [bytes(row[0]).decode() for row in rows]


def archived_messages(
    connection: psycopg.Connection, conversation_id: str, after_seq: int, limit: int
) -> list[ArchivedMessage]:
    rows = connection.execute(
        f"SELECT {_MESSAGE_COLUMNS}, idempotency_key FROM message"
        " WHERE conversation_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (conversation_id.encode(), after_seq, limit),
    ).fetchall()
    return [
        ArchivedMessage(
            message=_message(cast("_MessageRow", row[:-1])),
            idempotency_key=None if row[-1] is None else bytes(row[-1]).decode(),
        )
        for row in rows
    ]


def archived_rest(connection: psycopg.Connection, conversation_id: str) -> list[ArchiveRecord]:
    """Notes, reflections, approvals, failures and summaries, from one
    snapshot (a repeatable-read transaction), so they agree with each other."""
    key = conversation_id.encode()
    out: list[ArchiveRecord] = []
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for note_id, text, created_at, archived in connection.execute(
            "SELECT id, text, created_at, archived FROM memory_entry"
            " WHERE conversation_id = %s ORDER BY id",
            (key,),
        ).fetchall():
            entry = MemoryEntry(
                id=cast("int", note_id),
                conversation_id=conversation_id,
                text=bytes(text).decode(),
                created_at=cast("datetime", created_at),
            )
            out.append(ArchivedNote(entry=entry, archived=bool(archived)))
        for reflection_id, text, created_at in connection.execute(
            "SELECT id, text, created_at FROM reflection WHERE conversation_id = %s"
            " ORDER BY created_at, id",
            (key,),
        ).fetchall():
            reflection = Reflection(
                id=cast("int", reflection_id),
                conversation_id=conversation_id,
                text=bytes(text).decode(),
                created_at=cast("datetime", created_at),
            )
            out.append(ArchivedReflection(reflection=reflection))
        for seq, call_id, approved, reason, created_at, decided_at in connection.execute(
            "SELECT seq, call_id, approved, reason, created_at, decided_at FROM approval"
            " WHERE conversation_id = %s ORDER BY seq, ordinal",
            (key,),
        ).fetchall():
            approval = Approval(
                seq=cast("int", seq),
                call_id=bytes(call_id).decode(),
                approved=cast("bool | None", approved),
                reason=bytes(reason).decode(),
            )
            out.append(
                ArchivedApproval(
                    approval=approval,
                    created_at=cast("datetime", created_at),
                    decided_at=cast("datetime | None", decided_at),
                )
            )
        for seq, code, created_at in connection.execute(
            "SELECT seq, code, created_at FROM turn_failure WHERE conversation_id = %s"
            " ORDER BY seq",
            (key,),
        ).fetchall():
            out.append(
                ArchivedFailure(
                    seq=cast("int", seq),
                    code=bytes(code).decode(),
                    created_at=cast("datetime", created_at),
                )
            )
        for through_seq, text, created_at in connection.execute(
            "SELECT through_seq, text, created_at FROM summary WHERE conversation_id = %s"
            " ORDER BY through_seq",
            (key,),
        ).fetchall():
            summary = Summary(
                through_seq=cast("int", through_seq),
                text=bytes(text).decode(),
                created_at=cast("datetime", created_at),
            )
            out.append(ArchivedSummary(summary=summary))
    return out


def _holds_anything(connection: psycopg.Connection, key: bytes) -> bool:
    return any(
        connection.execute(
            f"SELECT 1 FROM {table} WHERE conversation_id = %s LIMIT 1", (key,)
        ).fetchone()
        is not None
        for table in CONVERSATION_TABLES
    )


def import_conversation(
    session: Session, conversation_id: str, records: Sequence[ArchiveRecord]
) -> int:
    """Insert the records as the (empty) conversation; return how many messages."""
    session.seqs.fence(conversation_id)
    connection = session.connection
    key = conversation_id.encode()
    if _holds_anything(connection, key):
        raise StoreError(
            f"conversation {conversation_id!r} already holds data; delete it before importing"
        )
    messages = 0
    ordinals: dict[int, int] = {}
    summaries: list[Summary] = []
    for record in records:
        if isinstance(record, ArchivedMessage):
            messages += 1
            _insert_message(connection, conversation_id, record, messages)
        elif isinstance(record, ArchivedNote):
            entry = record.entry
            connection.execute(
                "INSERT INTO memory_entry (conversation_id, text, created_at, archived)"
                " VALUES (%s, %s, %s, %s)",
                (key, entry.text.encode(), _at(entry.created_at, "note"), record.archived),
            )
        elif isinstance(record, ArchivedReflection):
            reflection = record.reflection
            connection.execute(
                "INSERT INTO reflection (conversation_id, text, created_at) VALUES (%s, %s, %s)",
                (key, reflection.text.encode(), _at(reflection.created_at, "reflection")),
            )
        elif isinstance(record, ArchivedApproval):
            approval = record.approval
            ordinal = ordinals[approval.seq] = ordinals.get(approval.seq, -1) + 1
            connection.execute(
                "INSERT INTO approval (conversation_id, seq, call_id, ordinal, approved, reason,"
                " created_at, decided_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    key,
                    approval.seq,
                    approval.call_id.encode(),
                    ordinal,
                    approval.approved,
                    approval.reason.encode(),
                    record.created_at,
                    record.decided_at,
                ),
            )
        elif isinstance(record, ArchivedFailure):
            connection.execute(
                "INSERT INTO turn_failure (conversation_id, seq, code, created_at)"
                " VALUES (%s, %s, %s, %s)",
                (key, record.seq, record.code.encode(), record.created_at),
            )
        else:
            summaries.append(record.summary)
    covered = 0
    for summary in summaries:
        if not covered < summary.through_seq <= messages or summary.created_at is None:
            raise StoreError(
                f"an imported summary through seq {summary.through_seq} must cover more"
                f" than the one before (through seq {covered}) and at most the"
                f" {messages} messages"
            )
        covered = summary.through_seq
        connection.execute(
            "INSERT INTO summary (conversation_id, through_seq, text, created_at)"
            " VALUES (%s, %s, %s, %s)",
            (key, summary.through_seq, summary.text.encode(), summary.created_at),
        )
    session.seqs.forget(conversation_id)
    return messages


def _at(created_at: datetime | None, what: str) -> datetime:
    if created_at is None:
        raise StoreError(f"an imported {what} needs its created_at, got none")
    return created_at


def _insert_message(
    connection: psycopg.Connection, conversation_id: str, record: ArchivedMessage, expected: int
) -> None:
    message = record.message
    if message.seq != expected or message.created_at is None:
        raise StoreError(
            "imported messages must have seqs 1, 2, 3 … in order:"
            f" expected {expected}, got {message.seq}"
        )
    insert = MessageRow(conversation_id, message, record.idempotency_key)
    idempotency_key = record.idempotency_key
    try:
        # A nested savepoint: after a unique violation PostgreSQL refuses every
        # statement until one is rolled back, and the error must name the key.
        with connection.transaction():
            connection.execute(
                "INSERT INTO message (conversation_id, seq, role, content, tool_calls,"
                " tool_call_id, prompt_tokens, completion_tokens, created_at, idempotency_key)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    conversation_id.encode(),
                    expected,
                    insert.role,
                    message.content.encode(),
                    tool_calls_json(message.tool_calls) if message.tool_calls else None,
                    None if message.tool_call_id is None else message.tool_call_id.encode(),
                    insert.prompt_tokens,
                    insert.completion_tokens,
                    message.created_at,
                    None if idempotency_key is None else idempotency_key.encode(),
                ),
            )
    except errors.UniqueViolation as error:
        raise StoreError(
            f"idempotency key {idempotency_key!r} appears twice in the import"
        ) from error
