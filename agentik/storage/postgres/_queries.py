"""The SQL for PostgreSQL, as plain synchronous functions over psycopg 3.

Write operations take a ``Session`` (the writer's connection inside its open
transaction, the batch's seqs, and the batch's timestamp) and run inside
their own SAVEPOINT, opened by the writer: raising rolls back that request
alone. Read operations take a reader's connection (autocommit: each
statement its own snapshot; reads that need two statements to agree run
them in one REPEATABLE READ transaction). Nothing here touches trio; callers
run these functions in worker threads.

Strings go in and out as UTF-8 ``bytea`` (see migrations/0001_init.sql for why).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from itertools import groupby
from typing import cast, final

import attrs
import psycopg
from psycopg import errors

from agentik._errors import DuplicateKeyError, StoreError
from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
from agentik._messages import Message, Role, TokenStats, TokenUsage, ToolCall
from agentik._serde import converter
from agentik.storage._rows import MessageRow
from agentik.storage._values import KeyedTurn

_TOOL_CALLS = tuple[ToolCall, ...]
_NO_END = 2**62


_LAST_SEQS = """
SELECT c, (SELECT max(seq) FROM message WHERE conversation_id = c)
FROM unnest(%(ids)s::bytea[]) AS c
"""

# Which of these conversations this node owns, its own lease alive; their
# ownership rows stay locked until the batch ends, so a takeover waits for it.
_OWNED = """
SELECT conversation_id FROM conversation_owner
WHERE conversation_id = ANY(%(ids)s::bytea[]) AND node_id = %(me)s AND EXISTS (
    SELECT 1 FROM agentik_node WHERE node_id = %(me)s AND expires_at > clock_timestamp())
