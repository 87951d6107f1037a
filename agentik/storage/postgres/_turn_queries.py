"""The turn ledger's SQL on PostgreSQL: approvals and failed turns; and the
summaries' (schema version 3).

As SQLite's ``_turn_queries``: a waiting call's row is written in the
transaction of the message that makes the call, and a denied call's tool
result in the transaction of its decision, so no crash can separate them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import cast

import psycopg

from agentik._errors import StoreError
from agentik._messages import Message
from agentik.storage._rows import MessageRow
from agentik.storage._values import Approval, ConversationSnapshot, Summary, TurnRecord
from agentik.storage.postgres._queries import Session, list_memory, message_page

_NO_END = 2**62


def insert_awaiting(session: Session, insert: MessageRow, call_ids: Sequence[str]) -> Message:
    """Insert the message, then one waiting approval per call id."""
    calls = {call.id for call in insert.message.tool_calls}
    unknown = [c for c in call_ids if c not in calls]
    if unknown:
        raise StoreError(f"calls {list(unknown)!r} are not tool calls of the message")
    if len(set(call_ids)) != len(call_ids):
        raise StoreError(f"call ids must be unique, got {list(call_ids)!r}")
    stored = session.insert_message(insert)
    session.connection.execute(
        "INSERT INTO approval (conversation_id, seq, call_id, ordinal, created_at)"
        " SELECT %s, %s, call_id, ordinal - 1, %s"
        " FROM unnest(%s::bytea[]) WITH ORDINALITY AS u(call_id, ordinal)",
        (
            insert.conversation_id.encode(),
            stored.seq,
            session.now,
            [call_id.encode() for call_id in call_ids],
        ),
    )
    return stored


def decide(
    session: Session,
    conversation_id: str,
    seq: int,
    call_id: str,
    approve: bool,
    reason: str,
    result: MessageRow | None,
) -> Message | None:
    """Decide a waiting call; insert ``result`` with it."""
    cursor = session.connection.execute(
        "UPDATE approval SET approved = %s, reason = %s, decided_at = %s"
        " WHERE conversation_id = %s AND seq = %s AND call_id = %s AND approved IS NULL",
        (approve, reason.encode(), session.now, conversation_id.encode(), seq, call_id.encode()),
    )
    if cursor.rowcount != 1:
        raise StoreError(
            f"call {call_id!r} of message {seq} in conversation {conversation_id!r}"
            " is not waiting for a decision"
        )
    return None if result is None else session.insert_message(result)


def insert_turn_failure(session: Session, conversation_id: str, seq: int, code: str) -> None:
    """Record (or replace) how the turn whose user message is ``seq`` failed."""
    cursor = session.connection.execute(
        "INSERT INTO turn_failure (conversation_id, seq, code, created_at)"
        " SELECT conversation_id, seq, %s, %s FROM message"
        " WHERE conversation_id = %s AND seq = %s"
        " ON CONFLICT (conversation_id, seq) DO UPDATE SET code = excluded.code,"
        " created_at = excluded.created_at",
        (code.encode(), session.now, conversation_id.encode(), seq),
    )
    if cursor.rowcount != 1:
        raise StoreError(f"conversation {conversation_id!r} has no seq {seq}")


def turn_record(connection: psycopg.Connection, conversation_id: str, seq: int) -> TurnRecord:
    """Approvals of calls made after ``seq`` up to the next user message, and
    the failure of the turn at ``seq``: one statement, so one snapshot."""
    rows = connection.execute(
        """
        WITH stop(at) AS (
            SELECT coalesce(min(seq), %(no_end)s) FROM message
            WHERE conversation_id = %(c)s AND seq > %(seq)s AND role = 'user'
        )
        SELECT 'a', a.seq, a.call_id, a.approved, a.reason, a.ordinal
        FROM approval AS a, stop
        WHERE a.conversation_id = %(c)s AND a.seq > %(seq)s AND a.seq < stop.at
        UNION ALL
        SELECT 'f', f.seq, f.code, NULL, NULL, NULL FROM turn_failure AS f
        WHERE f.conversation_id = %(c)s AND f.seq = %(seq)s
        ORDER BY 1, 2, 6
        """,
        {"c": conversation_id.encode(), "seq": seq, "no_end": _NO_END},
    ).fetchall()
    approvals = []
    failure = None
    for kind, at, name, approved, reason, _ in cast(
        "list[tuple[str, int, bytes, bool | None, bytes | None, int | None]]", rows
    ):
        if kind == "f":
            failure = bytes(name).decode()
        else:
            approvals.append(
                Approval(
                    seq=at,
                    call_id=bytes(name).decode(),
                    approved=approved,
                    reason=bytes(reason or b"").decode(),
                )
            )
    return TurnRecord(approvals=tuple(approvals), failure=failure)


# --- summaries (schema version 3) -------------------------------------------------


def insert_summary(session: Session, conversation_id: str, through_seq: int, text: str) -> Summary:
    """Store a summary past the latest one, covering an existing message.

    Not an ownership-checked write (only messages are): a summary stands for
    history that never changes once written, so a late one from a node that
    lost the conversation is as true as the new owner's, and the chain rule
    (each covers more than the latest) keeps the two from going backwards."""
    connection = session.connection
    conversation = conversation_id.encode()
    row = connection.execute(
        "SELECT (SELECT max(seq) FROM message WHERE conversation_id = %(c)s),"
        " (SELECT max(through_seq) FROM summary WHERE conversation_id = %(c)s)",
        {"c": conversation},
    ).fetchone()
    assert row is not None
    last_seq, covered = cast("tuple[int | None, int | None]", row)
    if last_seq is None or not 1 <= through_seq <= last_seq:
        raise StoreError(
            f"conversation {conversation_id!r} has no message {through_seq} to summarize up to"
        )
    if covered is not None and through_seq <= covered:
        raise StoreError(
            f"a summary of conversation {conversation_id!r} must cover more than the latest"
            f" (through seq {covered}), got through seq {through_seq}"
        )
    connection.execute(
        "INSERT INTO summary (conversation_id, through_seq, text, created_at)"
        " VALUES (%s, %s, %s, %s)",
        (conversation, through_seq, text.encode(), session.now),
    )
    return Summary(through_seq=through_seq, text=text, created_at=session.now)


def latest_summary(connection: psycopg.Connection, conversation_id: str) -> Summary | None:
    row = connection.execute(
        "SELECT through_seq, text, created_at FROM summary WHERE conversation_id = %s"
        " ORDER BY through_seq DESC LIMIT 1",
        (conversation_id.encode(),),
    ).fetchone()
    if row is None:
        return None
    through_seq, text, created_at = cast("tuple[int, bytes, datetime]", row)
    return Summary(through_seq=through_seq, text=bytes(text).decode(), created_at=created_at)


def list_summaries(
    connection: psycopg.Connection, conversation_id: str, after_seq: int, limit: int
) -> list[Summary]:
    rows = connection.execute(
        "SELECT through_seq, text, created_at FROM summary"
        " WHERE conversation_id = %s AND through_seq > %s ORDER BY through_seq LIMIT %s",
        (conversation_id.encode(), after_seq, limit),
    ).fetchall()
    return [
        Summary(through_seq=through_seq, text=bytes(text).decode(), created_at=created_at)
        for through_seq, text, created_at in cast("list[tuple[int, bytes, datetime]]", rows)
    ]


def conversation_snapshot(
    connection: psycopg.Connection, conversation_id: str, limit: int, after_seq: int
) -> ConversationSnapshot:
    """A page of history after ``after_seq``, the active notes and the latest
    summary, from one snapshot (a repeatable-read transaction)."""
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        messages = message_page(connection, conversation_id, after_seq, limit)
        memory = list_memory(connection, conversation_id)
        summary = latest_summary(connection, conversation_id)
    return ConversationSnapshot(tuple(messages), tuple(memory), summary)


def conversation_snapshots(
    connection: psycopg.Connection, requests: list[tuple[str, int, int]]
) -> list[ConversationSnapshot]:
    """``conversation_snapshot`` of each (conversation id, limit, after seq).
    The server does the work, not a thread holding the GIL, so one at a time."""
    return [
        conversation_snapshot(connection, conversation_id, limit, after_seq)
        for conversation_id, limit, after_seq in requests
    ]


# As SQLite's: one index probe per conversation walked and one for its newest
# message; for a conversation whose last turn did not end with an answer, its
# last user message and one probe each into turn_failure and approval.
_INTERRUPTED = """
WITH RECURSIVE next(id) AS (
    SELECT (SELECT conversation_id FROM message WHERE conversation_id {first} %(after)s
            ORDER BY conversation_id LIMIT 1)
    UNION ALL
    SELECT (SELECT conversation_id FROM message WHERE conversation_id > next.id
            ORDER BY conversation_id LIMIT 1)
    FROM next WHERE next.id IS NOT NULL
), unanswered AS (
    SELECT next.id, (SELECT seq FROM message WHERE conversation_id = next.id AND role = 'user'
                     ORDER BY seq DESC LIMIT 1) AS start
    FROM next
    WHERE next.id IS NOT NULL
      AND (SELECT role <> 'assistant' OR tool_calls IS NOT NULL FROM message
           WHERE conversation_id = next.id ORDER BY seq DESC LIMIT 1)
)
SELECT u.id FROM unanswered AS u
WHERE u.start IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM turn_failure AS f
                  WHERE f.conversation_id = u.id AND f.seq = u.start)
  AND NOT EXISTS (SELECT 1 FROM approval AS a
                  WHERE a.conversation_id = u.id AND a.seq > u.start AND a.approved IS NULL)
LIMIT %(limit)s
"""
_FIRST_INTERRUPTED = _INTERRUPTED.format(first=">=")
_INTERRUPTED_AFTER = _INTERRUPTED.format(first=">")


def interrupted_conversations(
    connection: psycopg.Connection, after: str | None, limit: int
) -> list[str]:
    """``FullMessageStore.interrupted_conversations``."""
    rows = connection.execute(
        _FIRST_INTERRUPTED if after is None else _INTERRUPTED_AFTER,
        {"after": (after or "").encode(), "limit": limit},
    ).fetchall()
    return [bytes(row[0]).decode() for row in rows]
