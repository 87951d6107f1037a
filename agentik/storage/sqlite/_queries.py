"""The SQL, as plain synchronous functions over an apsw connection.

Write operations take a ``Session`` (the writer's connection inside its open
transaction, the seq cache, and the batch's timestamp) and run inside their
own SAVEPOINT, opened by the writer: raising rolls back that request alone.
Read operations take a read-only connection and finish every statement they
start, so no read transaction stays open between calls. Nothing here touches
trio; callers run these functions in worker threads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from itertools import chain, groupby
from typing import cast, final

import apsw
import attrs

from agentik._errors import DuplicateKeyError, StoreError
from agentik._json import dumps_ascii
from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
from agentik._messages import Message, Role, TokenStats, TokenUsage, ToolCall
from agentik._serde import converter
from agentik.storage._common import from_micros, to_micros
from agentik.storage._rows import MessageRow
from agentik.storage._rows import tool_calls_json as tool_calls_json
from agentik.storage._values import KeyedTurn

_TOOL_CALLS = tuple[ToolCall, ...]
_SEQ_CACHE_SIZE = 10_000


@final
class SeqCache:
    """The last seq of recently written conversations, so most appends skip
    the ``max(seq)`` lookup. Owned by the writer thread. If a request's
    savepoint rolls back, the conversations it touched are forgotten (the next
    append looks them up again, which also heals a cache gone stale because
    something else wrote to the file); if a transaction fails, everything is."""

    def __init__(self, capacity: int = _SEQ_CACHE_SIZE) -> None:
        self._last: dict[str, int] = {}
        self._touched: set[str] = set()
        self._capacity = capacity

    def next_seq(self, connection: apsw.Connection, conversation_id: str) -> int:
        last_seqs = self._last
        last = last_seqs.get(conversation_id)
        self._touched.add(conversation_id)
        if last is None:
            last = _max_seq(connection, conversation_id)
            if len(last_seqs) >= self._capacity:
                self._evict()
        last_seqs[conversation_id] = last + 1
        return last + 1

    def prefetch(self, connection: apsw.Connection, conversation_ids: set[str]) -> None:
        """Look up at once the last seqs of the conversations in
        ``conversation_ids`` that the cache does not hold: one statement and
        one step, where a lookup each would take the GIL back once each (and
        wait for it while the event loop is busy: a burst of new
        conversations made a batch of 224 rows take 59 ms)."""
        last_seqs = self._last
        # An id JSON might not carry through exactly (a NUL, a lone surrogate)
        # is left to ``next_seq``'s own lookup.
        missing = [cid for cid in conversation_ids if cid not in last_seqs and cid.isprintable()]
        if len(missing) < 2:
            return  # ``next_seq`` looks a single one up itself
        found = connection.execute(_MAX_SEQS, (dumps_ascii(missing),)).get
        seqs = dict(zip(missing, json.loads(cast("str", found)), strict=True))
        self._touched.update(missing)
        for conversation_id in missing:
            if len(last_seqs) >= self._capacity:
                self._evict()
            last_seqs[conversation_id] = seqs[conversation_id] or 0

    def _evict(self) -> None:
        """Forget the oldest entry that the current request has not touched."""
        for conversation_id in self._last:
            if conversation_id not in self._touched:
                del self._last[conversation_id]
                return

    def forget(self, conversation_id: str) -> None:
        """The conversation's rows were deleted or replaced (``_lifecycle_queries``):
        its next append reads the last seq from the table again."""
        self._last.pop(conversation_id, None)

    def keep(self) -> None:
        """The request's savepoint was released."""
        self._touched.clear()

    def undo(self) -> None:
        """The request's savepoint was rolled back."""
        for conversation_id in self._touched:
            self._last.pop(conversation_id, None)
        self._touched.clear()

    def clear(self) -> None:
        """The whole transaction was rolled back."""
        self._last.clear()
        self._touched.clear()


_MAX_SEQS = (
    "SELECT json_group_array((SELECT max(seq) FROM message WHERE conversation_id = value))"
    " FROM (SELECT value FROM json_each(?) ORDER BY key)"
)
"""The last seq (or null) of each conversation id of a JSON array, in its order."""


