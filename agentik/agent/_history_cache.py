"""A conversation's history as the store holds it, cached in its own task.

``Conversation`` (``_conversation``) reads its history once and then keeps it
here, extended by its turns as their messages are submitted (``_turn_writes``);
every request of a turn is built from it (``_request``). What this module
keeps true, so the actor's module does not have to:

- ``history[i]`` is the message of seq ``first_seq + i``: seqs are gapless and
  the cache holds them all from ``first_seq`` on (with a context policy, from
  just after what the latest summary covers);
- an idempotency key enters ``keys`` only once its user message is in
  ``history``, so it never names a slot another turn takes;
- when the cache may disagree with the store (a write in doubt, someone else
  writing), ``stale`` says so and the next request reads it all again, after
  the writes still in flight (``inflight``) are settled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from agentik._errors import AgentikError, StoreError
from agentik._messages import Message, Role
from agentik.agent._compaction import summary_message
from agentik.agent._events import TurnResult
from agentik.agent._recovery import not_resumable, replay_of, turn_messages
from agentik.storage import Storage, Summary, TurnRecord

if TYPE_CHECKING:
    from agentik._memory import MemoryEntry
    from agentik._sync import Pending
    from agentik.agent._runtime import AgentRuntime

LOAD_PAGE = 500
"""Messages read in the first page of a load (with the notes, in one read)."""
REPLAY_LIMIT = 1000
"""Messages of one turn read back at most to replay it from the store."""


@attrs.define(eq=False)
class HistoryCache:
    """The cached history of one conversation; only its task touches it."""

    conversation_id: str
    runtime: AgentRuntime
    memory: list[MemoryEntry]
    """The conversation's working-memory notes (its own list): a load refills
    it, as it is read with the history."""
    dropped: Callable[[], None]
    """Called when the cache is dropped: what the conversation keeps that
    points into it (a paused turn's indexes) goes with it."""
    history: list[Message] = attrs.Factory(list)
    keys: dict[str, int] = attrs.Factory(dict)
    """Idempotency keys used since load -> seq of their user message."""
    first_seq: int = 1
    """The seq of ``history[0]``."""
    summary: Summary | None = None
    """The latest summary (with a context policy); ``history`` starts after it."""
    summary_message: Message | None = None
    """The message that carries ``summary`` in a request."""
    costs: dict[int, int] = attrs.Factory(dict)
    """Token costs of cached messages, by seq (with a context policy). Every
    request's window and the check for a summary read the costs of the whole
    tail: counted once per message, not once per request (they were most of a
    turn's CPU with a tail of a few hundred messages). Trimmed with the tail."""
    loaded: bool = False
    had_history: bool = False
    """Whether the store held messages at load (older keys must be looked up there)."""
    stale: bool = False
    """The cache may disagree with the store: reload before the next turn."""
    inflight: list[Pending[Message]] = attrs.Factory(list)
    """Writes accepted by the store that may not be committed yet (a turn was
    cut short while they waited); a reload waits for them first."""

    @property
    def storage(self) -> Storage:
        return self.runtime.storage

    async def load(self) -> None:
        """Read history and notes once: all of the history, or with a context
        policy only what the latest summary does not cover."""
        # Read into locals and publish at once: a load cut short (cancelled,
        # failed) leaves nothing half-filled for the next attempt.
        store = self.storage.message_store
        cid = self.conversation_id
        summary = None
        if self.runtime.settings.context is not None:
            summary = await store.latest_summary(cid)
        after = 0 if summary is None else summary.through_seq
        loader = self.runtime.loader
        if loader is not None:
            snapshot = await loader.load_conversation(cid, page_size=LOAD_PAGE, after_seq=after)
            history, memory = list(snapshot.messages), list(snapshot.memory)
            if len(history) == LOAD_PAGE and history[-1].seq is not None:
                last = history[-1].seq
                history += [m async for m in store.get_messages(cid, after_seq=last)]
        else:
            history = [m async for m in store.get_messages(cid, after_seq=after)]
            memory = await self.storage.working_memory_store.list(cid)
        self.history[:] = history
        self.first_seq = after + 1
        self.summary = summary
        self.summary_message = None if summary is None else summary_message(summary)
        self.keys.clear()  # seqs of an earlier cache may be gone from this one
        self.costs.clear()
        self.memory[:] = memory
        self.had_history = bool(history) or summary is not None
        self.loaded = True

    def forget(self) -> None:
        """Drop the cache; the next turn loads the conversation again."""
        self.dropped()
        self.history.clear()
        self.keys.clear()
        self.costs.clear()
        self.first_seq = 1
        self.summary = self.summary_message = None
        self.loaded = self.stale = False

    def fold(self, stored: Summary) -> None:
        """Drop from the cache what ``stored`` (a summary that landed) covers,
        if the cache still holds that; else nothing (the store has it and the
        next load reads it)."""
        through = stored.through_seq
        if self.summary is not None and self.summary.through_seq >= through:
            return  # a load since read it, or a later one
        history = self.history
        fold = through - self.first_seq + 1
        if not self.loaded or not 0 < fold <= len(history) or history[fold - 1].seq != through:
            return  # the cache was read again meanwhile: it is not what the summary covers
        self.summary = stored
        self.summary_message = summary_message(stored)
        del history[:fold]
        self.first_seq = through + 1
        self.keys = {k: seq for k, seq in self.keys.items() if seq > through}
        self.costs = {seq: c for seq, c in self.costs.items() if seq > through}
        self.had_history = True  # older keys are now looked up in the store

    async def settle_inflight(self) -> None:
        """Wait for writes a cut-short turn left queued; the store applies
        them in order, whatever their outcome, so the cache is then reloaded
        from a store that holds them (or that refused them)."""
        while self.inflight:
            pending = self.inflight[0]
            with contextlib.suppress(AgentikError):
                await pending.wait()
            self.inflight.pop(0)
        self.stale = True

    async def find_key(self, key: str) -> int | None:
        """The seq of the user message stored with ``key``."""
        seq = self.keys.get(key)
        if seq is not None or not self.had_history:
            return seq
        store = self.storage.message_store
        seq = await store.find_idempotency_key(self.conversation_id, key)
        if seq is None or seq < self.first_seq:
            return seq  # unknown, or older than the cache: read from the store
        if not self.holds(seq):
            # Someone else wrote to this conversation since it was loaded:
            # the cache is short of the store. Read it again, then look again.
            self.forget()
            await self.load()
            seq = await store.find_idempotency_key(self.conversation_id, key)
            if seq is None or seq < self.first_seq:
                return seq
            if not self.holds(seq):
                self.stale = True
                raise StoreError(
                    f"idempotency key {key!r} names message seq {seq}, which is not a"
                    " user message of the history just read; retry"
                )
        self.keys[key] = seq
        return seq

    def holds(self, seq: int) -> bool:
        """Whether the cache holds user message ``seq`` where seqs put it."""
        index = seq - self.first_seq
        if not 0 <= index < len(self.history):
            return False
        message = self.history[index]
        return message.seq == seq and message.role is Role.USER

    def cost(self, message: Message) -> int:
        """Tokens ``message`` takes in a request, under the context policy;
        a stored message's is counted once (its seq names its content)."""
        seq = message.seq
        if seq is not None:
            known = self.costs.get(seq)
            if known is not None:
                return known
        policy = self.runtime.settings.context
        assert policy is not None
        tokens = self.runtime.token_cost(message, policy)
        if seq is not None:
            self.costs[seq] = tokens
        return tokens

    async def turn_record(self, start: int) -> TurnRecord:
        """The store's record of the turn whose user message is ``history[start]``."""
        seq = self.history[start].seq
        if seq is None:
            return TurnRecord()
        return await self.storage.message_store.turn_record(self.conversation_id, seq)

    def replay(self, start: int) -> TurnResult | None:
        """The stored result of the turn starting at ``start``, if it finished."""
        return replay_of(turn_messages(self.history, start))

    def has_later_turn(self, start: int) -> bool:
        return len(turn_messages(self.history, start)) + start < len(self.history)

    async def replay_stored(self, key: str, seq: int) -> TurnResult:
        """A keyed turn older than the cache (a summary covers it): its result
        read back from the store. It has later turns, so if it did not finish
        it cannot be resumed."""
        store = self.storage.message_store
        messages: list[Message] = []
        async for message in store.get_messages(self.conversation_id, after_seq=seq - 1):
            if messages and message.role is Role.USER:
                break
            messages.append(message)
            if len(messages) > REPLAY_LIMIT:
                break
        replay = replay_of(messages) if messages else None
        if replay is None:
            raise not_resumable(key)
        self.runtime.stats.turns_replayed += 1
        return replay
