"""What one turn wrote: its messages and decisions submitted to the store, and
the waits for their commits.

Every message is submitted the moment the machine says to record it and added
to the conversation's cached history; the turn waits for the commits only
where it must (``Commit``, and before it reports an outcome), once for all
that is pending: writes commit in order, so once the last is done all are.
A turn cut short settles what it submitted in a shielded, bounded scope.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import attrs
import trio

from agentik._errors import AgentikError, CommitInDoubt, StoreError
from agentik._messages import Message, Role, ToolCall
from agentik.agent._failures import message_of
from agentik.agent._recovery import open_calls
from agentik.agent._turn_actions import Record, RecordDecision
from agentik.agent._turn_events import INTERRUPTED, STOPPED
from agentik.storage import FullMessageStore

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agentik._sync import Pending
    from agentik.agent._turn_host import TurnHost

log = logging.getLogger("agentik.turn")

CLEANUP_SECONDS = 10.0
"""How long a failing or cancelled turn may spend recording the results of
calls it could not finish and settling its writes, shielded from cancellation."""


@attrs.define
class TurnWrites:
    """The writes of the turn whose user message is ``history[start]``."""

    conversation: TurnHost
    start: int
    pending: list[Pending[Message]] = attrs.Factory(list)
    """Messages submitted since ``first_new`` and maybe not committed yet."""
    first_new: int = 0
    """Index in history of the first message in ``pending``."""
    decisions: list[Pending[Message | None]] = attrs.Factory(list)
    """Decisions submitted and maybe not committed yet."""
    cleanup_deadline: float | None = None
    """When a stopped turn's clean-up gives up (``cleanup_at``)."""

    async def record(self, message: Message) -> None:
        """Submit ``message`` for commit and add it to the cached history.

        Through ``submit_nowait`` when the store has it and has room: no
        schedule point per message (the turn checkpoints when it waits for
        its commit, and at every model and tool call)."""
        self.check_written()
        conv = self.conversation
        runtime = conv.runtime
        nowait = runtime.submit_nowait
        pending = None if nowait is None else nowait(conv.conversation_id, message)
        if pending is None:
            store = runtime.storage.message_store
            pending = await store.submit(conv.conversation_id, message)
        self.pending.append(pending)
        conv.cache.history.append(message)

    async def record_with(self, action: Record) -> None:
        """``record``, with the message's idempotency key or waiting calls."""
        self.check_written()
        conv = self.conversation
        message, key, awaiting = action.message, action.idempotency_key, action.awaiting
        if awaiting:
            pending = await _ledger(conv).submit_awaiting(conv.conversation_id, message, awaiting)
        else:
            store = conv.runtime.storage.message_store
            pending = await store.submit(conv.conversation_id, message, idempotency_key=key)
        self.pending.append(pending)
        conv.cache.history.append(message)
        if key is not None:
            # Only now: the store has accepted the message and the cache holds
            # it at ``start``. Remembered earlier, a turn cancelled while the
            # store made room left the key naming the slot another turn took.
            conv.cache.keys[key] = conv.cache.first_seq + self.start

    async def record_decision(self, action: RecordDecision) -> None:
        """A person's decision, with a denied call's result in the same write."""
        self.check_written()
        conv = self.conversation
        pending = await _ledger(conv).submit_decision(
            conv.conversation_id,
            self._seq_of_call(action.call_id),
            action.call_id,
            approve=action.approve,
            reason=action.reason,
            result=action.result,
        )
        if action.result is None:
            self.decisions.append(pending)
        else:  # the denied call's result: a message of the turn like any other
            self.pending.append(pending)  # type: ignore[arg-type]  # resolves to the message
            conv.cache.history.append(action.result)

    def check_written(self) -> None:
        """Raise the error of the turn's write that failed, if one did: the
        turn records nothing after it. What it would record depends on what
        failed, and, committed without it (the writer goes on after a failed
        batch), would leave a hole in the stored turn: an answer after a call
        without its result, a call without its turn's user message (which a
        reload takes for the previous turn's, and resumes). Writes resolve in
        order, so the done ones come first."""
        for pending in self.pending:
            if not pending.done:
                return
            pending.result()

    def stored(self, index: int) -> bool | None:
        """Whether ``history[index]`` is committed: True when read back with its
        seq, or its write done without an error (a commit that failed after it
        leaves it as submitted, writes committing in order); False when never
        accepted (the history stops before it) or its write failed; None while
        it is in flight (it may yet commit) or when its commit is in doubt
        (``CommitInDoubt``: the next read tells)."""
        history = self.conversation.cache.history
        if index >= len(history):
            return False
        if history[index].seq is not None:
            return True
        at = index - self.first_new
        if not 0 <= at < len(self.pending) or not self.pending[at].done:
            return None
        try:
            self.pending[at].result()
        except CommitInDoubt:
            return None
        except AgentikError:
            return False
        return True

    def call(self, call_id: str) -> ToolCall:
        """The call ``call_id`` of this turn, as the model made it."""
        for message in reversed(self.conversation.cache.history[self.start :]):
            for call in message.tool_calls:
                if call.id == call_id:
                    return call
        raise StoreError(f"call {call_id!r} is in no message of the turn")

    def _seq_of_call(self, call_id: str) -> int:
        """The seq of the committed assistant message of this turn with ``call_id``."""
        for message in reversed(self.conversation.cache.history[self.start :]):
            if message.seq is not None and any(c.id == call_id for c in message.tool_calls):
                return message.seq
        raise StoreError(f"call {call_id!r} is in no committed message of the turn")

    async def commit(self) -> list[Message]:
        """Wait until every submitted message is committed; return the turn's
        messages as stored."""
        conv = self.conversation
        pending = self.pending
        if pending:
            # Writes commit in order, so once the last is done all are: read
            # them without a checkpoint each.
            if not pending[-1].done:
                # The first write that failed is the one to tell (below): a
                # later one may have failed only because it was queued behind.
                with contextlib.suppress(AgentikError):
                    await pending[-1].wait()
            stored = []
            for p in pending:  # a loop: an await in a comprehension makes it a coroutine
                stored.append(p.result() if p.done else await p.wait())
            conv.cache.history[self.first_new : self.first_new + len(stored)] = stored
            self.first_new += len(stored)
            pending.clear()
        for decision in self.decisions:
            await decision.wait()
        self.decisions.clear()
        return conv.cache.history[self.start :]

    async def commit_output(self) -> list[Message]:
        """Commit what the typed turn recorded (its answer last), then record
        that its answer is a typed output (``TurnRecord.output``), so a later
        read of the turn shows it as data; the turn's messages as stored."""
        conv = self.conversation
        stored = await self.commit()
        user = conv.cache.history[self.start]
        if user.seq is not None:
            store = conv.runtime.storage.message_store
            await (await store.submit_turn_output(conv.conversation_id, user.seq)).wait()
        return stored

    async def commit_failure(self, code: str) -> None:
        """Commit what the turn recorded, then record that it failed (so a restart
        does not resume it); a cancelled turn too."""
        conv = self.conversation
        await self.commit()
        if len(conv.cache.history) <= self.start:
            return  # stopped before its user message was accepted: no turn to mark
        user = conv.cache.history[self.start]
        store = conv.runtime.storage.message_store
        if user.seq is not None:
            await (await store.submit_turn_failure(conv.conversation_id, user.seq, code)).wait()

    async def answer_open_calls(self, known: Mapping[str | None, str], code: str) -> None:
        """A stopped turn: a result for each call the store holds without one
        (``known``'s, else ``STOPPED``), then its failure, shielded and bounded;
        an interrupted turn (``code`` ``interrupted``: the agent shut down) is
        no failure: its calls are answered ``INTERRUPTED`` and it is resumed
        at the next start.
        The calls are those of the history, not the machine's: an action cut
        short (a record the store never accepted) is invisible to the machine."""
        conv = self.conversation
        with trio.move_on_at(self.cleanup_at(), shield=True):
            try:
                interrupted = code == "interrupted"
                answer = INTERRUPTED if interrupted else STOPPED
                for call in open_calls(conv.cache.history[self.start :]):
                    content = known.get(call.id, answer)
                    await self.record(Message(Role.TOOL, content, tool_call_id=call.id))
                await (self.commit() if interrupted else self.commit_failure(code))
            except AgentikError as exc:
                self.unsettled(exc)

    def unsettled(self, error: AgentikError) -> None:
        """A stopped turn's clean-up failed (``error``): the cache is unsure,
        the next request reloads it."""
        conv = self.conversation
        conv.cache.stale = True
        log.error(
            "conversation %r: could not settle a failed turn: %s",
            conv.conversation_id,
            message_of(error),
        )

    async def settle(self) -> None:
        """Cut short (cancelled, failed): wait, shielded and bounded, for what
        the turn submitted, so the outcome is reported once it is committed.
        Writes still not committed then will commit later: the next reload
        must wait for them, or it would miss them."""
        if not self.pending and not self.decisions:
            return
        conv = self.conversation
        with trio.move_on_at(self.cleanup_at(), shield=True):
            try:
                await self.commit()
            except AgentikError:
                conv.cache.stale = True  # the store refused some: the cache is unsure
        if any(not p.done for p in self.pending):
            conv.cache.stale = True
            conv.cache.inflight.extend(p for p in self.pending if not p.done)
        self.pending.clear()
        self.decisions.clear()

    def cleanup_at(self) -> float:
        """One bound for all of a stopped turn's clean-up (answering its open
        calls, marking it failed, settling its writes): behind a stuck writer
        a cancel then waits ``CLEANUP_SECONDS`` in all, not once per step."""
        if self.cleanup_deadline is None:
            self.cleanup_deadline = trio.current_time() + CLEANUP_SECONDS
        return self.cleanup_deadline


def _ledger(conversation: TurnHost) -> FullMessageStore:
    # A seed store's stand-in raises a StoreError saying it keeps no approvals.
    return conversation.runtime.storage.message_store
