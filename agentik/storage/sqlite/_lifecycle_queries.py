"""A conversation as a whole (schema version 4): delete it, find idle ones,
export it as records and import them back. Plain functions of a connection
or a writer ``Session``, like ``_queries``.

``CONVERSATION_TABLES`` is every table with rows keyed by conversation: a
delete empties them all in the writer's transaction (one request, one
savepoint), so it is all or nothing. A table added later joins the tuple:
``tests/storage/test_lifecycle_contract.py`` fails for a table with a
``conversation_id`` column that is not in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import apsw

from agentik._errors import StoreError
from agentik._memory import MemoryEntry, Reflection
from agentik._messages import Message
from agentik.storage._archive import (
    ArchivedApproval,
    ArchivedFailure,
    ArchivedMessage,
    ArchivedNote,
    ArchivedReflection,
    ArchivedSummary,
    ArchiveRecord,
)
from agentik.storage._common import from_micros, to_micros
from agentik.storage._rows import MessageRow, tool_calls_json
from agentik.storage._values import Approval, Summary
from agentik.storage.sqlite._queries import (
    _MESSAGE_COLUMNS,
    Session,
    _MessageRow,
    message_of,
)

CONVERSATION_TABLES = (
    "message",
    "memory_entry",
    "reflection",
    "approval",
    "turn_failure",
    "summary",
)


def delete_conversation(session: Session, conversation_id: str, idle_before_us: int | None) -> bool:
    """Empty every table of the conversation (only if its newest message is
    older than ``idle_before_us``, when given); True if any row went."""
    connection = session.connection
    if idle_before_us is not None:
        newest = connection.execute(
            "SELECT created_us FROM message WHERE conversation_id = ? ORDER BY seq DESC LIMIT 1",
            (conversation_id,),
        ).get
        if not isinstance(newest, int) or newest >= idle_before_us:
            return False
    deleted = 0
    for table in CONVERSATION_TABLES:
        connection.execute(f"DELETE FROM {table} WHERE conversation_id = ?", (conversation_id,))
        deleted += connection.changes()
    # The next append starts again at seq 1: the cached last seq must go
    # (if this savepoint rolls back, forgetting only costs a look-up).
    session.seqs.forget(conversation_id)
    return deleted > 0


# Each conversation (one seek on message_by_seq, as list_conversations walks
# them), then its newest message (one more seek): reads follow the
# conversations walked, not their length.
_IDLE = """
WITH RECURSIVE next(id) AS (
    SELECT (SELECT min(conversation_id) FROM message WHERE conversation_id > :after)
    UNION ALL
    SELECT (SELECT min(conversation_id) FROM message WHERE conversation_id > next.id)
    FROM next WHERE next.id IS NOT NULL
)
SELECT id FROM next
WHERE id IS NOT NULL
  AND (SELECT created_us FROM message WHERE conversation_id = next.id
       ORDER BY seq DESC LIMIT 1) < :before