def _max_seq(connection: apsw.Connection, conversation_id: str) -> int:
    row = connection.execute(
        "SELECT max(seq) FROM message WHERE conversation_id = ?", (conversation_id,)
    ).get
    return row if isinstance(row, int) else 0


@attrs.frozen
class Session:
    """What a write operation runs with."""

    connection: apsw.Connection
    seqs: SeqCache
    now_us: int
    """The batch's timestamp: every write of one batch shares it."""
    now: datetime
    """The same instant as an aware UTC datetime."""

    def insert_message(self, row: MessageRow) -> Message:
        """Insert one row (what an append request runs when it is alone)."""
        return insert_message(self, row)


# --- messages -------------------------------------------------------------------

_MESSAGE_INSERT_COLUMNS = (
    "conversation_id, seq, role, content, tool_calls, tool_call_id,"
    " prompt_tokens, completion_tokens, created_us, idempotency_key"
)
_INSERT_MESSAGE = (
    f"INSERT INTO message ({_MESSAGE_INSERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_MESSAGE_COLUMNS = (
    "seq, role, content, tool_calls, tool_call_id, prompt_tokens, completion_tokens, created_us"
)

_Row = tuple[str, int, str, str, str | None, str | None, int | None, int | None, int, str | None]


def _row(session: Session, row: MessageRow) -> _Row:
    """The ``message`` row to insert, with its conversation's next seq
    (recorded in ``row.seq``): the one place that builds it, for the single
    and the multi-row insert."""
    conversation_id = row.conversation_id
    row.seq = seq = session.seqs.next_seq(session.connection, conversation_id)
    message = row.message
    return (
        conversation_id,
        seq,
        row.role,
        message.content,
        row.tool_calls,
        message.tool_call_id,
        row.prompt_tokens,
        row.completion_tokens,
        session.now_us,
        row.idempotency_key,
    )


def insert_message(session: Session, row: MessageRow) -> Message:
    """Insert one message with its conversation's next seq (recorded in
    ``row.seq``); a reused idempotency key is a ``DuplicateKeyError``."""
    connection = session.connection
    try:
        connection.execute(_INSERT_MESSAGE, _row(session, row))
    except apsw.ConstraintError:
        _raise_if_duplicate(connection, row)
        raise
    return row.stored(session.now)


def _raise_if_duplicate(connection: apsw.Connection, row: MessageRow) -> None:
    key = row.idempotency_key
    if key is None:
        return
    used = find_idempotency_key(connection, row.conversation_id, key)
    if used is not None:
        raise DuplicateKeyError(
            f"idempotency key {key!r} was already used in conversation"
            f" {row.conversation_id!r} (message seq {used})"
        )


_ROW_PLACEHOLDERS = "(?,?,?,?,?,?,?,?,?,?)"
LARGEST_CHUNK = 512
"""Rows in the largest multi-row INSERT: its SQL (11 KiB) stays under the
16 KiB up to which apsw caches a prepared statement, and its 5,120 bindings
under SQLite's limit of 32,766."""
_INSERT_ROWS = {
    size: f"INSERT INTO message ({_MESSAGE_INSERT_COLUMNS}) VALUES "
    + ",".join([_ROW_PLACEHOLDERS] * size)
    for size in (1 << power for power in range(LARGEST_CHUNK.bit_length()))
}


def insert_messages(session: Session, inserts: Sequence[MessageRow]) -> None:
    """Insert several messages, all or none (the caller's savepoint), each
    ``insert.seq`` set to its seq.

    A few multi-row ``INSERT … VALUES (…), (…), …`` statements rather than an
    ``executemany``: chunks of 512, 256, … 1 rows, so only ten statement texts
    exist and apsw's cache keeps them prepared. Each statement binds its rows
    at once and SQLite inserts them in one step, where ``executemany`` goes
    back to Python (and takes the GIL) for every row.
    """
    connection = session.connection
    session.seqs.prefetch(connection, {insert.conversation_id for insert in inserts})
    rows = [_row(session, insert) for insert in inserts]
    position, total = 0, len(rows)
    while position < total:
        left = total - position
        size = LARGEST_CHUNK if left >= LARGEST_CHUNK else 1 << (left.bit_length() - 1)
        chunk = rows[position : position + size] if size < total else rows
        connection.execute(_INSERT_ROWS[size], list(chain.from_iterable(chunk)))
        position += size


