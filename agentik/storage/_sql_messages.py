"""The SQL both backends share for messages (reads), notes, reflections,
skills and secrets, written once over a ``Dialect`` (``_dialect``).

Plain synchronous methods: writes take the writer's session (its connection
inside the open transaction, inside the request's own savepoint: raising rolls
back that request alone), reads a reader's connection; every statement a read
starts is finished before it returns. ``_sql_turns`` and ``_sql_lifecycle``
extend the class; each backend's ``_queries`` instantiates the last of them
with its dialect, adding its fast paths.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from itertools import groupby
from typing import Generic, TypeVar, cast

import attrs
from cattrs.errors import BaseValidationError

from agentik._errors import StoreError
from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
from agentik._messages import Message, Role, TokenStats, TokenUsage, ToolCall
from agentik._serde import converter
from agentik.storage._dialect import Dialect, Row, SqlSession
from agentik.storage._parts_column import NO_BLOBS, blob_keys, parts_of
from agentik.storage._values import KeyedTurn

C = TypeVar("C")
E = TypeVar("E", MemoryEntry, Reflection)

NO_END = 2**62
"""A seq past any conversation's last (a bound for ``seq < ?``)."""

_TOOL_CALLS = tuple[ToolCall, ...]
_DAMAGE = (ValueError, TypeError, KeyError, AttributeError, OverflowError, BaseValidationError)
"""What decoding a row that no code of ours wrote raises (a damaged page, a
hand edit): a text that is no role, JSON of another shape, a time out of range."""


def _damaged(seq: object, error: Exception) -> StoreError:
    """The storage's error for a message row that cannot be read back, which
    every caller handles (the CLI's one line, the server's storage failure),
    instead of whatever the decoder raised."""
    return StoreError(f"stored message #{seq} is damaged: {type(error).__name__}: {error}")


MESSAGE_COLUMNS = (
    "seq, role, content, tool_calls, tool_call_id, prompt_tokens, completion_tokens, {created},"
    " parts"
)
_PARTS = 8
"""The place of ``parts`` in a ``MESSAGE_COLUMNS`` row."""

# The keyed rows of one page (the index on (conversation_id, seq), walked
# newest first), then for each the seq of the next user message (the same
# index, walked forward from it: one turn's rows), then the turn's rows
# between the two. Rows read follow the page's turns, not the conversation's length.
_KEYED_TURNS = f"""
WITH keyed(seq, key) AS (
    SELECT seq, idempotency_key FROM message
    WHERE conversation_id = :conversation AND seq < :before
      AND idempotency_key IS NOT NULL AND {{key_ends_with}}
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
SELECT turn.seq, turn.key, {", ".join(f"m.{c.strip()}" for c in MESSAGE_COLUMNS.split(","))}
FROM turn JOIN message AS m
    ON m.conversation_id = :conversation AND m.seq >= turn.seq AND m.seq < turn.stop
ORDER BY turn.seq DESC, m.seq
"""

# One index probe per conversation returned, however long the conversations
# are: a loose index scan (PostgreSQL has no skip scan of its own before
# version 18, nor ``min`` of a bytea).
WALK = """
WITH RECURSIVE next(id) AS (
    SELECT (SELECT conversation_id FROM message {first} ORDER BY conversation_id LIMIT 1)
    UNION ALL
    SELECT (SELECT conversation_id FROM message WHERE conversation_id > next.id
            ORDER BY conversation_id LIMIT 1)
    FROM next WHERE next.id IS NOT NULL
)"""
WALK_ALL = WALK.format(first="")
WALK_AFTER = WALK.format(first="WHERE conversation_id > :after")

NOTE_COLUMNS = "id, conversation_id, text, {created}"
_SKILL_COLUMNS = "name, description, body, {updated}"