LIMIT :limit
"""


def idle_conversations(
    connection: apsw.Connection, before_us: int, after: str | None, limit: int
) -> list[str]:
    rows = connection.execute(
        _IDLE, {"after": "" if after is None else after, "before": before_us, "limit": limit}
    ).fetchall()
    return [cast("str", row[0]) for row in rows]


def archived_messages(
    connection: apsw.Connection, conversation_id: str, after_seq: int, limit: int
) -> list[ArchivedMessage]:
    rows = connection.execute(
        f"SELECT {_MESSAGE_COLUMNS}, idempotency_key FROM message"
        " WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (conversation_id, after_seq, limit),
    ).fetchall()
    return [
        ArchivedMessage(
            message=message_of(cast("_MessageRow", row[:-1])),
            idempotency_key=cast("str | None", row[-1]),
        )
        for row in rows
    ]


def archived_rest(connection: apsw.Connection, conversation_id: str) -> list[ArchiveRecord]:
    """Notes, reflections, approvals, failures and summaries, in one read transaction."""
    out: list[ArchiveRecord] = []
    with connection:
        for note_id, text, created_us, archived in connection.execute(
            "SELECT id, text, created_us, archived FROM memory_entry"
            " WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        ).fetchall():
            entry = MemoryEntry(
                id=cast("int", note_id),
                conversation_id=conversation_id,
                text=cast("str", text),
                created_at=from_micros(cast("int", created_us)),
            )
            out.append(ArchivedNote(entry=entry, archived=bool(archived)))
        for reflection_id, text, created_us in connection.execute(
            "SELECT id, text, created_us FROM reflection WHERE conversation_id = ?"
            " ORDER BY created_us, id",
            (conversation_id,),
        ).fetchall():
            reflection = Reflection(
                id=cast("int", reflection_id),
                conversation_id=conversation_id,
                text=cast("str", text),
                created_at=from_micros(cast("int", created_us)),
            )
            out.append(ArchivedReflection(reflection=reflection))
        for seq, call_id, approved, reason, created_us, decided_us in connection.execute(
            "SELECT seq, call_id, approved, reason, created_us, decided_us FROM approval"
            " WHERE conversation_id = ? ORDER BY seq, ordinal",
            (conversation_id,),
        ).fetchall():
            approval = Approval(
                seq=cast("int", seq),
                call_id=cast("str", call_id),
                approved=None if approved is None else bool(approved),
                reason=cast("str", reason),
            )
            decided = None if decided_us is None else from_micros(cast("int", decided_us))
            out.append(
                ArchivedApproval(
                    approval=approval,
                    created_at=from_micros(cast("int", created_us)),
                    decided_at=decided,
                )
            )
        for seq, code, created_us in connection.execute(
            "SELECT seq, code, created_us FROM turn_failure WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        ).fetchall():
            out.append(
                ArchivedFailure(
                    seq=cast("int", seq),
                    code=cast("str", code),
                    created_at=from_micros(cast("int", created_us)),
                )
            )
        for through_seq, text, created_us in connection.execute(
            "SELECT through_seq, text, created_us FROM summary WHERE conversation_id = ?"
            " ORDER BY through_seq",
            (conversation_id,),
        ).fetchall():
            summary = Summary(
                through_seq=cast("int", through_seq),
                text=cast("str", text),
                created_at=from_micros(cast("int", created_us)),
            )
            out.append(ArchivedSummary(summary=summary))
    return out


def _holds_anything(connection: apsw.Connection, conversation_id: str) -> bool:
    return any(
        connection.execute(
            f"SELECT 1 FROM {table} WHERE conversation_id = ? LIMIT 1", (conversation_id,)
        ).fetchall()
        for table in CONVERSATION_TABLES
    )


def import_conversation(
    session: Session, conversation_id: str, records: Sequence[ArchiveRecord]
) -> int:
    """Insert the records as the (empty) conversation; return how many messages."""
    connection = session.connection
    if _holds_anything(connection, conversation_id):
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
                "INSERT INTO memory_entry (conversation_id, text, created_us, archived)"
                " VALUES (?, ?, ?, ?)",
                (conversation_id, entry.text, to_micros(entry.created_at), int(record.archived)),
            )
        elif isinstance(record, ArchivedReflection):
            reflection = record.reflection
            connection.execute(
                "INSERT INTO reflection (conversation_id, text, created_us) VALUES (?, ?, ?)",
                (conversation_id, reflection.text, to_micros(reflection.created_at)),
            )
        elif isinstance(record, ArchivedApproval):
            approval = record.approval
            ordinal = ordinals[approval.seq] = ordinals.get(approval.seq, -1) + 1
            connection.execute(
                "INSERT INTO approval (conversation_id, seq, call_id, ordinal, approved, reason,"
                " created_us, decided_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    approval.seq,
                    approval.call_id,
                    ordinal,
                    None if approval.approved is None else int(approval.approved),
                    approval.reason,
                    to_micros(record.created_at),
                    None if record.decided_at is None else to_micros(record.decided_at),
                ),
            )
        elif isinstance(record, ArchivedFailure):
            connection.execute(
                "INSERT INTO turn_failure (conversation_id, seq, code, created_us)"
                " VALUES (?, ?, ?, ?)",
                (conversation_id, record.seq, record.code, to_micros(record.created_at)),
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
            "INSERT INTO summary (conversation_id, through_seq, text, created_us)"
            " VALUES (?, ?, ?, ?)",
            (conversation_id, summary.through_seq, summary.text, to_micros(summary.created_at)),
        )
    session.seqs.forget(conversation_id)
    return messages


def _insert_message(
    connection: apsw.Connection, conversation_id: str, record: ArchivedMessage, expected: int
) -> None:
    message: Message = record.message
    if message.seq != expected or message.created_at is None:
        raise StoreError(
            "imported messages must have seqs 1, 2, 3 … in order:"
            f" expected {expected}, got {message.seq}"
        )
    insert = MessageRow(conversation_id, message, record.idempotency_key)
    try:
        connection.execute(
            "INSERT INTO message (conversation_id, seq, role, content, tool_calls,"
            " tool_call_id, prompt_tokens, completion_tokens, created_us, idempotency_key)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                conversation_id,
                expected,
                insert.role,
                message.content,
                tool_calls_json(message.tool_calls) if message.tool_calls else None,
                message.tool_call_id,
                insert.prompt_tokens,
                insert.completion_tokens,
                to_micros(message.created_at),
                record.idempotency_key,
            ),
        )
    except apsw.ConstraintError as error:
        raise StoreError(
            f"idempotency key {record.idempotency_key!r} appears twice in the import"
        ) from error
