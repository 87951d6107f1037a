"""The four store protocols, the optional ones, and the bundle that carries them.

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

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

if TYPE_CHECKING:
    from agentik._memory import MemoryEntry, Reflection, Skill, SkillSummary
    from agentik._messages import Message, TokenStats
    from agentik.storage._archive import ArchiveRecord
    from agentik.storage._pending import Pending

DEFAULT_PAGE_SIZE = 500


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


@attrs.frozen
class ConversationSnapshot:
    """A page of a conversation's history, its active notes and its latest
    summary, read together."""

    messages: tuple[Message, ...]
    """The first ``page_size`` messages after ``after_seq`` (all if fewer)."""
    memory: tuple[MemoryEntry, ...]
    summary: Summary | None = None
    """The latest summary (``SummaryStore``), if the store keeps them."""


@runtime_checkable
class NowaitSubmitter(Protocol):
    """A ``MessageStore`` that can accept a write without awaiting (optional).

    A turn submits each of its messages as it happens; through ``submit`` each
    is a schedule point, four task switches a turn that buy nothing when the
    queue has room. ``submit_nowait`` is the synchronous form (as trio's
    ``send_nowait`` is of ``send``): a turn tries it first and awaits
    ``submit`` only when it returns None. The turn still checkpoints when it
    waits for its commit.
    """

    def submit_nowait(self, conversation_id: str, message: Message) -> Pending[Message] | None:
        """``submit`` (no idempotency key) if the write is accepted at once; None
        if the caller must ``await submit`` (no room), having queued nothing.
        Raises what ``submit`` raises for a write refused outright."""
        ...


@runtime_checkable
class ConversationLoader(Protocol):
    """Optional: a message store that can read what a conversation needs to
    start (history and working memory) in one go. The agent uses it when
    present to spend one read, not two, per conversation it loads."""

    async def load_conversation(
        self, conversation_id: str, *, page_size: int = DEFAULT_PAGE_SIZE, after_seq: int = 0
    ) -> ConversationSnapshot: ...


@attrs.frozen(kw_only=True)
class KeyedTurn:
    """A turn named by an idempotency key: the message stored with the key and
    the messages after it, up to (not including) the next user message."""

    key: str
    messages: tuple[Message, ...]
    """Oldest first; ``messages[0]`` carries the key. Never empty."""

    @property
    def seq(self) -> int:
        """The seq of the keyed message: where the turn sits in its conversation."""
        seq = self.messages[0].seq
        assert seq is not None, "stored messages carry their seq"
        return seq


@runtime_checkable
class IdempotencyKeyIndex(Protocol):
    """Optional: a message store that can list a conversation's idempotency keys
    and the turns they name.

    Keys name turns from outside (an A2A task id is one), so this is how a
    server lists them again after a restart, from history rather than from
    memory, one page at a time: ``list_keyed_turns`` pages by seq (the caller
    keeps the last seq it saw), so any page costs what the first one does.
    A backend implementing only some of these methods is not an
    ``IdempotencyKeyIndex``; ``agentik.testing`` says so rather than
    skipping it."""

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
        returned (and keyed messages skipped), not the conversation's length."""
        ...

    async def count_idempotency_keys(self, conversation_id: str, *, key_suffix: str = "") -> int:
        """How many messages of the conversation carry a key ending with ``key_suffix``."""
        ...


@attrs.frozen(kw_only=True)
class Approval:
    """A tool call that needs a person's decision, as stored."""

    seq: int
    """The seq of the assistant message that made the call."""
    call_id: str
    approved: bool | None = None
    """None while it waits."""
    reason: str = ""


@attrs.frozen(kw_only=True)
class TurnRecord:
    """What storage knows of one turn beyond its messages."""

    approvals: tuple[Approval, ...] = ()
    """Calls of the turn that needed a decision, in the order they were recorded."""
    failure: str | None = None
    """The code the turn failed with; None if it has not failed (finished,
    running, waiting for a decision, or interrupted by a stop)."""


@runtime_checkable
class TurnLedger(Protocol):
    """Optional: a message store that keeps a turn's state with its messages,
    atomically: which calls wait for a person, how they were decided, and
    whether the turn failed. The agent needs it for tools that require approval
    and to tell an interrupted turn (resumed) from a failed one (left alone)."""

    async def submit_awaiting(
        self, conversation_id: str, message: Message, call_ids: Sequence[str]
    ) -> Pending[Message]:
        """Like ``submit``, and in the same transaction: each of ``call_ids`` (ids
        of ``message``'s tool calls) now waits for a decision."""
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
        """Record that the turn whose user message is ``seq`` failed with ``code``."""
        ...

    async def turn_record(self, conversation_id: str, seq: int) -> TurnRecord:
        """The record of the turn whose user message is ``seq``: approvals of
        calls made after it (up to the next user message) and its failure."""
        ...


