"""The turn ledger's SQL (schema version 2: approvals and failed turns) and
the summaries' (version 3).

Like ``_queries``, plain functions of a connection or a writer ``Session``,
run by the writer (writes, inside its transaction) or the reader pool.
A waiting call's row is written in the transaction of the message that makes
the call, and a denied call's tool result in the transaction of its decision,
so no crash can separate them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import apsw

from agentik._errors import StoreError
from agentik._memory import MemoryEntry
from agentik._messages import Message
from agentik.storage._common import from_micros
from agentik.storage._rows import MessageRow
from agentik.storage._values import Approval, ConversationSnapshot, Summary, TurnRecord
from agentik.storage.sqlite import _queries
from agentik.storage.sqlite._queries import Session

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
    session.connection.executemany(
        "INSERT INTO approval (conversation_id, seq, call_id, ordinal, created_us)"
        " VALUES (?, ?, ?, ?, ?)",
        [
            (insert.conversation_id, stored.seq, call_id, ordinal, session.now_us)
            for ordinal, call_id in enumerate(call_ids)
        ],
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
    connection = session.connection
    connection.execute(
        "UPDATE approval SET approved = ?, reason = ?, decided_us = ?"
        " WHERE conversation_id = ? AND seq = ? AND call_id = ? AND approved IS NULL",
        (int(approve), reason, session.now_us, conversation_id, seq, call_id),
    )
    if connection.changes() != 1:
        raise StoreError(
            f"call {call_id!r} of message {seq} in conversation {conversation_id!r}"
            " is not waiting for a decision"
        )
    return None if result is None else session.insert_message(result)


def insert_turn_failure(session: Session, conversation_id: str, seq: int, code: str) -> None:
    """Record (or replace) how the turn whose user message is ``seq`` failed."""
    connection = session.connection
    exists = connection.execute(
        "SELECT 1 FROM message WHERE conversation_id = ? AND seq = ?", (conversation_id, seq)
    ).fetchall()
    if not exists:
        raise StoreError(f"conversation {conversation_id!r} has no seq {seq}")
    connection.execute(
        "INSERT INTO turn_failure (conversation_id, seq, code, created_us) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (conversation_id, seq) DO UPDATE SET code = excluded.code,"
        " created_us = excluded.created_us",
        (conversation_id, seq, code, session.now_us),
    )


def turn_record(connection: apsw.Connection, conversation_id: str, seq: int) -> TurnRecord:
    """Approvals of calls made after ``seq`` up to the next user message, and
    the failure of the turn at ``seq``: three index look-ups."""
    rows = connection.execute(
        "SELECT min(seq) FROM message WHERE conversation_id = ? AND seq > ? AND role = 'user'",
        (conversation_id, seq),
    ).fetchall()
    end = cast("int | None", rows[0][0]) or _NO_END
    approvals = connection.execute(
        "SELECT seq, call_id, approved, reason FROM approval"
        " WHERE conversation_id = ? AND seq > ? AND seq < ? ORDER BY seq, ordinal",
        (conversation_id, seq, end),
    ).fetchall()
    failure = connection.execute(
        "SELECT code FROM turn_failure WHERE conversation_id = ? AND seq = ?",
        (conversation_id, seq),
    ).fetchall()
    return TurnRecord(
        approvals=tuple(
            Approval(
                seq=at,
                call_id=call_id,
                approved=None if approved is None else bool(approved),
                reason=reason,
            )
            for at, call_id, approved, reason in cast(
                "list[tuple[int, str, int | None, str]]", approvals
            )
        ),
        failure=cast("str", failure[0][0]) if failure else None,
    )


# --- summaries (schema version 3) -------------------------------------------------


def insert_summary(session: Session, conversation_id: str, through_seq: int, text: str) -> Summary:
    """Store a summary past the latest one, covering an existing message."""
    connection = session.connection
    rows = connection.execute(
        "SELECT (SELECT max(seq) FROM message WHERE conversation_id = :c),"
        " (SELECT max(through_seq) FROM summary WHERE conversation_id = :c)",
        {"c": conversation_id},
    ).fetchall()
    last_seq, covered = cast("tuple[int | None, int | None]", rows[0])
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
        "INSERT INTO summary (conversation_id, through_seq, text, created_us) VALUES (?, ?, ?, ?)",
        (conversation_id, through_seq, text, session.now_us),
    )
    return Summary(through_seq=through_seq, text=text, created_at=session.now)


def latest_summary(connection: apsw.Connection, conversation_id: str) -> Summary | None:
    rows = connection.execute(
        "SELECT through_seq, text, created_us FROM summary WHERE conversation_id = ?"
        " ORDER BY through_seq DESC LIMIT 1",
        (conversation_id,),
    ).fetchall()
    if not rows:
        return None
    through_seq, text, created_us = cast("tuple[int, str, int]", rows[0])
    return Summary(through_seq=through_seq, text=text, created_at=from_micros(created_us))


def list_summaries(
    connection: apsw.Connection, conversation_id: str, after_seq: int, limit: int
) -> list[Summary]:
    rows = connection.execute(
        "SELECT through_seq, text, created_us FROM summary"
        " WHERE conversation_id = ? AND through_seq > ? ORDER BY through_seq LIMIT ?",
        (conversation_id, after_seq, limit),
    ).fetchall()
    return [
        Summary(through_seq=through_seq, text=text, created_at=from_micros(created_us))
        for through_seq, text, created_us in cast("list[tuple[int, str, int]]", rows)
    ]


_SNAPSHOTS = """
SELECT json_group_array(json_array(
  json((SELECT json_group_array(json_array(
           seq, role, content, tool_calls, tool_call_id, prompt_tokens, completion_tokens,
           created_us) ORDER BY seq)
        FROM (SELECT * FROM message WHERE conversation_id = ids.value ->> 0
              AND seq > ids.value ->> 1 ORDER BY seq LIMIT ?2))),
  json((SELECT json_group_array(json_array(id, text, created_us) ORDER BY id)
        FROM memory_entry WHERE conversation_id = ids.value ->> 0 AND archived = 0)),
  json((SELECT json_array(through_seq, text, created_us) FROM summary
        WHERE conversation_id = ids.value ->> 0 ORDER BY through_seq DESC LIMIT 1))
) ORDER BY ids.key)
FROM json_each(?1) AS ids
"""
"""For each [conversation id, after seq] of a JSON array: [its page of history,
its active notes, its latest summary], all one JSON value: one step."""


def conversation_snapshots(
    connection: apsw.Connection, requests: list[tuple[str, int, int]]
) -> list[ConversationSnapshot]:
    """A page of history after ``after_seq``, the active notes and the latest
    summary, of each (conversation id, limit, after seq): one statement (so
    one read snapshot) for each limit there is, usually one.

    Every call into SQLite gives up the GIL and takes it back, which costs
    more than the query while other threads run Python: 1,000 conversations
    starting at once made 1,000 three-query reads, about a dozen calls each.
    As one statement whose answer is one JSON value, a burst is one call.
    ``ensure_ascii=False`` keeps a lone surrogate one, which the binding
    refuses, as a single read's does.
    """
    by_limit: dict[int, list[int]] = {}
    for index, (_, limit, _) in enumerate(requests):
        by_limit.setdefault(limit, []).append(index)
    snapshots: list[ConversationSnapshot | None] = [None] * len(requests)
    for limit, indexes in by_limit.items():
        ids = json.dumps([[requests[i][0], requests[i][2]] for i in indexes], ensure_ascii=False)
        found = connection.execute(_SNAPSHOTS, (ids, limit)).get
        parts: list[Any] = json.loads(cast("str", found))
        for index, (messages, notes, summary) in zip(indexes, parts, strict=True):
            conversation_id = requests[index][0]
            snapshots[index] = ConversationSnapshot(
                tuple(_queries.message_of(tuple(row)) for row in messages),
                tuple(
                    MemoryEntry(
                        id=entry_id,
                        conversation_id=conversation_id,
                        text=text,
                        created_at=from_micros(created_us),
                    )
                    for entry_id, text, created_us in notes
                ),
                None if summary is None else _summary(summary),
            )
    return cast("list[ConversationSnapshot]", snapshots)


def _summary(row: list[object]) -> Summary:
    through_seq, text, created_us = cast("tuple[int, str, int]", row)
    return Summary(through_seq=through_seq, text=text, created_at=from_micros(created_us))


# Each conversation (one seek on message_by_seq, as list_conversations walks
# them), its newest message (one seek); only for a conversation whose last turn
# did not end with an answer: its last user message (a short walk back), and
# one probe each into turn_failure and approval. Reads follow the
# conversations walked, not their length.
_INTERRUPTED = """
WITH RECURSIVE next(id) AS (
    SELECT (SELECT min(conversation_id) FROM message WHERE conversation_id > :after)
    UNION ALL
    SELECT (SELECT min(conversation_id) FROM message WHERE conversation_id > next.id)
    FROM next WHERE next.id IS NOT NULL
), unanswered(id, start) AS (
    SELECT next.id, (SELECT seq FROM message WHERE conversation_id = next.id AND role = 'user'
                     ORDER BY seq DESC LIMIT 1)
    FROM next
    WHERE next.id IS NOT NULL
      AND (SELECT role <> 'assistant' OR tool_calls IS NOT NULL FROM message
           WHERE conversation_id = next.id ORDER BY seq DESC LIMIT 1)
)
SELECT id FROM unanswered
WHERE start IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM turn_failure WHERE conversation_id = id AND seq = start)
  AND NOT EXISTS (SELECT 1 FROM approval
                  WHERE conversation_id = id AND seq > start AND approved IS NULL)
LIMIT :limit
"""


def interrupted_conversations(
    connection: apsw.Connection, after: str | None, limit: int
) -> list[str]:
    """``FullMessageStore.interrupted_conversations``."""
    rows = connection.execute(
        _INTERRUPTED, {"after": "" if after is None else after, "limit": limit}
    ).fetchall()
    return [cast("str", row[0]) for row in rows]
