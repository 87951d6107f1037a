"""The turn ledger's SQL (approvals and failed turns), the summaries', a
conversation's snapshot and the interrupted turns, shared as ``_sql_messages``.

A waiting call's row is written in the transaction of the message that makes
the call, and a denied call's tool result in the transaction of its
decision, so no crash can separate them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, cast

from agentik._errors import StoreError
from agentik._messages import Message
from agentik.storage._dialect import SqlSession
from agentik.storage._rows import MessageRow
from agentik.storage._sql_messages import NO_END, WALK_AFTER, WALK_ALL, MessageQueries
from agentik.storage._values import Approval, ConversationSnapshot, Summary, TurnRecord

C = TypeVar("C")

# Approvals of the calls made after the turn's user message up to the next
# one, and the turn's failure: one statement, so one snapshot.
_TURN_RECORD = """
WITH stop(at) AS (
    SELECT coalesce(min(seq), :no_end) FROM message
    WHERE conversation_id = :c AND seq > :seq AND role = 'user'
)
SELECT 'a', a.seq, a.call_id, a.approved, a.reason, a.ordinal
FROM approval AS a, stop
WHERE a.conversation_id = :c AND a.seq > :seq AND a.seq < stop.at
UNION ALL
SELECT 'f', f.seq, f.code, NULL, NULL, NULL FROM turn_failure AS f
WHERE f.conversation_id = :c AND f.seq = :seq
UNION ALL
SELECT 'o', o.seq, NULL, NULL, NULL, NULL FROM turn_output AS o
WHERE o.conversation_id = :c AND o.seq = :seq
ORDER BY 1, 2, 6
"""

# As ``list_conversations`` walks them: one index probe per conversation and
# one for its newest message; for a conversation whose last turn did not end
# with an answer, its last user message (a short walk back), and one probe
# each into turn_failure and approval. Reads follow the conversations walked,
# not their length.
_INTERRUPTED = """
, unanswered(id, start) AS (
    SELECT next.id, (SELECT seq FROM message WHERE conversation_id = next.id AND role = 'user'
                     ORDER BY seq DESC LIMIT 1)
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
LIMIT :limit
"""
SUMMARY_COLUMNS = "through_seq, text, {created}"


class TurnQueries(MessageQueries[C]):
    """The turn ledger, summaries, snapshots and interrupted turns."""

    # --- the turn ledger ---

    def insert_awaiting(
        self, session: SqlSession[C], insert: MessageRow, call_ids: Sequence[str]
    ) -> Message:
        """Insert the message, then one waiting approval per call id."""
        calls = {call.id for call in insert.message.tool_calls}
        unknown = [c for c in call_ids if c not in calls]
        if unknown:
            raise StoreError(f"calls {list(unknown)!r} are not tool calls of the message")
        if len(set(call_ids)) != len(call_ids):
            raise StoreError(f"call ids must be unique, got {list(call_ids)!r}")
        stored = session.insert_message(insert)
        d = self.d
        conversation = d.text(insert.conversation_id)
        d.many(
            session.connection,
            d.sql(
                "INSERT INTO approval (conversation_id, seq, call_id, ordinal, {created})"
                " VALUES (?, ?, ?, ?, ?)"
            ),
            [
                (conversation, stored.seq, d.text(call_id), ordinal, session.stamp)
                for ordinal, call_id in enumerate(call_ids)
            ],
        )
        return stored

    def decide(
        self,
        session: SqlSession[C],
        conversation_id: str,
        seq: int,
        call_id: str,
        approve: bool,
        reason: str,
        result: MessageRow | None,
    ) -> Message | None:
        """Decide a waiting call; insert ``result`` with it."""
        d = self.d
        changed = d.changed(
            session.connection,
            d.sql(
                "UPDATE approval SET approved = ?, reason = ?, {decided} = ?"
                " WHERE conversation_id = ? AND seq = ? AND call_id = ? AND approved IS NULL"
            ),
            (
                bool(approve),
                d.text(reason),
                session.stamp,
                d.text(conversation_id),
                seq,
                d.text(call_id),
            ),
        )
        if changed != 1:
            raise StoreError(
                f"call {call_id!r} of message {seq} in conversation {conversation_id!r}"
                " is not waiting for a decision"
            )
        return None if result is None else session.insert_message(result)

    def insert_turn_failure(
        self, session: SqlSession[C], conversation_id: str, seq: int, code: str
    ) -> None:
        """Record (or replace) how the turn whose user message is ``seq`` failed.
        Fenced like an append: a node that lost the conversation must not
        mark a turn failed that its new owner resumes."""
        session.seqs.fence(conversation_id)
        d = self.d
        changed = d.changed(
            session.connection,
            d.sql(
                "INSERT INTO turn_failure (conversation_id, seq, code, {created})"
                " SELECT conversation_id, seq, ?, ? FROM message"
                " WHERE conversation_id = ? AND seq = ?"
                " ON CONFLICT (conversation_id, seq) DO UPDATE SET code = excluded.code,"
                " {created} = excluded.{created}"
            ),
            (d.text(code), session.stamp, d.text(conversation_id), seq),
        )
        if changed != 1:
            raise StoreError(f"conversation {conversation_id!r} has no seq {seq}")

    def insert_turn_output(self, session: SqlSession[C], conversation_id: str, seq: int) -> None:
        """Record that the turn whose user message is ``seq`` answered with a typed output."""
        d = self.d
        changed = d.changed(
            session.connection,
            d.sql(
                "INSERT INTO turn_output (conversation_id, seq, {created})"
                " SELECT conversation_id, seq, ? FROM message"
                " WHERE conversation_id = ? AND seq = ?"
                " ON CONFLICT (conversation_id, seq) DO NOTHING"
            ),
            (session.stamp, d.text(conversation_id), seq),
        )
        if changed != 1:
            exists = d.rows(
                session.connection,
                d.sql("SELECT 1 FROM message WHERE conversation_id = ? AND seq = ?"),
                (d.text(conversation_id), seq),
            )
            if not exists:
                raise StoreError(f"conversation {conversation_id!r} has no seq {seq}")

    def turn_record(self, connection: C, conversation_id: str, seq: int) -> TurnRecord:
        """Approvals of calls made after ``seq`` up to the next user message, and
        the failure of the turn at ``seq``."""
        d = self.d
        rows = d.rows(
            connection,
            d.sql(_TURN_RECORD),
            {"c": d.text(conversation_id), "seq": seq, "no_end": NO_END},
        )
        approvals = []
        failure = None
        output = False
        for kind, at, name, approved, reason, _ in rows:
            if kind == "f":
                failure = d.text_of(name)
            elif kind == "o":
                output = True
            else:
                approvals.append(
                    Approval(
                        seq=at,
                        call_id=d.text_of(name),
                        approved=None if approved is None else bool(approved),
                        reason="" if reason is None else d.text_of(reason),
                    )
                )
        return TurnRecord(approvals=tuple(approvals), failure=failure, output=output)

    def interrupted_conversations(self, connection: C, after: str | None, limit: int) -> list[str]:
        """``FullMessageStore.interrupted_conversations``."""
        d = self.d
        walk, params = (WALK_ALL, {}) if after is None else (WALK_AFTER, {"after": d.text(after)})
        rows = d.rows(connection, d.sql(walk + _INTERRUPTED), {**params, "limit": limit})
        return [d.text_of(row[0]) for row in rows]

    # --- summaries ---

    def insert_summary(
        self, session: SqlSession[C], conversation_id: str, through_seq: int, text: str
    ) -> Summary:
        """Store a summary past the latest one, covering an existing message.

        Not an ownership-checked write (only messages are): a summary stands
        for history that never changes once written, so a late one from a node
        that lost the conversation is as true as the new owner's, and the
        chain rule (each covers more than the latest) keeps the two from
        going backwards."""
        d = self.d
        connection = session.connection
        conversation = d.text(conversation_id)
        row = d.row(
            connection,
            d.sql(
                "SELECT (SELECT max(seq) FROM message WHERE conversation_id = :c),"
                " (SELECT max(through_seq) FROM summary WHERE conversation_id = :c)"
            ),
            {"c": conversation},
        )
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
        d.changed(
            connection,
            d.sql(
                "INSERT INTO summary (conversation_id, through_seq, text, {created})"
                " VALUES (?, ?, ?, ?)"
            ),
            (conversation, through_seq, d.text(text), session.stamp),
        )
        return Summary(through_seq=through_seq, text=text, created_at=session.now)

    def _summary(self, row: Sequence[object]) -> Summary:
        through_seq, text, created = row
        return Summary(
            through_seq=cast("int", through_seq),
            text=self.d.text_of(text),
            created_at=self.d.time_of(created),
        )

    def latest_summary(self, connection: C, conversation_id: str) -> Summary | None:
        d = self.d
        row = d.row(
            connection,
            d.sql(
                f"SELECT {SUMMARY_COLUMNS} FROM summary WHERE conversation_id = ?"
                " ORDER BY through_seq DESC LIMIT 1"
            ),
            (d.text(conversation_id),),
        )
        return None if row is None else self._summary(row)

    def list_summaries(
        self, connection: C, conversation_id: str, after_seq: int, limit: int
    ) -> list[Summary]:
        d = self.d
        rows = d.rows(
            connection,
            d.sql(
                f"SELECT {SUMMARY_COLUMNS} FROM summary"
                " WHERE conversation_id = ? AND through_seq > ? ORDER BY through_seq LIMIT ?"
            ),
            (d.text(conversation_id), after_seq, limit),
        )
        return [self._summary(row) for row in rows]

    # --- a conversation's snapshot ---

    def conversation_snapshot(
        self, connection: C, conversation_id: str, limit: int, after_seq: int
    ) -> ConversationSnapshot:
        """A page of history after ``after_seq``, the active notes and the latest
        summary, from one snapshot (one read transaction)."""
        with self.d.snapshot(connection):
            messages = self.message_page(connection, conversation_id, after_seq, limit)
            memory = self.list_memory(connection, conversation_id)
            summary = self.latest_summary(connection, conversation_id)
        return ConversationSnapshot(tuple(messages), tuple(memory), summary)

    def conversation_snapshots(
        self, connection: C, requests: list[tuple[str, int, int]]
    ) -> list[ConversationSnapshot]:
        """``conversation_snapshot`` of each (conversation id, limit, after seq),
        one after another (SQLite reads a burst in one statement instead)."""
        return [
            self.conversation_snapshot(connection, conversation_id, limit, after_seq)
            for conversation_id, limit, after_seq in requests
        ]