_MessageRow = tuple[int, str, str, str | None, str | None, int | None, int | None, int]
_KeyedRow = tuple[int, str, int, str, str, str | None, str | None, int | None, int | None, int]
"""The keyed message's seq and key, then a ``_MessageRow`` of the turn."""


def message_of(row: _MessageRow) -> Message:
    seq, role, content, tool_calls, tool_call_id, prompt, completion, created_us = row
    return Message(
        role=Role(role),
        content=content,
        tool_calls=()
        if tool_calls is None
        else converter.structure(json.loads(tool_calls), _TOOL_CALLS),
        tool_call_id=tool_call_id,
        usage=None
        if prompt is None or completion is None
        else TokenUsage(prompt_tokens=prompt, completion_tokens=completion),
        seq=seq,
        created_at=from_micros(created_us),
    )


def message_page(
    connection: apsw.Connection, conversation_id: str, after_seq: int, limit: int
) -> list[Message]:
    rows = connection.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM message"
        " WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (conversation_id, after_seq, limit),
    ).fetchall()
    return [message_of(row) for row in cast("list[_MessageRow]", rows)]


def token_stats(connection: apsw.Connection, conversation_id: str) -> TokenStats:
    row = connection.execute(
        "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0),"
        " count(prompt_tokens) FROM message WHERE conversation_id = ?",
        (conversation_id,),
    ).fetchall()[0]
    prompt, completion, counted = cast("tuple[int, int, int]", row)
    return TokenStats(prompt_tokens=prompt, completion_tokens=completion, messages=counted)


def list_idempotency_keys(
    connection: apsw.Connection, conversation_id: str, before_seq: int | None, limit: int
) -> list[tuple[int, str]]:
    """Walks the conversation's rows newest first (``message_by_seq``)."""
    rows = connection.execute(
        "SELECT seq, idempotency_key FROM message WHERE conversation_id = ? AND seq < ?"
        " AND idempotency_key IS NOT NULL ORDER BY seq DESC LIMIT ?",
        (conversation_id, 2**62 if before_seq is None else before_seq, limit),
    ).fetchall()
    return cast("list[tuple[int, str]]", rows)


_KEY_ENDS_WITH = "(:suffix = '' OR substr(idempotency_key, -length(:suffix)) = :suffix)"

# The keyed rows of one page (message_by_seq, walked newest first), then for
# each the seq of the next user message (the same index, walked forward from
# it: one turn's rows), then the turn's rows between the two. Rows read follow
# the page's turns, not the conversation's length.
_KEYED_TURNS = f"""
WITH keyed(seq, key) AS (
    SELECT seq, idempotency_key FROM message
    WHERE conversation_id = :conversation AND seq < :before
      AND idempotency_key IS NOT NULL AND {_KEY_ENDS_WITH}
    ORDER BY seq DESC LIMIT :limit
), turn(seq, key, stop) AS (
    SELECT keyed.seq, keyed.key, coalesce(
        (SELECT next.seq FROM message AS next
         WHERE next.conversation_id = :conversation AND next.seq > keyed.seq
           AND next.seq < keyed.seq + :most AND next.role = 'user'
         ORDER BY next.seq LIMIT 1),
        keyed.seq + :most)
    FROM keyed
)
SELECT turn.seq, turn.key, {", ".join(f"m.{c.strip()}" for c in _MESSAGE_COLUMNS.split(","))}
FROM turn JOIN message AS m
    ON m.conversation_id = :conversation AND m.seq >= turn.seq AND m.seq < turn.stop
ORDER BY turn.seq DESC, m.seq
"""


def list_keyed_turns(
    connection: apsw.Connection,
    conversation_id: str,
    before_seq: int | None,
    limit: int,
    key_suffix: str,
    max_messages: int,
) -> list[KeyedTurn]:
    rows = connection.execute(
        _KEYED_TURNS,
        {
            "conversation": conversation_id,
            "before": 2**62 if before_seq is None else before_seq,
            "limit": limit,
            "suffix": key_suffix,
            "most": max_messages,
        },
    ).fetchall()
    return [
        KeyedTurn(key=key, messages=tuple(message_of(row[2:]) for row in group))
        for (_, key), group in groupby(cast("list[_KeyedRow]", rows), key=lambda row: row[:2])
    ]