FOR SHARE
"""

_SEQ_CACHE_SIZE = 10_000


@final
class SeqCache:
    """The last seq of recently written conversations, so most appends skip
    the ``max(seq)`` look-up; owned by the writer's thread, as SQLite's.

    It is sound because one writer writes each conversation: on a single node
    by configuration, and with several nodes because a node writes only the
    conversations it owns, and it owns them without a gap for as long as its
    node id (its lease's generation) stays the same; a new generation starts
    an empty cache. Each batch checks (and locks, ``FOR SHARE``) the ownership
    of the conversations it writes to, and a message for one the node does
    not own is refused. A request whose savepoint rolls back forgets the
    conversations it touched; a failed transaction forgets everything (and a
    cache gone stale, because something else wrote, heals after one failed
    write, as SQLite's does)."""

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._touched: set[str] = set()
        self._owned: set[str] = set()
        """Conversations whose ownership this batch checked and locked."""
        self._node: str | None = None
        self._connection: psycopg.Connection | None = None

    def start(self, connection: psycopg.Connection, node: str | None) -> None:
        """A batch begins on ``connection``, for the node ``node`` (None: one node)."""
        if node != self._node or len(self._last) > _SEQ_CACHE_SIZE:
            self._last.clear()
        self._node = node
        self._connection = connection
        self._owned.clear()
        self._touched.clear()

    def clear(self) -> None:
        """The whole transaction was rolled back."""
        self._last.clear()
        self._owned.clear()
        self._touched.clear()

    def prefetch(self, conversation_ids: Sequence[str]) -> None:
        """Check the ownership of the batch's conversations and read the seqs
        not cached: one statement each, whatever the number of conversations."""
        if self._node is not None:
            self._check_owned(list(set(conversation_ids)))
        unknown = list({c for c in conversation_ids if c not in self._last})
        if unknown:
            self._look_up(unknown)

    def _check_owned(self, conversation_ids: list[str]) -> None:
        assert self._connection is not None
        rows = self._connection.execute(
            _OWNED, {"ids": [c.encode() for c in conversation_ids], "me": self._node}
        ).fetchall()
        self._owned.update(bytes(row[0]).decode() for row in rows)

    def _look_up(self, conversation_ids: list[str]) -> None:
        assert self._connection is not None
        rows = self._connection.execute(
            _LAST_SEQS, {"ids": [c.encode() for c in conversation_ids]}
        ).fetchall()
        for conversation, last in rows:
            self._last[bytes(conversation).decode()] = last or 0

    def fence(self, conversation_id: str) -> None:
        """Refuse (``StoreError``) a write to a conversation another node owns,
        and lock its ownership row for the batch; with one node, nothing."""
        if self._node is not None and conversation_id not in self._owned:
            self._check_owned([conversation_id])
            if conversation_id not in self._owned:
                raise StoreError(
                    f"conversation {conversation_id!r} is not owned by this node;"
                    " its messages are written by its owner"
                )
            self._touched.add(conversation_id)  # its lock goes if the savepoint does

    def forget(self, conversation_id: str) -> None:
        """The conversation's rows were deleted or replaced (``_lifecycle_queries``):
        its next append reads the last seq from the table again."""
        self._last.pop(conversation_id, None)

    def next_seq(self, conversation_id: str) -> int:
        self.fence(conversation_id)
        last = self._last.get(conversation_id)
        if last is None:
            self._look_up([conversation_id])
            last = self._last[conversation_id]
        self._touched.add(conversation_id)
        self._last[conversation_id] = last + 1
        return last + 1

    def keep(self) -> None:
        """The request's savepoint was released."""
        self._touched.clear()

    def undo(self) -> None:
        """The request's savepoint was rolled back."""
        for conversation_id in self._touched:
            self._last.pop(conversation_id, None)
            self._owned.discard(conversation_id)
        self._touched.clear()


@attrs.frozen
class Session:
    """What a write operation runs with."""

    connection: psycopg.Connection
    seqs: SeqCache
    now: datetime
    """The batch's timestamp: every write of one batch shares it."""

    def insert_message(self, row: MessageRow) -> Message:
        """Insert one row (what an append request runs when it is alone)."""
        return insert_message(self, row)


# --- messages -------------------------------------------------------------------

_INSERT_COLUMNS = (
    "conversation_id, seq, role, content, tool_calls, tool_call_id,"
    " prompt_tokens, completion_tokens, created_at, idempotency_key"
)
_INSERT_ROWS = (
    f"INSERT INTO message ({_INSERT_COLUMNS})"
    " SELECT c, s, r, b, tc, ti, pt, ct, %s, k FROM unnest("
    "%s::bytea[], %s::bigint[], %s::text[], %s::bytea[], %s::text[], %s::bytea[],"
    " %s::bigint[], %s::bigint[], %s::bytea[]) AS u(c, s, r, b, tc, ti, pt, ct, k)"
)
_MESSAGE_COLUMNS = (
    "seq, role, content, tool_calls, tool_call_id, prompt_tokens, completion_tokens, created_at"
)


def insert_messages(session: Session, rows: Sequence[MessageRow]) -> None:
    """Insert several messages in one statement, all or none (the caller's
    savepoint), each ``row.seq`` set to its seq: one ``INSERT … SELECT FROM
    unnest(arrays)``, one round trip whatever the number of rows, its
    parameters sent in binary."""
    next_seq = session.seqs.next_seq
    conversations: list[bytes] = []
    seqs: list[int] = []
    roles: list[str] = []
    contents: list[bytes] = []
    calls: list[str | None] = []
    call_ids: list[bytes | None] = []
    prompts: list[int | None] = []
    completions: list[int | None] = []
    keys: list[bytes | None] = []
    for row in rows:
        conversation_id = row.conversation_id
        row.seq = seq = next_seq(conversation_id)
        message = row.message
        conversations.append(conversation_id.encode())
        seqs.append(seq)
        roles.append(row.role)
        contents.append(message.content.encode())
        calls.append(row.tool_calls)
        tool_call_id = message.tool_call_id
        call_ids.append(None if tool_call_id is None else tool_call_id.encode())
        prompts.append(row.prompt_tokens)
        completions.append(row.completion_tokens)
        key = row.idempotency_key
        keys.append(None if key is None else key.encode())
    session.connection.execute(
        _INSERT_ROWS,
        (
            session.now,
            conversations,
            seqs,
            roles,
            contents,
            calls,
            call_ids,
            prompts,
            completions,
            keys,
        ),
    )


def insert_message(session: Session, row: MessageRow) -> Message:
    """Insert one message; a reused idempotency key is a ``DuplicateKeyError``.
    After a unique violation the transaction is unusable until a savepoint is
    rolled back, so a keyed insert runs in a savepoint of its own and the key
    is looked up after that one is rolled back."""
    key = row.idempotency_key
    if key is None:
        insert_messages(session, (row,))
        return row.stored(session.now)
    connection = session.connection
    try:
        with connection.transaction():  # a nested SAVEPOINT
            insert_messages(session, (row,))
    except errors.UniqueViolation as error:
        if error.diag.constraint_name != "message_by_idempotency_key":
            raise
        used = find_idempotency_key(connection, row.conversation_id, key)
        raise DuplicateKeyError(
            f"idempotency key {key!r} was already used in conversation"
            f" {row.conversation_id!r} (message seq {used})"
        ) from error
    return row.stored(session.now)


_MessageRow = tuple[int, str, bytes, str | None, bytes | None, int | None, int | None, datetime]


def _message(row: _MessageRow) -> Message:
    seq, role, content, tool_calls, tool_call_id, prompt, completion, created_at = row
    return Message(
        role=Role(role),
        content=bytes(content).decode(),
        tool_calls=()
        if tool_calls is None
        else converter.structure(json.loads(tool_calls), _TOOL_CALLS),
        tool_call_id=None if tool_call_id is None else bytes(tool_call_id).decode(),
        usage=None
        if prompt is None or completion is None
        else TokenUsage(prompt_tokens=prompt, completion_tokens=completion),
        seq=seq,
        created_at=created_at,
    )


def message_page(
    connection: psycopg.Connection, conversation_id: str, after_seq: int, limit: int
) -> list[Message]:
    rows = connection.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM message"
        " WHERE conversation_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (conversation_id.encode(), after_seq, limit),
    ).fetchall()
    return [_message(row) for row in cast("list[_MessageRow]", rows)]


def token_stats(connection: psycopg.Connection, conversation_id: str) -> TokenStats:
    row = connection.execute(
        "SELECT coalesce(sum(prompt_tokens), 0)::bigint,"
        " coalesce(sum(completion_tokens), 0)::bigint, count(prompt_tokens)"
        " FROM message WHERE conversation_id = %s",
        (conversation_id.encode(),),
    ).fetchone()
    assert row is not None
    prompt, completion, counted = cast("tuple[int, int, int]", row)
    return TokenStats(prompt_tokens=prompt, completion_tokens=completion, messages=counted)


def find_idempotency_key(
    connection: psycopg.Connection, conversation_id: str, key: str
) -> int | None:
    row = connection.execute(
        "SELECT seq FROM message WHERE conversation_id = %s AND idempotency_key = %s",
        (conversation_id.encode(), key.encode()),
    ).fetchone()
    return None if row is None else cast("int", row[0])


def list_idempotency_keys(
    connection: psycopg.Connection, conversation_id: str, before_seq: int | None, limit: int
) -> list[tuple[int, str]]:
    rows = connection.execute(
        "SELECT seq, idempotency_key FROM message WHERE conversation_id = %s AND seq < %s"
        " AND idempotency_key IS NOT NULL ORDER BY seq DESC LIMIT %s",
        (conversation_id.encode(), _NO_END if before_seq is None else before_seq, limit),
    ).fetchall()
    return [(seq, bytes(key).decode()) for seq, key in rows]


# A bytea ends with a suffix: byte-wise, which for UTF-8 is character-wise.
_KEY_ENDS_WITH = (
    "(length(%(suffix)s::bytea) = 0 OR (length(idempotency_key) >= length(%(suffix)s::bytea)"
    " AND substring(idempotency_key FROM length(idempotency_key)"
    " - length(%(suffix)s::bytea) + 1) = %(suffix)s::bytea))"
)

# As SQLite's: the keyed rows of one page (the primary key walked newest
# first), then for each the seq of the next user message, then the turn's rows
# between the two. Rows read follow the page's turns, not the conversation's length.
_KEYED_TURNS = f"""
WITH keyed(seq, key) AS (
    SELECT seq, idempotency_key FROM message
    WHERE conversation_id = %(conversation)s AND seq < %(before)s
      AND idempotency_key IS NOT NULL AND {_KEY_ENDS_WITH}
    ORDER BY seq DESC LIMIT %(limit)s
), turn(seq, key, stop) AS (
    SELECT keyed.seq, keyed.key, coalesce(
        (SELECT next.seq FROM message AS next
         WHERE next.conversation_id = %(conversation)s AND next.seq > keyed.seq
           AND next.seq < keyed.seq + %(most)s AND next.role = 'user'
         ORDER BY next.seq LIMIT 1),
        keyed.seq + %(most)s)
    FROM keyed
)
SELECT turn.seq, turn.key, {", ".join(f"m.{c.strip()}" for c in _MESSAGE_COLUMNS.split(","))}
FROM turn JOIN message AS m
    ON m.conversation_id = %(conversation)s AND m.seq >= turn.seq AND m.seq < turn.stop
ORDER BY turn.seq DESC, m.seq
"""


def list_keyed_turns(
    connection: psycopg.Connection,
    conversation_id: str,
    before_seq: int | None,
    limit: int,
    key_suffix: str,
    max_messages: int,
) -> list[KeyedTurn]:
    rows = connection.execute(
        _KEYED_TURNS,
        {
            "conversation": conversation_id.encode(),
            "before": _NO_END if before_seq is None else before_seq,
            "limit": limit,
            "suffix": key_suffix.encode(),
            "most": max_messages,
        },
    ).fetchall()
    return [
        KeyedTurn(
            key=bytes(key).decode(),
            messages=tuple(_message(cast("_MessageRow", row[2:])) for row in group),
        )
        for (_, key), group in groupby(rows, key=lambda row: (row[0], row[1]))
    ]


def count_idempotency_keys(
    connection: psycopg.Connection, conversation_id: str, key_suffix: str
) -> int:
    row = connection.execute(
        "SELECT count(*) FROM message WHERE conversation_id = %(conversation)s"
        f" AND idempotency_key IS NOT NULL AND {_KEY_ENDS_WITH}",
        {"conversation": conversation_id.encode(), "suffix": key_suffix.encode()},
    ).fetchone()
    assert row is not None
    return cast("int", row[0])


# One index probe per conversation returned, however long the conversations are
# (a loose index scan: PostgreSQL has no skip scan of its own before version 18).
_NEXT_CONVERSATIONS = """
WITH RECURSIVE next(id) AS (
    SELECT (SELECT conversation_id FROM message WHERE conversation_id {first} %(after)s
            ORDER BY conversation_id LIMIT 1)
    UNION ALL
    SELECT (SELECT conversation_id FROM message WHERE conversation_id > next.id
            ORDER BY conversation_id LIMIT 1)
    FROM next WHERE next.id IS NOT NULL
)
SELECT id FROM next WHERE id IS NOT NULL LIMIT %(limit)s
"""
_FIRST_CONVERSATIONS = _NEXT_CONVERSATIONS.format(first=">=")
_CONVERSATIONS_AFTER = _NEXT_CONVERSATIONS.format(first=">")


def list_conversations(connection: psycopg.Connection, after: str | None, limit: int) -> list[str]:
    sql = _FIRST_CONVERSATIONS if after is None else _CONVERSATIONS_AFTER
    rows = connection.execute(sql, {"after": (after or "").encode(), "limit": limit}).fetchall()
    return [bytes(row[0]).decode() for row in rows]


# --- working memory -------------------------------------------------------------

_EntryRow = tuple[int, bytes, bytes, datetime]


def _memory_entry(row: _EntryRow) -> MemoryEntry:
    entry_id, conversation_id, text, created_at = row
    return MemoryEntry(
        id=entry_id,
        conversation_id=bytes(conversation_id).decode(),
        text=bytes(text).decode(),
        created_at=created_at,
    )


def append_memory(session: Session, conversation_id: str, text: str) -> MemoryEntry:
    row = session.connection.execute(
        "INSERT INTO memory_entry (conversation_id, text, created_at) VALUES (%s, %s, %s)"
        " RETURNING id",
        (conversation_id.encode(), text.encode(), session.now),
    ).fetchone()
    assert row is not None
    return MemoryEntry(
        id=row[0], conversation_id=conversation_id, text=text, created_at=session.now
    )


def archive_memory(session: Session, conversation_id: str, entry_ids: Sequence[int]) -> int:
    ids = sorted({i for i in entry_ids if -(2**63) <= i < 2**63})
    cursor = session.connection.execute(
        "UPDATE memory_entry SET archived = true"
        " WHERE id = ANY(%s::bigint[]) AND conversation_id = %s AND NOT archived",
        (ids, conversation_id.encode()),
    )
    return cursor.rowcount


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


def list_memory(connection: psycopg.Connection, conversation_id: str) -> list[MemoryEntry]:
    rows = connection.execute(
        "SELECT id, conversation_id, text, created_at FROM memory_entry"
        " WHERE conversation_id = %s AND NOT archived ORDER BY id",
        (conversation_id.encode(),),
    ).fetchall()
    return [_memory_entry(row) for row in cast("list[_EntryRow]", rows)]


def list_archived_memory(
    connection: psycopg.Connection, conversation_id: str, after_id: int, limit: int
) -> list[MemoryEntry]:
    rows = connection.execute(
        "SELECT id, conversation_id, text, created_at FROM memory_entry"
        " WHERE conversation_id = %s AND archived AND id > %s ORDER BY id LIMIT %s",
        (conversation_id.encode(), after_id, limit),
    ).fetchall()
    return [_memory_entry(row) for row in cast("list[_EntryRow]", rows)]


# --- reflections ----------------------------------------------------------------

_REFLECTION_COLUMNS = "id, conversation_id, text, created_at"


def _reflection(row: _EntryRow) -> Reflection:
    reflection_id, conversation_id, text, created_at = row
    return Reflection(
        id=reflection_id,
        conversation_id=bytes(conversation_id).decode(),
        text=bytes(text).decode(),
        created_at=created_at,
    )


def insert_reflection(session: Session, conversation_id: str, text: str) -> Reflection:
    row = session.connection.execute(
        "INSERT INTO reflection (conversation_id, text, created_at) VALUES (%s, %s, %s)"
        " RETURNING id",
        (conversation_id.encode(), text.encode(), session.now),
    ).fetchone()
    assert row is not None
    return Reflection(id=row[0], conversation_id=conversation_id, text=text, created_at=session.now)


def delete_reflections_before(session: Session, cutoff: datetime) -> int:
    cursor = session.connection.execute("DELETE FROM reflection WHERE created_at < %s", (cutoff,))
    return cursor.rowcount


def recent_reflections(connection: psycopg.Connection, limit: int) -> list[Reflection]:
    rows = connection.execute(
        f"SELECT {_REFLECTION_COLUMNS} FROM reflection ORDER BY created_at DESC, id DESC LIMIT %s",
        (limit,),
    ).fetchall()
    return [_reflection(row) for row in cast("list[_EntryRow]", rows)]


def count_reflections(connection: psycopg.Connection) -> int:
    row = connection.execute("SELECT count(*) FROM reflection").fetchone()
    assert row is not None
    return cast("int", row[0])


def reflections_of(connection: psycopg.Connection, conversation_id: str) -> list[Reflection]:
    rows = connection.execute(
        f"SELECT {_REFLECTION_COLUMNS} FROM reflection WHERE conversation_id = %s"
        " ORDER BY created_at, id",
        (conversation_id.encode(),),
    ).fetchall()
    return [_reflection(row) for row in cast("list[_EntryRow]", rows)]


# --- skills ---------------------------------------------------------------------


def upsert_skill(session: Session, skill: Skill) -> Skill:
    session.connection.execute(
        "INSERT INTO skill (name, description, body, updated_at) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (name) DO UPDATE SET description = excluded.description,"
        " body = excluded.body, updated_at = excluded.updated_at",
        (skill.name.encode(), skill.description.encode(), skill.body.encode(), session.now),
    )
    return attrs.evolve(skill, updated_at=session.now)


def remove_skill(session: Session, name: str) -> bool:
    cursor = session.connection.execute("DELETE FROM skill WHERE name = %s", (name.encode(),))
    return cursor.rowcount > 0


_SkillRow = tuple[bytes, bytes, bytes, datetime]


def _skill(row: _SkillRow) -> Skill:
    name, description, body, updated_at = row
    return Skill(
        name=bytes(name).decode(),
        description=bytes(description).decode(),
        body=bytes(body).decode(),
        updated_at=updated_at,
    )


def all_skills(connection: psycopg.Connection) -> list[Skill]:
    rows = connection.execute(
        "SELECT name, description, body, updated_at FROM skill ORDER BY name"
    ).fetchall()
    return [_skill(row) for row in cast("list[_SkillRow]", rows)]


def get_skill(connection: psycopg.Connection, name: str) -> Skill | None:
    row = connection.execute(
        "SELECT name, description, body, updated_at FROM skill WHERE name = %s", (name.encode(),)
    ).fetchone()
    return None if row is None else _skill(cast("_SkillRow", row))


def skill_catalog(connection: psycopg.Connection) -> list[SkillSummary]:
    rows = connection.execute("SELECT name, description FROM skill ORDER BY name").fetchall()
    return [
        SkillSummary(name=bytes(name).decode(), description=bytes(description).decode())
        for name, description in rows
    ]


def skill_exists(connection: psycopg.Connection, name: str) -> bool:
    row = connection.execute("SELECT 1 FROM skill WHERE name = %s", (name.encode(),)).fetchone()
    return row is not None