@runtime_checkable
class InterruptedTurnIndex(Protocol):
    """Optional: a message store (a ``TurnLedger``) that can find the
    conversations whose last turn was interrupted: a process stopped in it.

    The agent resumes those turns when it opens, without waiting for their
    conversations to be used again (``resume_interrupted``). One page walks
    conversations in id order, a probe or two each (their newest message, the
    turn's record), so a start-up pass costs about what ``list_conversations``
    over the same conversations costs."""

    async def interrupted_conversations(
        self, *, after: str | None = None, limit: int = 100
    ) -> list[str]:
        """Ids of the conversations whose last turn (from their last user
        message on) is interrupted: its last message is not an assistant answer
        without tool calls, no failure is recorded for it, and no call of it
        waits for a decision. Sorted, only those ``> after``; at most ``limit``."""
        ...


@runtime_checkable
class ConversationDeleter(Protocol):
    """Optional: a message store that can delete a conversation whole, and find
    the conversations idle since a given time (retention). The agent needs it
    for ``ChatAgent.delete_conversation``.

    ``delete_conversation`` removes, in one transaction (all of it, or none
    of it if it fails), every row the bundle keeps for the conversation: its
    messages (their idempotency keys with them), its working-memory notes
    (archived ones too), the reflections drawn from it, its turn ledger
    (``TurnLedger``: approvals, failed turns), its summaries (``SummaryStore``),
    and whatever else a backend keys by conversation. Nothing of other
    conversations, and no skill, changes. Afterwards the conversation is as
    if it had never been used: the next message gets seq 1, and its old
    idempotency keys are free again. Writes submitted before the delete are
    applied before it (one writer, in order), so none lands after it.

    A backend implementing only some of these methods is not a
    ``ConversationDeleter``; ``agentik.testing`` says so rather than skipping it.
    """

    async def delete_conversation(
        self, conversation_id: str, *, idle_before: datetime | None = None
    ) -> bool:
        """Delete everything kept for the conversation; True if there was any.
        With ``idle_before``, only if its newest message was stored strictly
        before then, checked in the same transaction (else False, nothing
        deleted): retention cannot delete a conversation a turn just used."""
        ...

    async def idle_conversations(
        self, before: datetime, *, after: str | None = None, limit: int = 100
    ) -> list[str]:
        """Ids of the conversations whose newest message was stored strictly
        before ``before``, sorted, only those ``> after``; at most ``limit``."""
        ...


@runtime_checkable
class ConversationArchiver(Protocol):
    """Optional: a message store that can export a conversation as records
    (``agentik.storage._archive``) and import them back, losing nothing but the
    ids of notes and reflections (store-wide numbers: an import gives new ones,
    in the same order). ``agentik export`` / ``import`` and
    ``GET …/export`` use it.

    A backend implementing only some of these methods is not a
    ``ConversationArchiver``; ``agentik.testing`` says so.
    """

    def export_conversation(self, conversation_id: str) -> AsyncIterator[ArchiveRecord]:
        """Every record of the conversation: messages in seq order, then notes
        (oldest first), reflections (oldest first), approvals and failures (in
        seq order), summaries (oldest first). Read page by page: a
        conversation is never loaded whole; a turn running meanwhile may or may
        not be in it (export an idle conversation for an exact copy). Nothing
        for an unknown conversation."""
        ...

    async def import_conversation(
        self, conversation_id: str, records: Sequence[ArchiveRecord]
    ) -> int:
        """Store ``records`` as the conversation, in one transaction; return
        how many messages. The conversation must hold nothing yet (else
        ``StoreError``, nothing written), and the records must keep the
        history rules the agent keeps, checked whole before anything is
        written (``agentik.storage._archive_rules.check_archive``: seqs
        1, 2, 3 …, no system message, every result answers a waiting call
        once, summaries chain over the messages, …; else ``StoreError``)."""


