"""``Queries``: the synchronous SQL functions a backend hands the shared stores.

Each SQL backend keeps its SQL in plain functions (``sqlite._queries``,
``postgres._queries`` and their ``_turn_queries``) and gathers them in one
namespace module that satisfies this protocol, so the store classes
(``_sql_stores``), their argument checks and their paging, exist once.

Writes take the writer's session (its connection inside the open transaction,
inside the request's own savepoint) and reads a reader's connection; nothing
here touches trio.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
    from agentik._messages import Message, TokenStats
    from agentik.storage._archive import ArchivedMessage, ArchiveRecord
    from agentik.storage._rows import MessageRow
    from agentik.storage._values import ConversationSnapshot, KeyedTurn, Summary, TurnRecord

C = TypeVar("C", contravariant=True)
S = TypeVar("S", contravariant=True)


class Queries(Protocol[C, S]):
    # --- messages (reads) ---
    def message_page(
        self, connection: C, conversation_id: str, after_seq: int, limit: int
    ) -> list[Message]: ...
    def conversation_snapshots(
        self, connection: C, requests: list[tuple[str, int, int]]
    ) -> list[ConversationSnapshot]: ...
    def token_stats(self, connection: C, conversation_id: str) -> TokenStats: ...
    def find_idempotency_key(self, connection: C, conversation_id: str, key: str) -> int | None: ...
    def list_conversations(self, connection: C, after: str | None, limit: int) -> list[str]: ...
    def list_idempotency_keys(
        self, connection: C, conversation_id: str, before_seq: int | None, limit: int
    ) -> list[tuple[int, str]]: ...
    def list_keyed_turns(
        self,
        connection: C,
        conversation_id: str,
        before_seq: int | None,
        limit: int,
        key_suffix: str,
        max_messages: int,
    ) -> list[KeyedTurn]: ...
    def count_idempotency_keys(
        self, connection: C, conversation_id: str, key_suffix: str
    ) -> int: ...

    # --- the turn ledger ---
    def insert_awaiting(
        self, session: S, insert: MessageRow, call_ids: Sequence[str]
    ) -> Message: ...
    def decide(
        self,
        session: S,
        conversation_id: str,
        seq: int,
        call_id: str,
        approve: bool,
        reason: str,
        result: MessageRow | None,
    ) -> Message | None: ...
    def insert_turn_failure(
        self, session: S, conversation_id: str, seq: int, code: str
    ) -> None: ...
    def turn_record(self, connection: C, conversation_id: str, seq: int) -> TurnRecord: ...
    def interrupted_conversations(
        self, connection: C, after: str | None, limit: int
    ) -> list[str]: ...

    # --- summaries ---
    def insert_summary(
        self, session: S, conversation_id: str, through_seq: int, text: str
    ) -> Summary: ...
    def latest_summary(self, connection: C, conversation_id: str) -> Summary | None: ...
    def list_summaries(
        self, connection: C, conversation_id: str, after_seq: int, limit: int
    ) -> list[Summary]: ...

    # --- working memory ---
    def append_memory(self, session: S, conversation_id: str, text: str) -> MemoryEntry: ...
    def archive_memory(self, session: S, conversation_id: str, entry_ids: Sequence[int]) -> int: ...
    def compact_memory(
        self, session: S, conversation_id: str, entry_ids: Sequence[int], summary: str
    ) -> MemoryEntry: ...
    def list_memory(self, connection: C, conversation_id: str) -> list[MemoryEntry]: ...
    def list_archived_memory(
        self, connection: C, conversation_id: str, after_id: int, limit: int
    ) -> list[MemoryEntry]: ...

    # --- reflections ---
    def insert_reflection(self, session: S, conversation_id: str, text: str) -> Reflection: ...
    def delete_reflections_before(self, session: S, cutoff: datetime) -> int: ...
    def recent_reflections(self, connection: C, limit: int) -> list[Reflection]: ...
    def count_reflections(self, connection: C) -> int: ...
    def reflections_of(self, connection: C, conversation_id: str) -> list[Reflection]: ...

    # --- skills ---
    def upsert_skill(self, session: S, skill: Skill) -> Skill: ...
    def remove_skill(self, session: S, name: str) -> bool: ...
    def all_skills(self, connection: C) -> list[Skill]: ...
    def get_skill(self, connection: C, name: str) -> Skill | None: ...
    def skill_catalog(self, connection: C) -> list[SkillSummary]: ...
    def skill_exists(self, connection: C, name: str) -> bool: ...

    # --- secrets (``SecretStore``: a table of their own, no conversation id) ---
    def get_secret(self, connection: C, name: str) -> str | None: ...
    def put_secret(self, session: S, name: str, value: str) -> None: ...
    def delete_secret(self, session: S, name: str) -> bool: ...


class LifecycleQueries(Protocol[C, S]):
    """A conversation as a whole (``ConversationDeleter``,
    ``ConversationArchiver``): ``sqlite._lifecycle_queries`` and
    ``postgres._lifecycle_queries``, the same five functions over each
    backend's tables (one ``DELETE`` per table keyed by conversation, in the
    request's transaction)."""

    def delete_conversation(
        self, session: S, conversation_id: str, idle_before_us: int | None
    ) -> bool: ...
    def idle_conversations(
        self, connection: C, before_us: int, after: str | None, limit: int
    ) -> list[str]: ...
    def archived_messages(
        self, connection: C, conversation_id: str, after_seq: int, limit: int
    ) -> list[ArchivedMessage]: ...
    def archived_rest(self, connection: C, conversation_id: str) -> list[ArchiveRecord]: ...
    def import_conversation(
        self, session: S, conversation_id: str, records: Sequence[ArchiveRecord]
    ) -> int: ...