def count_idempotency_keys(
    connection: apsw.Connection, conversation_id: str, key_suffix: str
) -> int:
    """An index-only count (``message_by_idempotency_key``): no row is read."""
    count = connection.execute(
        "SELECT count(*) FROM message WHERE conversation_id = :conversation"
        f" AND idempotency_key IS NOT NULL AND {_KEY_ENDS_WITH}",
        {"conversation": conversation_id, "suffix": key_suffix},
    ).get
    assert isinstance(count, int)
    return count


def find_idempotency_key(connection: apsw.Connection, conversation_id: str, key: str) -> int | None:
    seq = connection.execute(
        "SELECT seq FROM message WHERE conversation_id = ? AND idempotency_key = ?",
        (conversation_id, key),
    ).get
    return seq if isinstance(seq, int) else None


# One index seek per conversation returned, however long the conversations are.
_NEXT_CONVERSATIONS = """
WITH RECURSIVE next(id) AS (
    SELECT (SELECT min(conversation_id) FROM message WHERE {first})
    UNION ALL
    SELECT (SELECT min(conversation_id) FROM message WHERE conversation_id > next.id)
    FROM next WHERE next.id IS NOT NULL
)
SELECT id FROM next WHERE id IS NOT NULL LIMIT ?
"""


def list_conversations(connection: apsw.Connection, after: str | None, limit: int) -> list[str]:
    if after is None:
        sql, bindings = _NEXT_CONVERSATIONS.format(first="1"), (limit,)
    else:
        sql = _NEXT_CONVERSATIONS.format(first="conversation_id > ?")
        bindings = (after, limit)  # type: ignore[assignment]
    rows = cast("list[tuple[str]]", connection.execute(sql, bindings).fetchall())
    return [row[0] for row in rows]


# --- working memory -------------------------------------------------------------


_EntryRow = tuple[int, str, str, int]


def _memory_entry(row: _EntryRow) -> MemoryEntry:
    entry_id, conversation_id, text, created_us = row
    return MemoryEntry(
        id=entry_id, conversation_id=conversation_id, text=text, created_at=from_micros(created_us)
    )


def append_memory(session: Session, conversation_id: str, text: str) -> MemoryEntry:
    entry_id = session.connection.execute(
        "INSERT INTO memory_entry (conversation_id, text, created_us) VALUES (?, ?, ?)"
        " RETURNING id",
        (conversation_id, text, session.now_us),
    ).get
    assert isinstance(entry_id, int)
    return MemoryEntry(
        id=entry_id,
        conversation_id=conversation_id,
        text=text,
        created_at=session.now,
    )


def archive_memory(session: Session, conversation_id: str, entry_ids: Sequence[int]) -> int:
    session.connection.execute(
        "UPDATE memory_entry SET archived = 1"
        " WHERE id IN (SELECT value FROM json_each(?)) AND conversation_id = ? AND archived = 0",
        (json.dumps(sorted(set(entry_ids))), conversation_id),
    )
    return session.connection.changes()


def compact_memory(
    session: Session, conversation_id: str, entry_ids: Sequence[int], summary: str
) -> MemoryEntry:
    wanted = set(entry_ids)
    if archive_memory(session, conversation_id, list(wanted)) != len(wanted):
        raise StoreError(
            f"memory entries {sorted(wanted)} are not all active entries of conversation"
            f" {conversation_id!r}; nothing was compacted"
        )
    return append_memory(session, conversation_id, summary)


def list_memory(connection: apsw.Connection, conversation_id: str) -> list[MemoryEntry]:
    rows = connection.execute(
        "SELECT id, conversation_id, text, created_us FROM memory_entry"
        " WHERE conversation_id = ? AND archived = 0 ORDER BY id",
        (conversation_id,),
    ).fetchall()
    return [_memory_entry(row) for row in cast("list[_EntryRow]", rows)]