class MessageQueries(Generic[C]):
    """Messages (reads), notes, reflections, skills and secrets over ``dialect``."""

    def __init__(self, dialect: Dialect[C]) -> None:
        self.d = dialect

    # --- rows ---

    def messages_of(self, connection: C, rows: Sequence[Row | Sequence[object]]) -> list[Message]:
        """``MESSAGE_COLUMNS`` rows, with the blobs their parts name."""
        blobs = self.blobs_of(connection, rows)
        return [self.message_of(row, blobs) for row in rows]

    def message_of(
        self, row: Row | Sequence[object], blobs: Mapping[str, bytes] = NO_BLOBS
    ) -> Message:
        """A ``MESSAGE_COLUMNS`` row; ``blobs`` holds the data its parts name."""
        try:
            return self._message(row, blobs)
        except _DAMAGE as error:
            # A row no code of ours wrote (a damaged page, a hand edit): the
            # storage's error, which every caller handles, not the decoder's.
            raise _damaged(row[0], error) from error

    def _message(self, row: Row | Sequence[object], blobs: Mapping[str, bytes]) -> Message:
        seq, role, content, tool_calls, tool_call_id, prompt, completion, created, parts = row
        d = self.d
        return Message(
            role=Role(role),
            content=d.text_of(content),
            tool_calls=()
            if tool_calls is None
            else converter.structure(json.loads(cast("str", tool_calls)), _TOOL_CALLS),
            tool_call_id=None if tool_call_id is None else d.text_of(tool_call_id),
            usage=None
            if prompt is None or completion is None
            else TokenUsage(
                prompt_tokens=cast("int", prompt), completion_tokens=cast("int", completion)
            ),
            seq=cast("int", seq),
            created_at=d.time_of(created),
            parts=() if parts is None else parts_of(cast("str", parts), blobs),
        )

    # --- blobs: a part's inline data, stored once by hash ---

    def blobs_of(
        self, connection: C, rows: Iterable[Row | Sequence[object]]
    ) -> Mapping[str, bytes]:
        """The data of every blob the parts of ``rows`` name; no statement when
        none has parts. Read after the rows: a blob found gone means its
        conversation was deleted meanwhile (``parts_of`` says so)."""
        keys: set[str] = set()
        for row in rows:
            parts = row[_PARTS]
            if parts is not None:
                try:
                    keys.update(blob_keys(cast("str", parts)))
                except _DAMAGE as error:
                    raise _damaged(row[0], error) from error
        if not keys:
            return NO_BLOBS
        d = self.d
        found: dict[str, bytes] = {}
        for key in sorted(keys):
            blob = d.row(connection, d.sql("SELECT data FROM blob WHERE hash = ?"), (key,))
            if blob is not None:
                found[key] = bytes(cast("bytes", blob[0]))
        return found

    def insert_blobs(self, connection: C, conversation_id: str, blobs: Mapping[str, bytes]) -> None:
        """Store each blob once (a hash already stored is left as it is), and
        record that the conversation uses it."""
        d = self.d
        key = d.text(conversation_id)
        for hash_, data in blobs.items():
            d.changed(
                connection,
                d.sql("INSERT INTO blob (hash, data) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING"),
                (hash_, data),
            )
            d.changed(
                connection,
                d.sql(
                    "INSERT INTO blob_use (conversation_id, hash) VALUES (?, ?)"
                    " ON CONFLICT (conversation_id, hash) DO NOTHING"
                ),
                (key, hash_),
            )

    def count_blobs(self, connection: C) -> int:
        return self._count(connection, "SELECT count(*) FROM blob", {})

    def _entry(self, kind: type[E], row: Row) -> E:
        """A note or a reflection (``NOTE_COLUMNS``: the same four)."""
        entry_id, conversation_id, text, created = row
        d = self.d
        return kind(
            id=entry_id,
            conversation_id=d.text_of(conversation_id),
            text=d.text_of(text),
            created_at=d.time_of(created),
        )

    def _skill(self, row: Row) -> Skill:
        name, description, body, updated = row
        d = self.d
        return Skill(
            name=d.text_of(name),
            description=d.text_of(description),
            body=d.text_of(body),
            updated_at=d.time_of(updated),
        )

    def _count(self, connection: C, template: str, params: dict[str, object]) -> int:
        found = self.d.row(connection, self.d.sql(template), params)
        assert found is not None
        return cast("int", found[0])

    # --- messages (reads) ---

    def message_page(
        self, connection: C, conversation_id: str, after_seq: int, limit: int
    ) -> list[Message]:
        d = self.d
        rows = d.rows(
            connection,
            d.sql(
                f"SELECT {MESSAGE_COLUMNS} FROM message"
                " WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?"
            ),
            (d.text(conversation_id), after_seq, limit),
        )
        return self.messages_of(connection, rows)

    def token_stats(self, connection: C, conversation_id: str) -> TokenStats:
        d = self.d
        row = d.row(
            connection,
            d.sql(
                "SELECT CAST(coalesce(sum(prompt_tokens), 0) AS BIGINT),"
                " CAST(coalesce(sum(completion_tokens), 0) AS BIGINT), count(prompt_tokens)"
                " FROM message WHERE conversation_id = ?"
            ),
            (d.text(conversation_id),),
        )
        assert row is not None
        prompt, completion, counted = row
        return TokenStats(prompt_tokens=prompt, completion_tokens=completion, messages=counted)

    def find_idempotency_key(self, connection: C, conversation_id: str, key: str) -> int | None:
        d = self.d
        row = d.row(
            connection,
            d.sql("SELECT seq FROM message WHERE conversation_id = ? AND idempotency_key = ?"),
            (d.text(conversation_id), d.text(key)),
        )
        return None if row is None else cast("int", row[0])

    def list_idempotency_keys(
        self, connection: C, conversation_id: str, before_seq: int | None, limit: int
    ) -> list[tuple[int, str]]:
        """Walks the conversation's rows newest first (its seq index)."""
        d = self.d
        rows = d.rows(
            connection,
            d.sql(
                "SELECT seq, idempotency_key FROM message WHERE conversation_id = ? AND seq < ?"
                " AND idempotency_key IS NOT NULL ORDER BY seq DESC LIMIT ?"
            ),
            (d.text(conversation_id), NO_END if before_seq is None else before_seq, limit),
        )
        return [(seq, d.text_of(key)) for seq, key in rows]

    def list_keyed_turns(
        self,
        connection: C,
        conversation_id: str,
        before_seq: int | None,
        limit: int,
        key_suffix: str,
        max_messages: int,
    ) -> list[KeyedTurn]:
        d = self.d
        rows = d.rows(
            connection,
            d.sql(_KEYED_TURNS),
            {
                "conversation": d.text(conversation_id),
                "before": NO_END if before_seq is None else before_seq,
                "limit": limit,
                "suffix": d.text(key_suffix),
                "most": max_messages,
            },
        )
        blobs = self.blobs_of(connection, (row[2:] for row in rows))
        return [
            KeyedTurn(
                key=d.text_of(key),
                messages=tuple(self.message_of(row[2:], blobs) for row in group),
            )
            for (_, key), group in groupby(rows, key=lambda row: (row[0], row[1]))
        ]

    def count_idempotency_keys(self, connection: C, conversation_id: str, key_suffix: str) -> int:
        """An index-only count (the index on keys): no row is read."""
        d = self.d
        return self._count(
            connection,
            "SELECT count(*) FROM message WHERE conversation_id = :conversation"
            " AND idempotency_key IS NOT NULL AND {key_ends_with}",
            {"conversation": d.text(conversation_id), "suffix": d.text(key_suffix)},
        )

    def list_conversations(self, connection: C, after: str | None, limit: int) -> list[str]:
        d = self.d
        walk, params = (WALK_ALL, {}) if after is None else (WALK_AFTER, {"after": d.text(after)})
        rows = d.rows(
            connection,
            d.sql(f"{walk} SELECT id FROM next WHERE id IS NOT NULL LIMIT :limit"),
            {**params, "limit": limit},
        )
        return [d.text_of(row[0]) for row in rows]

    # --- working memory ---

    def append_memory(self, session: SqlSession[C], conversation_id: str, text: str) -> MemoryEntry:
        d = self.d
        row = d.row(
            session.connection,
            d.sql(
                "INSERT INTO memory_entry (conversation_id, text, {created}) VALUES (?, ?, ?)"
                " RETURNING id"
            ),
            (d.text(conversation_id), d.text(text), session.stamp),
        )
        assert row is not None
        return MemoryEntry(
            id=row[0], conversation_id=conversation_id, text=text, created_at=session.now
        )

    def archive_memory(
        self, session: SqlSession[C], conversation_id: str, entry_ids: Sequence[int]
    ) -> int:
        d = self.d
        return d.changed(
            session.connection,
            d.sql(
                "UPDATE memory_entry SET {set_archived}"
                " WHERE {ids_in} AND conversation_id = ? AND {active}"
            ),
            (d.ids(entry_ids), d.text(conversation_id)),
        )

    def compact_memory(
        self, session: SqlSession[C], conversation_id: str, entry_ids: Sequence[int], summary: str
    ) -> MemoryEntry:
        wanted = set(entry_ids)
        if self.archive_memory(session, conversation_id, list(wanted)) != len(wanted):
            raise StoreError(
                f"memory entries {sorted(wanted)} are not all active entries of conversation"
                f" {conversation_id!r}; nothing was compacted"
            )
        return self.append_memory(session, conversation_id, summary)

    def list_memory(self, connection: C, conversation_id: str) -> list[MemoryEntry]:
        d = self.d
        rows = d.rows(
            connection,
            d.sql(
                f"SELECT {NOTE_COLUMNS} FROM memory_entry"
                " WHERE conversation_id = ? AND {active} ORDER BY id"
            ),
            (d.text(conversation_id),),
        )
        return [self._entry(MemoryEntry, row) for row in rows]

    def list_archived_memory(
        self, connection: C, conversation_id: str, after_id: int, limit: int
    ) -> list[MemoryEntry]:
        d = self.d
        rows = d.rows(
            connection,
            d.sql(
                f"SELECT {NOTE_COLUMNS} FROM memory_entry"
                " WHERE conversation_id = ? AND {archived} AND id > ? ORDER BY id LIMIT ?"
            ),
            (d.text(conversation_id), after_id, limit),
        )
        return [self._entry(MemoryEntry, row) for row in rows]

    # --- reflections ---

    def insert_reflection(
        self, session: SqlSession[C], conversation_id: str, text: str
    ) -> Reflection:
        d = self.d
        row = d.row(
            session.connection,
            d.sql(
                "INSERT INTO reflection (conversation_id, text, {created}) VALUES (?, ?, ?)"
                " RETURNING id"
            ),
            (d.text(conversation_id), d.text(text), session.stamp),
        )
        assert row is not None
        return Reflection(
            id=row[0], conversation_id=conversation_id, text=text, created_at=session.now
        )

    def delete_reflections_before(self, session: SqlSession[C], cutoff: datetime) -> int:
        d = self.d
        return d.changed(
            session.connection,
            d.sql("DELETE FROM reflection WHERE {created} < ?"),
            (d.time(cutoff),),
        )

    def recent_reflections(self, connection: C, limit: int) -> list[Reflection]:
        d = self.d
        rows = d.rows(
            connection,
            d.sql(
                f"SELECT {NOTE_COLUMNS} FROM reflection ORDER BY {{created}} DESC, id DESC LIMIT ?"
            ),
            (limit,),
        )
        return [self._entry(Reflection, row) for row in rows]

    def count_reflections(self, connection: C) -> int:
        return self._count(connection, "SELECT count(*) FROM reflection", {})

    def reflections_of(self, connection: C, conversation_id: str) -> list[Reflection]:
        d = self.d
        rows = d.rows(
            connection,
            d.sql(
                f"SELECT {NOTE_COLUMNS} FROM reflection WHERE conversation_id = ?"
                " ORDER BY {created}, id"
            ),
            (d.text(conversation_id),),
        )
        return [self._entry(Reflection, row) for row in rows]

    # --- skills ---

    def upsert_skill(self, session: SqlSession[C], skill: Skill) -> Skill:
        d = self.d
        d.changed(
            session.connection,
            d.sql(
                "INSERT INTO skill (name, description, body, {updated}) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET description = excluded.description,"
                " body = excluded.body, {updated} = excluded.{updated}"
            ),
            (d.text(skill.name), d.text(skill.description), d.text(skill.body), session.stamp),
        )
        return attrs.evolve(skill, updated_at=session.now)

    def remove_skill(self, session: SqlSession[C], name: str) -> bool:
        d = self.d
        return (
            d.changed(
                session.connection, d.sql("DELETE FROM skill WHERE name = ?"), (d.text(name),)
            )
            > 0
        )

    def all_skills(self, connection: C) -> list[Skill]:
        d = self.d
        rows = d.rows(connection, d.sql(f"SELECT {_SKILL_COLUMNS} FROM skill ORDER BY name"))
        return [self._skill(row) for row in rows]

    def get_skill(self, connection: C, name: str) -> Skill | None:
        d = self.d
        row = d.row(
            connection, d.sql(f"SELECT {_SKILL_COLUMNS} FROM skill WHERE name = ?"), (d.text(name),)
        )
        return None if row is None else self._skill(row)

    def skill_catalog(self, connection: C) -> list[SkillSummary]:
        d = self.d
        rows = d.rows(connection, d.sql("SELECT name, description FROM skill ORDER BY name"))
        return [
            SkillSummary(name=d.text_of(name), description=d.text_of(description))
            for name, description in rows
        ]

    def skill_exists(self, connection: C, name: str) -> bool:
        d = self.d
        return (
            d.row(connection, d.sql("SELECT 1 FROM skill WHERE name = ?"), (d.text(name),))
            is not None
        )

    # --- secrets (``SecretStore``: a table of their own, no conversation id) ---

    def get_secret(self, connection: C, name: str) -> str | None:
        d = self.d
        row = d.row(connection, d.sql("SELECT value FROM secret WHERE name = ?"), (d.text(name),))
        return None if row is None else d.text_of(row[0])

    def put_secret(self, session: SqlSession[C], name: str, value: str) -> None:
        d = self.d
        d.changed(
            session.connection,
            d.sql(
                "INSERT INTO secret (name, value, {updated}) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET value = excluded.value,"
                " {updated} = excluded.{updated}"
            ),
            (d.text(name), d.text(value), session.stamp),
        )

    def delete_secret(self, session: SqlSession[C], name: str) -> bool:
        d = self.d
        return (
            d.changed(
                session.connection, d.sql("DELETE FROM secret WHERE name = ?"), (d.text(name),)
            )
            > 0
        )