class ConversationOwnership(Protocol):
    """Optional: which node of several sharing one database runs a
    conversation's turns (PostgreSQL with ``lease_seconds``; docs/scale-out.md).

    A node owns a conversation from a successful ``claim`` for as long as its
    node lease lives; the agent claims before it routes a turn, and the
    storage refuses message writes to conversations the node does not own, so
    two nodes never write one history at once."""

    def owns(self, conversation_id: str) -> bool:
        """Whether this node owns it now, without asking the database."""
        ...

    async def claim(self, conversation_id: str) -> None:
        """Own it (it was free, or its owner's lease expired), or raise
        ``NotOwnedError`` naming the live owner's URL; ``StoreError`` if this
        node cannot own anything now (its own lease lapsed)."""
        ...

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from a trio task) when this node loses every
        conversation at once (its lease lapsed); returns the unsubscribe."""
        ...

    async def advertise(self, url: str) -> None:
        """Where other nodes send this node's conversations' requests."""
        ...


@runtime_checkable
class NodeCount(Protocol):
    """Optional: a ``ConversationOwnership`` that knows how many nodes are live
    (PostgreSQL's node leases, counted at every renewal), so each node keeps
    its share of the model's limits (``ModelLimits``)."""

    @property
    def live_nodes(self) -> int:
        """Nodes whose lease was live at the last renewal; at least 1."""
        ...


@attrs.frozen(kw_only=True)
class Summary:
    """What the model wrote to stand for a conversation's history up to a seq."""

    through_seq: int
    """The last message it covers: the next summary, or the window, starts after it."""
    text: str
    created_at: datetime | None = None


@runtime_checkable
class SummaryStore(Protocol):
    """Optional: a message store that keeps the summaries a context policy asks
    the model for. Summaries chain (each covers more than the one before); none
    is ever deleted with history kept, and history is never deleted for one."""

    async def submit_summary(
        self, conversation_id: str, through_seq: int, text: str
    ) -> Pending[Summary]:
        """Store a summary covering messages up to ``through_seq``, which must
        be a message of the conversation past the latest summary's; anything
        else is a ``StoreError`` and changes nothing."""
        ...

    async def latest_summary(self, conversation_id: str) -> Summary | None: ...


@runtime_checkable
class SummaryHistory(Protocol):
    """Optional: a ``SummaryStore`` that lists every summary it kept, not only
    the latest. Compaction never deletes: the chain of summaries (and the
    history under it) stays readable, one page at a time."""

    async def list_summaries(
        self, conversation_id: str, *, after_seq: int = 0, limit: int = 100
    ) -> list[Summary]:
        """Summaries with ``through_seq > after_seq``, oldest first, at most ``limit``."""
        ...


@runtime_checkable
class ArchivedMemory(Protocol):
    """Optional: a ``WorkingMemoryStore`` that lists the notes it archived
    (by ``archive``, ``compact`` or the model's ``memory_archive``): they left
    the prompt, not the store."""

    async def list_archived(
        self, conversation_id: str, *, after_id: int = 0, limit: int = 100
    ) -> list[MemoryEntry]:
        """Archived entries with ``id > after_id``, oldest first, at most ``limit``."""
        ...


@runtime_checkable
class SecretStore(Protocol):
    """Optional: what agentik keeps for itself (the MCP OAuth vault), by name,
    apart from every conversation.

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


@runtime_checkable
class SecretKeeper(Protocol):
    """Optional: a message store whose backend keeps a ``SecretStore`` too
    (its own table beside the conversations'). A ``StorageBundle`` not given a
    ``secret_store`` takes this one."""

    def secret_store(self) -> SecretStore:
        """The backend's secret store (the same data on every call)."""
        ...


def _backend_secrets(bundle: StorageBundle) -> SecretStore | None:
    store = bundle.message_store
    return store.secret_store() if isinstance(store, SecretKeeper) else None


@attrs.frozen
class StorageBundle:
    """The four stores an agent needs, from one backend."""

    message_store: MessageStore
    working_memory_store: WorkingMemoryStore
    reflection_store: ReflectionStore
    skill_store: SkillStore
    ownership: ConversationOwnership | None = None
    """Set when several nodes share the backend; None on a single node."""
    secret_store: SecretStore | None = attrs.field(
        default=attrs.Factory(_backend_secrets, takes_self=True)
    )
    """Where agentik keeps its own credentials, apart from every conversation:
    by default the message store's backend's (``SecretKeeper``: SQLite,
    PostgreSQL and in-memory bundles have one); None for a backend without."""
