"""The store protocols and the bundles that carry them.

Two levels, told apart by the type checker, never probed at run time:

- the **seed**: ``MessageStore``, ``WorkingMemoryStore``, ``ReflectionStore``,
  ``SkillStore`` in a ``StorageBundle`` (DESIGN.md's contract). A user's
  backend may implement only these;
- the **full** protocol: ``FullMessageStore`` and ``FullWorkingMemoryStore``
  (the seed plus everything agentik uses: approvals, summaries, keyed turns,
  interrupted turns, delete, export and import) in a ``Storage``, the
  ``StorageBundle`` subclass that the three backends (in-memory, SQLite,
  PostgreSQL) yield. mypy checks that each backend's stores satisfy it where
  the backend builds its ``Storage``.

Where a bundle enters the agent it becomes a ``Storage`` (``full_storage``,
``_degraded``): a ``Storage`` as it is; a plain ``StorageBundle`` of seed
stores with stand-ins for the rest, whose degraded behaviour docs/storage.md
lists. Nothing past that point asks a store what it can do.

Beside the stores: ``SecretStore`` here, and ``ConversationOwnership``
(which node runs a conversation) in ``_ownership``.

Invariants every backend keeps (checked by ``agentik.testing``):
- every method is async, and ``get_messages`` is an async iterator, paged
  underneath so a long conversation is never loaded whole;
- ``seq`` is 1, 2, 3 … per conversation, gapless, in acceptance order;
- a write that returned (or whose ``Pending`` resolved) is durable for the
  backend and visible to every read that starts afterwards;
- a failing write changes nothing and raises a ``StoreError``;
- timestamps are aware UTC datetimes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, final, runtime_checkable

import attrs

from agentik.storage._ownership import ConversationOwnership

if TYPE_CHECKING:
    from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
    from agentik._messages import Message, TokenStats
    from agentik._sync import Pending
    from agentik.storage._archive import ArchiveRecord
    from agentik.storage._values import (
        ConversationSnapshot,
        KeyedTurn,
        Summary,
        TurnRecord,
    )

DEFAULT_PAGE_SIZE = 500


# --- the seed ------------------------------------------------------------------


class MessageStore(Protocol):
    """The history of every conversation."""

    async def append(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Message:
        """Store ``message`` as the conversation's next one; return it with ``seq``
        and ``created_at`` filled. With ``idempotency_key``, a key already used in
        this conversation raises ``DuplicateKeyError`` and stores nothing."""
        ...

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        """Like ``append``, but return as soon as the write is accepted (waiting
        only for room in the queue). Writes submitted by one task are applied in
        submission order."""
        ...

    def get_messages(
        self, conversation_id: str, *, after_seq: int = 0, page_size: int = DEFAULT_PAGE_SIZE
    ) -> AsyncIterator[Message]:
        """The conversation's messages with ``seq > after_seq``, oldest first."""
        ...

    async def token_stats(self, conversation_id: str) -> TokenStats:
        """Token usage summed over the conversation's messages."""
        ...

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        """The ``seq`` of the message stored with ``key``, or None."""
        ...

    async def list_conversations(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        """Ids of conversations that have messages, sorted, those ``> after``."""
        ...


class WorkingMemoryStore(Protocol):
    """Notes a conversation keeps while it works."""

    async def append(self, conversation_id: str, text: str) -> MemoryEntry: ...

    async def list(self, conversation_id: str) -> list[MemoryEntry]:
        """Active (not archived) entries, oldest first."""
        ...

    async def compact(
        self, conversation_id: str, entry_ids: Sequence[int], summary: str
    ) -> MemoryEntry:
        """Archive ``entry_ids`` and add ``summary`` as one new entry, atomically.
        Ids that are not active entries of this conversation raise ``StoreError``."""
        ...

    async def archive(self, conversation_id: str, entry_ids: Sequence[int]) -> int:
        """Archive the given active entries of this conversation; return how many."""
        ...


class ReflectionStore(Protocol):
    """Lessons drawn after turns, shared by all conversations."""

    async def insert(self, conversation_id: str, text: str) -> Reflection: ...

    async def list_recent(self, limit: int) -> list[Reflection]:
        """Newest first; ties in insertion order, newest first."""
        ...

    async def count(self) -> int: ...

    async def list_for_conversation(self, conversation_id: str) -> list[Reflection]:
        """Oldest first."""
        ...

    async def delete_older_than(self, cutoff: datetime) -> int:
        """Delete reflections created strictly before ``cutoff``; return how many."""
        ...


class SkillStore(Protocol):
    """Named procedures the model saves and loads on demand."""

    async def catalog(self) -> list[SkillSummary]:
        """Name and description of every skill, sorted by name."""
        ...

    async def upsert(self, skill: Skill) -> Skill:
        """Insert or replace by name; return it with ``updated_at`` filled."""
        ...

    async def remove(self, name: str) -> bool: ...

    async def exists(self, name: str) -> bool: ...

    async def all(self) -> list[Skill]:
        """Every skill, sorted by name."""
        ...

    async def get(self, name: str) -> Skill | None: ...


# --- the full protocol ------------------------------------------------------------


class FullMessageStore(MessageStore, Protocol):
    """A ``MessageStore`` with everything agentik asks of one: what the three
    backends implement, and what a seed ``MessageStore`` gets stand-ins for
    (``full_storage``; their degraded behaviour is in docs/storage.md)."""

    # --- writing without a schedule point ---

    def submit_nowait(self, conversation_id: str, message: Message) -> Pending[Message] | None:
        """``submit`` (no idempotency key) if the write is accepted at once; None
        if the caller must ``await submit`` (no room), having queued nothing.
        Raises what ``submit`` raises for a write refused outright. A turn
        submits each message as it happens: through ``submit`` each is a
        schedule point that buys nothing when the queue has room (as trio's
        ``send_nowait`` is to ``send``)."""
        ...

    # --- loading a conversation ---

    async def load_conversation(
        self, conversation_id: str, *, page_size: int = DEFAULT_PAGE_SIZE, after_seq: int = 0
    ) -> ConversationSnapshot:
        """The first ``page_size`` messages after ``after_seq``, the active
        notes and the latest summary, read together: the agent spends one
        read, not three, per conversation it loads."""
        ...

    # --- idempotency keys: turns named from outside (an A2A task id is one) ---

    async def list_idempotency_keys(
        self, conversation_id: str, *, before_seq: int | None = None, limit: int = 100
    ) -> list[tuple[int, str]]:
        """``(seq, key)`` of the messages stored with a key, newest first, only
        those with ``seq < before_seq`` when given; at most ``limit``."""
        ...

    async def list_keyed_turns(
        self,
        conversation_id: str,
        *,
        before_seq: int | None = None,
        limit: int = 100,
        key_suffix: str = "",
        max_messages: int = 1000,
    ) -> list[KeyedTurn]:
        """The turns whose key ends with ``key_suffix``, newest first, only those
        with ``seq < before_seq`` when given; at most ``limit`` turns of at most
        ``max_messages`` messages each. One read: the cost follows the turns
        returned (and keyed messages skipped), not the conversation's length;
        paged by seq (the caller keeps the last seq it saw), so a server lists
        them again after a restart from history, not from memory."""
        ...

    async def count_idempotency_keys(self, conversation_id: str, *, key_suffix: str = "") -> int:
        """How many messages of the conversation carry a key ending with ``key_suffix``."""
        ...

    # --- content parts: inline data kept once ---

    async def count_blobs(self) -> int:
        """How many distinct blobs (a part's inline data, by content hash) the
        store holds: the same data sent in many messages is one blob, and a
        blob goes when the last conversation using it is deleted."""
        ...

    # --- the turn ledger: a turn's state, atomically with its messages ---

    async def submit_awaiting(
        self, conversation_id: str, message: Message, call_ids: Sequence[str]
    ) -> Pending[Message]:
        """Like ``submit``, and in the same transaction: each of ``call_ids`` (ids
        of ``message``'s tool calls) now waits for a person's decision."""
        ...

    async def submit_decision(
        self,
        conversation_id: str,
        seq: int,
        call_id: str,
        *,
        approve: bool,
        reason: str = "",
        result: Message | None = None,
    ) -> Pending[Message | None]:
        """Decide the waiting call ``call_id`` of the message ``seq``, and append
        ``result`` (a denied call's tool result) in the same transaction;
        resolves to ``result`` as stored. A call that is not waiting is a
        ``StoreError`` and changes nothing."""
        ...

    async def submit_turn_failure(self, conversation_id: str, seq: int, code: str) -> Pending[None]:
        """Record that the turn whose user message is ``seq`` failed with
        ``code``, so a restart tells it (left alone) from an interrupted turn
        (resumed)."""
        ...

    async def submit_turn_output(self, conversation_id: str, seq: int) -> Pending[None]:
        """Record that the turn whose user message is ``seq`` answered with a
        typed output (its last assistant message's text is the JSON), so a
        later read of the turn shows it as data (``TurnRecord.output``)."""
        ...

    async def turn_record(self, conversation_id: str, seq: int) -> TurnRecord:
        """The record of the turn whose user message is ``seq``: approvals of
        calls made after it (up to the next user message), its failure, and
        whether it answered with a typed output."""
        ...

    async def interrupted_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> list[str]:
        """Ids of the conversations whose last turn (from their last user
        message on) a stop interrupted: its last message is not an assistant
        answer without tool calls, no failure is recorded for it, and no call
        of it waits for a decision. Sorted, only those ``> after``; at most
        ``limit``. One page costs about what ``list_conversations`` over the
        same conversations costs (the agent resumes them as it opens)."""
        ...

    # --- a conversation as a whole ---

    async def delete_conversation(
        self, conversation_id: str, *, idle_before: datetime | None = None
    ) -> bool:
        """Delete, in one transaction, every row the bundle keeps for the
        conversation: its messages (their idempotency keys with them), its
        working-memory notes (archived ones too), the reflections drawn from
        it, its turn ledger, its summaries, and whatever else a backend keys by
        conversation; no other conversation's, and no skill. Afterwards the
        conversation is as if never used: the next message gets seq 1 and its
        old keys are free. Writes submitted before the delete apply before it.
        True if there was anything. With ``idle_before``, only if its newest
        message was stored strictly before then, checked in the same
        transaction (else False, nothing deleted)."""
        ...

    async def idle_conversations(
        self, before: datetime, *, after: str | None = None, limit: int = 100
    ) -> list[str]:
        """Ids of the conversations whose newest message was stored strictly
        before ``before``, sorted, only those ``> after``; at most ``limit``."""
        ...

    def export_conversation(self, conversation_id: str) -> AsyncIterator[ArchiveRecord]:
        """Every record of the conversation (``agentik.storage._archive``):
        messages in seq order, then notes (oldest first), reflections (oldest
        first), approvals and failures (in seq order), summaries (oldest
        first). Read page by page: a conversation is never loaded whole; a
        turn running meanwhile may or may not be in it. Nothing for an
        unknown conversation."""
        ...

    async def import_conversation(
        self, conversation_id: str, records: Sequence[ArchiveRecord]
    ) -> int:
        """Store ``records`` as the conversation, in one transaction; return how
        many messages. The conversation must hold nothing yet (else
        ``StoreError``, nothing written), and the records must keep the
        history rules the agent keeps, checked whole before anything is
        written (``agentik.storage._archive_rules.check_archive``). A round
        trip loses nothing but the ids of notes and reflections."""
        ...

    # --- summaries: what a context policy asks the model for ---

    async def submit_summary(
        self, conversation_id: str, through_seq: int, text: str
    ) -> Pending[Summary]:
        """Store a summary covering messages up to ``through_seq``, which must
        be a message of the conversation past the latest summary's; anything
        else is a ``StoreError`` and changes nothing. Summaries chain; none is
        deleted with history kept, and history is never deleted for one."""
        ...

    async def latest_summary(self, conversation_id: str) -> Summary | None: ...

    async def list_summaries(
        self, conversation_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[Summary]:
        """Summaries with ``through_seq > after_seq``, oldest first, at most ``limit``."""
        ...


class FullWorkingMemoryStore(WorkingMemoryStore, Protocol):
    """A ``WorkingMemoryStore`` that lists the notes it archived (by ``archive``,
    ``compact`` or the model's ``memory_archive``): they left the prompt, not
    the store."""

    async def list_archived(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 100
    ) -> list[MemoryEntry]:
        """Archived entries with ``id > after_id``, oldest first, at most ``limit``."""
        ...


# --- beside the stores --------------------------------------------------------------


@runtime_checkable  # only so McpTokenVault can refuse a wrong argument clearly
class SecretStore(Protocol):
    """What agentik keeps for itself (the MCP OAuth vault), by name, apart
    from every conversation.

    Nothing here is keyed by a conversation id, so no request about a
    conversation (reading its notes, exporting, deleting it, a turn in it)
    can name, read, change or delete a secret, and deleting or exporting a
    conversation never touches one. Values are opaque text: a caller keeping a
    credential encrypts it first. A ``put_secret`` replaces the value
    atomically and, like every write, is durable once it returns."""

    async def get_secret(self, name: str) -> str | None:
        """The value stored under ``name``, or None."""
        ...

    async def put_secret(self, name: str, value: str) -> None:
        """Store ``value`` under ``name``, replacing what was there."""
        ...

    async def delete_secret(self, name: str) -> bool:
        """Remove ``name``; True if it was there."""
        ...


# --- the bundles ---------------------------------------------------------------------


@attrs.frozen
class StorageBundle:
    """The four stores an agent needs, from one backend: the seed (DESIGN.md).
    A bundle built from seed stores gets the rest of ``Storage`` as degraded
    stand-ins where it enters the agent (``full_storage``)."""

    message_store: MessageStore
    working_memory_store: WorkingMemoryStore
    reflection_store: ReflectionStore
    skill_store: SkillStore
    ownership: ConversationOwnership | None = None
    """Set when several nodes share the backend; None on a single node."""
    secret_store: SecretStore | None = None
    """Where agentik keeps its own credentials, apart from every conversation;
    None for a backend without (the MCP token vault then refuses to open)."""


@final
@attrs.frozen(kw_only=True)
class Storage(StorageBundle):
    """A bundle with every capability agentik uses: what the three backends
    yield, and what ``full_storage`` makes of a seed-only ``StorageBundle``.
    A backend of your own builds one to be used in full (mypy checks that its
    stores implement the full protocols)."""

    message_store: FullMessageStore
    working_memory_store: FullWorkingMemoryStore
    reflection_store: ReflectionStore
    skill_store: SkillStore
    ownership: ConversationOwnership | None = None
    secret_store: SecretStore | None = None
    degraded: bool = False
    """True when ``full_storage`` completed a seed-only bundle: the full
    protocol's methods beyond the seed are stand-ins (docs/storage.md lists
    what each does), and the agent refuses what they cannot do before it
    starts (tools that need approval at open, deleting a conversation, …)."""
