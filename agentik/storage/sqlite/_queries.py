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
from typing import cast, final

import apsw
import attrs

from agentik._errors import DuplicateKeyError, StoreError
from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
from agentik._messages import Message, Role, TokenStats, TokenUsage, ToolCall
from agentik._serde import converter
from agentik.storage._common import from_micros

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

    def _evict(self) -> None:
        """Forget the oldest entry that the current request has not touched."""
        for conversation_id in self._last:
            if conversation_id not in self._touched:
                del self._last[conversation_id]
                return

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


# --- messages -------------------------------------------------------------------

_INSERT_MESSAGE = (
    "INSERT INTO message (conversation_id, seq, role, content, tool_calls, tool_call_id,"
    " prompt_tokens, completion_tokens, created_us, idempotency_key)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_MESSAGE_COLUMNS = (
    "seq, role, content, tool_calls, tool_call_id, prompt_tokens, completion_tokens, created_us"
)

_ROLE_TEXT = {role: role.value for role in Role}

_Row = tuple[str, int, str, str, str | None, str | None, int | None, int | None, int, str | None]


@attrs.frozen
class InsertMessage:
    """Append a message with its conversation's next seq. A value, not a
    closure, so the writer can insert a run of them with one ``executemany``."""

    conversation_id: str
    message: Message
    idempotency_key: str | None

    def __call__(self, session: Session) -> Message:
        row, stored = self._prepare(session)
        try:
            session.connection.execute(_INSERT_MESSAGE, row)
        except apsw.ConstraintError:
            self._raise_if_duplicate(session.connection)
            raise
        return stored

    def _prepare(self, session: Session) -> tuple[_Row, Message]:
        message = self.message
        seq = session.seqs.next_seq(session.connection, self.conversation_id)
        usage = message.usage
        tool_calls = message.tool_calls
        row = (
            self.conversation_id,
            seq,
            _ROLE_TEXT[message.role],
            message.content,
            json.dumps(converter.unstructure(tool_calls, _TOOL_CALLS)) if tool_calls else None,
            message.tool_call_id,
            None if usage is None else usage.prompt_tokens,
            None if usage is None else usage.completion_tokens,
            session.now_us,
            self.idempotency_key,
        )
        stored = Message(
            role=message.role,
            content=message.content,
            tool_calls=tool_calls,
            tool_call_id=message.tool_call_id,
            usage=usage,
            seq=seq,
            created_at=session.now,
        )
        return row, stored

    def _raise_if_duplicate(self, connection: apsw.Connection) -> None:
        key = self.idempotency_key
        if key is None:
            return
        used = find_idempotency_key(connection, self.conversation_id, key)
        if used is not None:
            raise DuplicateKeyError(
                f"idempotency key {key!r} was already used in conversation"
                f" {self.conversation_id!r} (message seq {used})"
            )


def insert_messages(session: Session, inserts: Sequence[InsertMessage]) -> list[Message]:
    """Several appends with one ``executemany``; all or none (the caller's savepoint)."""
    prepared = [insert._prepare(session) for insert in inserts]
    session.connection.executemany(_INSERT_MESSAGE, [row for row, _ in prepared])
    return [stored for _, stored in prepared]


_MessageRow = tuple[int, str, str, str | None, str | None, int | None, int | None, int]


def _message(row: _MessageRow) -> Message:
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
    return [_message(row) for row in cast("list[_MessageRow]", rows)]


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


def conversation_snapshot(
    connection: apsw.Connection, conversation_id: str, limit: int
) -> tuple[list[Message], list[MemoryEntry]]:
    """The first page of history and the active notes, in one read transaction."""
    with connection:
        messages = message_page(connection, conversation_id, 0, limit)
        memory = list_memory(connection, conversation_id)
    return messages, memory


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


def delete_reflections_before(session: Session, cutoff_us: int) -> int:
    session.connection.execute("DELETE FROM reflection WHERE created_us < ?", (cutoff_us,))
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