def list_archived_memory(
    connection: apsw.Connection, conversation_id: str, after_id: int, limit: int
) -> list[MemoryEntry]:
    rows = connection.execute(
        "SELECT id, conversation_id, text, created_us FROM memory_entry"
        " WHERE conversation_id = ? AND archived = 1 AND id > ? ORDER BY id LIMIT ?",
        (conversation_id, after_id, limit),
    ).fetchall()
    return [_memory_entry(row) for row in cast("list[_EntryRow]", rows)]


# --- reflections ----------------------------------------------------------------

_REFLECTION_COLUMNS = "id, conversation_id, text, created_us"


def _reflection(row: _EntryRow) -> Reflection:
    reflection_id, conversation_id, text, created_us = row
    return Reflection(
        id=reflection_id,
        conversation_id=conversation_id,
        text=text,
        created_at=from_micros(created_us),
    )


def insert_reflection(session: Session, conversation_id: str, text: str) -> Reflection:
    reflection_id = session.connection.execute(
        "INSERT INTO reflection (conversation_id, text, created_us) VALUES (?, ?, ?) RETURNING id",
        (conversation_id, text, session.now_us),
    ).get
    assert isinstance(reflection_id, int)
    return Reflection(
        id=reflection_id,
        conversation_id=conversation_id,
        text=text,
        created_at=session.now,
    )


def delete_reflections_before(session: Session, cutoff: datetime) -> int:
    session.connection.execute("DELETE FROM reflection WHERE created_us < ?", (to_micros(cutoff),))
    return session.connection.changes()


def recent_reflections(connection: apsw.Connection, limit: int) -> list[Reflection]:
    rows = connection.execute(
        f"SELECT {_REFLECTION_COLUMNS} FROM reflection ORDER BY created_us DESC, id DESC LIMIT ?",
        (limit,),
    ).fetchall()
    return [_reflection(row) for row in cast("list[_EntryRow]", rows)]


def count_reflections(connection: apsw.Connection) -> int:
    count = connection.execute("SELECT count(*) FROM reflection").get
    assert isinstance(count, int)
    return count


def reflections_of(connection: apsw.Connection, conversation_id: str) -> list[Reflection]:
    rows = connection.execute(
        f"SELECT {_REFLECTION_COLUMNS} FROM reflection WHERE conversation_id = ?"
        " ORDER BY created_us, id",
        (conversation_id,),
    ).fetchall()
    return [_reflection(row) for row in cast("list[_EntryRow]", rows)]


# --- skills ---------------------------------------------------------------------


def upsert_skill(session: Session, skill: Skill) -> Skill:
    session.connection.execute(
        "INSERT INTO skill (name, description, body, updated_us) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET description = excluded.description,"
        " body = excluded.body, updated_us = excluded.updated_us",
        (skill.name, skill.description, skill.body, session.now_us),
    )
    return attrs.evolve(skill, updated_at=session.now)


def remove_skill(session: Session, name: str) -> bool:
    session.connection.execute("DELETE FROM skill WHERE name = ?", (name,))
    return session.connection.changes() > 0


_SkillRow = tuple[str, str, str, int]


def _skill(row: _SkillRow) -> Skill:
    name, description, body, updated_us = row
    return Skill(name=name, description=description, body=body, updated_at=from_micros(updated_us))


def all_skills(connection: apsw.Connection) -> list[Skill]:
    rows = connection.execute(
        "SELECT name, description, body, updated_us FROM skill ORDER BY name"
    ).fetchall()
    return [_skill(row) for row in cast("list[_SkillRow]", rows)]


def get_skill(connection: apsw.Connection, name: str) -> Skill | None:
    rows = connection.execute(
        "SELECT name, description, body, updated_us FROM skill WHERE name = ?", (name,)
    ).fetchall()
    return _skill(cast("_SkillRow", rows[0])) if rows else None


def skill_catalog(connection: apsw.Connection) -> list[SkillSummary]:
    rows = connection.execute("SELECT name, description FROM skill ORDER BY name").fetchall()
    pairs = cast("list[tuple[str, str]]", rows)
    return [SkillSummary(name=name, description=description) for name, description in pairs]


def skill_exists(connection: apsw.Connection, name: str) -> bool:
    return connection.execute("SELECT 1 FROM skill WHERE name = ?", (name,)).get is not None
