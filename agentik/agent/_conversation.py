"""The conversation actor: one trio task per live conversation.

It owns everything that is this conversation's alone: the cached history
(loaded once from the store), the working-memory notes, the toolset
activation, and the idempotency keys it has seen. Turns arrive over its
bounded inbox and run one at a time, in order. When idle, and only once
none of its toolsets is still active, it retires; the next turn respawns it
from storage, so a user sees no difference.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import outcome
import trio

from agentik._errors import AgentikError, ModelBackendError, StoreError, TurnError
from agentik._memory import MemoryEntry
from agentik._messages import Message, Role, TokenUsage
from agentik.agent._events import TurnEvent, TurnFailed, TurnFinished, TurnResult
from agentik.agent._failures import describe, message_of
from agentik.agent._turn import Turn
from agentik.models import ModelRequest, ModelResponse
from agentik.storage import ConversationLoader, Pending, StorageBundle
from agentik.toolsets import ToolsetActivation

if TYPE_CHECKING:
    from agentik.agent._runtime import AgentRuntime

log = logging.getLogger("agentik.conversation")

INTERRUPTED = "error: interrupted: the process stopped before this tool call finished"
REFLECTION_PROMPT = (
    "You review a finished conversation and state one short, general lesson that"
    " would help in future conversations. Answer with the lesson only, one or two sentences."
)
_FINAL_EVENT_SECONDS = 5.0
_LOAD_PAGE = 500
STALLED_READER_SECONDS = 30.0
"""A stream reader that takes no event for this long is dropped (its stream
ends); the turn goes on and commits as if nobody were watching."""
REFLECT = "What is the one lesson from this conversation?"


@attrs.define(eq=False)
class TurnRequest:
    """A turn waiting in a conversation's inbox."""

    text: str
    idempotency_key: str | None
    reply: Pending[TurnResult]
    events: trio.MemorySendChannel[TurnEvent] | None = None
    """Where a streaming caller reads events; None for ``send``."""
    cancelled: bool = False
    """Cancelled by its idempotency key while it waited: it will not run."""


@attrs.define(eq=False)
class Conversation:
    """The state of one live conversation; only its own task touches it."""

    conversation_id: str
    runtime: AgentRuntime
    inbox: trio.MemoryReceiveChannel[TurnRequest]
    activation: ToolsetActivation
    history: list[Message] = attrs.Factory(list)
    memory: list[MemoryEntry] = attrs.Factory(list)
    keys: dict[str, int] = attrs.Factory(dict)
    """Idempotency keys used since load -> index of their user message in
    ``history``. A key enters only once its own user message is in ``history``
    (accepted by the store), so it never names a slot another turn takes."""
    loaded: bool = False
    had_history: bool = False
    """Whether the store held messages at load (older keys must be looked up there)."""
    stale: bool = False
    """The cache may disagree with the store: reload before the next turn."""
    inflight: list[Pending[Message]] = attrs.Factory(list)
    """Writes accepted by the store that may not be committed yet (a turn was
    cut short while they waited); a reload waits for them first."""
    backlog: int = 0
    """Turns sent to the inbox and not yet taken (maintained by the agent)."""
    cancel_scope: trio.CancelScope | None = None
    """The running turn's scope (None between turns)."""
    running: TurnRequest | None = None
    """The turn ``cancel_scope`` belongs to."""
    waiting: dict[str, list[TurnRequest]] = attrs.Factory(dict)
    """Keyed turns in the inbox, by key, so one can be cancelled by its key
    before it runs (unkeyed turns are not tracked: they cost nothing here)."""
    last_active: float = attrs.field(factory=trio.current_time)

    @property
    def storage(self) -> StorageBundle:
        return self.runtime.storage

    async def run(self, retire: Callable[[Conversation], None]) -> None:
        """Serve turns until the inbox closes (the agent closes it when this
        conversation has been idle long enough, or when the agent shuts down)."""
        inbox = self.inbox
        try:
            while True:
                try:
                    request = await inbox.receive()
                except trio.EndOfChannel:
                    return
                self.backlog -= 1
                await self._serve(request)
                self.last_active = trio.current_time()
        finally:
            # Leave the registry, take what was already queued and close, with no
            # checkpoint in between: a later send fails and goes to a new task,
            # and no accepted turn is dropped.
            retire(self)
            queued: list[TurnRequest] = []
            while True:
                try:
                    queued.append(inbox.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                    break
            inbox.close()
            self.backlog -= len(queued)
            try:
                for request in queued:
                    await self._serve(request)
            finally:
                for request in queued:
                    _fail_now(request)

    def idle_for(self, now: float) -> float:
        """Seconds this conversation has had nothing to do, 0 while it is busy
        or while one of its toolsets is still active (it must not forget it)."""
        if self.backlog or self.cancel_scope is not None or self.activation.active_names():
            return 0.0
        return now - self.last_active

    def queued(self, request: TurnRequest) -> None:
        """``request`` is about to enter the inbox (the agent tells)."""
        key = request.idempotency_key
        if key is not None:
            self.waiting.setdefault(key, []).append(request)

    def taken(self, request: TurnRequest) -> None:
        """``request`` left the inbox (served, or never sent after all)."""
        key = request.idempotency_key
        if key is None:
            return
        waiting = self.waiting.get(key)
        if waiting is not None and request in waiting:
            waiting.remove(request)
            if not waiting:
                del self.waiting[key]

    def cancel_key(self, key: str) -> bool:
        """Cancel the turns carrying ``key``: the running one, and any still in
        the inbox (each is answered ``cancelled`` when its turn comes, without
        running). True if there was one. Other turns are left alone."""
        found = False
        running = self.running
        if self.cancel_scope is not None and running is not None and running.idempotency_key == key:
            self.cancel_scope.cancel()
            found = True
        for request in self.waiting.get(key, ()):
            request.cancelled = found = True
        return found

    async def _serve(self, request: TurnRequest) -> None:
        """Run one turn and deliver its outcome; the caller always hears back."""
        self.taken(request)
        try:
            if not request.cancelled:
                await self._serve_inner(request)
        finally:
            _fail_now(request)

    async def _serve_inner(self, request: TurnRequest) -> None:
        stats = self.runtime.stats
        stats.turns_started += 1
        result: outcome.Outcome[TurnResult]
        with trio.CancelScope() as scope:
            self.cancel_scope = scope
            self.running = request
            try:
                result = outcome.Value(await self._turn(request))
            except TurnError as exc:
                result = outcome.Error(exc)
            except AgentikError as exc:
                self.stale = True
                code = "store_error" if isinstance(exc, StoreError) else "turn_failed"
                error = TurnError(f"the turn failed: {message_of(exc)}", code=code)
                error.__cause__ = exc
                result = outcome.Error(error)
            except Exception as exc:
                # A bug (ours, or in code the turn calls that was not wrapped
                # where it was called) fails this turn only: the agent serves
                # thousands of other conversations.
                self.stale = True
                error = TurnError(
                    f"the turn failed unexpectedly: {describe(exc)}", code="internal_error"
                )
                error.__cause__ = exc
                result = outcome.Error(error)
        self.cancel_scope = None
        self.running = None
        if scope.cancelled_caught:
            result = outcome.Error(TurnError("the turn was cancelled", code="cancelled"))
        if isinstance(result, outcome.Value):
            stats.turns_finished += 1
        else:
            stats.turns_failed += 1
            assert isinstance(result, outcome.Error)
            assert isinstance(result.error, TurnError)
            self._log_failure(result.error)
        await self._deliver(request, result)
        if isinstance(result, outcome.Value) and self.runtime.settings.reflection:
            await self._reflect()

    def _log_failure(self, error: TurnError) -> None:
        """Log a failed turn or step once: with the traceback of what caused it
        when that was a bug (not an agentik error); a cancellation is no failure."""
        if error.code == "cancelled":
            return
        cause = error.__cause__
        if cause is not None and not isinstance(cause, AgentikError):
            log.error(
                "conversation %r: %s [%s]", self.conversation_id, error, error.code, exc_info=cause
            )
        else:
            log.warning("conversation %r: %s [%s]", self.conversation_id, error, error.code)

    async def _reflect(self) -> None:
        """Ask the model for one short lesson from the history and store it.

        The turn has finished and its caller has its answer, so whatever fails
        here (the model, the reflection store, anything they raise) fails this
        step alone: logged once and counted, never raised."""
        request = ModelRequest(
            (Message(Role.SYSTEM, REFLECTION_PROMPT), *self.history, Message(Role.USER, REFLECT))
        )
        try:
            response = await self.runtime.model.complete(request)
            if not isinstance(response, ModelResponse):
                raise ModelBackendError(
                    f"the model returned {type(response).__name__}, expected ModelResponse"
                )
            text = (response.text or "").strip()
            if text:
                await self.storage.reflection_store.insert(self.conversation_id, text)
        except Exception as exc:
            self.runtime.stats.reflections_failed += 1
            error = TurnError(
                f"the reflection step failed: {describe(exc)}", code="reflection_failed"
            )
            error.__cause__ = exc
            self._log_failure(error)

    async def _deliver(self, request: TurnRequest, result: outcome.Outcome[TurnResult]) -> None:
        request.reply.set(result)
        events = request.events
        if events is None:
            return
        if isinstance(result, outcome.Value):
            active = tuple(sorted(self.activation.active_names()))
            final: TurnEvent = TurnFinished(result.value, active)
        else:
            assert isinstance(result, outcome.Error)
            error = result.error
            code = error.code if isinstance(error, TurnError) else "turn_failed"
            final = TurnFailed(str(error), code)
        # A slow reader gets the end by waiting (briefly); a gone one needs nothing.
        with (
            trio.move_on_after(_FINAL_EVENT_SECONDS, shield=True),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
        ):
            await events.send(final)
        events.close()

    async def _turn(self, request: TurnRequest) -> TurnResult:
        if self.inflight:
            await self._settle_inflight()
        if self.stale:
            # A failed write left the cache unsure: start again from the store.
            self._forget()
        if not self.loaded:
            await self._load()
        key = request.idempotency_key
        text: str | None = request.text
        start: int | None = None
        if key is not None:
            start = await self._find_key(key)
            if start is not None:
                replay = self._replay(start)
                if replay is not None:
                    self.runtime.stats.turns_replayed += 1
                    return replay
                if self._has_later_turn(start):
                    raise TurnError(
                        f"the turn with idempotency key {key!r} did not finish and later"
                        " turns followed it; it cannot be resumed",
                        code="turn_failed",
                    )
                text = None  # resume the unfinished turn: its user message is stored
        emit = None
        if request.events is not None:
            events = request.events

            async def emit(event: TurnEvent) -> None:
                # A reader that left does not stop the turn, and neither does
                # one that stopped reading: past a stall it is dropped.
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    try:
                        events.send_nowait(event)
                    except trio.WouldBlock:
                        with trio.move_on_after(STALLED_READER_SECONDS) as stall:
                            await events.send(event)
                        if stall.cancelled_caught:
                            log.warning(
                                "conversation %r: a stream reader stopped reading; dropped",
                                self.conversation_id,
                            )
                            events.close()

        begin = len(self.history)
        # The turn remembers ``key`` as soon as its user message is recorded
        # (a failed turn keeps its key too), and not before: cut short earlier,
        # the message was never stored and the key must name nothing.
        result = await Turn(self, emit, begin).run(text, key)
        if start is None:
            return result
        # A resumed turn: its result starts with the user message stored earlier.
        earlier = self.history[start:begin]
        usage = result.usage
        for m in earlier:
            if m.usage is not None:
                usage += m.usage
        return TurnResult(result.text, [*earlier, *result.messages], usage)

    async def _find_key(self, key: str) -> int | None:
        """Index in ``history`` of the user message stored with ``key``."""
        index = self.keys.get(key)
        if index is not None or not self.had_history:
            return index
        store = self.storage.message_store
        seq = await store.find_idempotency_key(self.conversation_id, key)
        if seq is None:
            return None
        if not self._holds(seq):
            # Someone else wrote to this conversation since it was loaded:
            # the cache is short of the store. Read it again, then look again.
            self._forget()
            await self._load()
            seq = await store.find_idempotency_key(self.conversation_id, key)
            if seq is None:
                return None
            if not self._holds(seq):
                self.stale = True
                raise StoreError(
                    f"idempotency key {key!r} names message seq {seq}, which is not a"
                    " user message of the history just read; retry"
                )
        self.keys[key] = seq - 1
        return seq - 1

    def _holds(self, seq: int) -> bool:
        """Whether the cache holds user message ``seq`` where seqs put it:
        seqs are 1, 2, 3 … and the cache holds them all, in order."""
        index = seq - 1
        if not 0 <= index < len(self.history):
            return False
        message = self.history[index]
        return message.seq == seq and message.role is Role.USER

    def _forget(self) -> None:
        """Drop the cache; the next turn loads the conversation again."""
        self.history.clear()
        self.keys.clear()
        self.loaded = self.stale = False

    def _turn_messages(self, start: int) -> list[Message]:
        out = [self.history[start]]
        for message in self.history[start + 1 :]:
            if message.role is Role.USER:
                break
            out.append(message)
        return out

    def _has_later_turn(self, start: int) -> bool:
        return len(self._turn_messages(start)) + start < len(self.history)

    def _replay(self, start: int) -> TurnResult | None:
        """The stored result of the turn starting at ``start``, if it finished."""
        messages = self._turn_messages(start)
        last = messages[-1]
        if len(messages) < 2 or last.role is not Role.ASSISTANT or last.tool_calls:
            return None
        usage = TokenUsage()
        for m in messages:
            if m.usage is not None:
                usage += m.usage
        return TurnResult(last.content, messages, usage)

    async def _load(self) -> None:
        """Read history and notes once; answer tool calls a crash left open."""
        # Read into locals and publish at once: a load cut short (cancelled,
        # failed) leaves nothing half-filled for the next attempt.
        store = self.storage.message_store
        cid = self.conversation_id
        if isinstance(store, ConversationLoader):
            snapshot = await store.load_conversation(cid, page_size=_LOAD_PAGE)
            history, memory = list(snapshot.messages), list(snapshot.memory)
            if len(history) == _LOAD_PAGE and history[-1].seq is not None:
                after = history[-1].seq
                history += [m async for m in store.get_messages(cid, after_seq=after)]
        else:
            history = [m async for m in store.get_messages(cid)]
            memory = await self.storage.working_memory_store.list(cid)
        self.history[:] = history
        self.keys.clear()  # indexes of an earlier cache name nothing in this one
        self.memory[:] = memory
        self.had_history = bool(history)
        await self._repair()
        self.loaded = True

    async def _settle_inflight(self) -> None:
        """Wait for writes a cut-short turn left queued; the store applies
        them in order, whatever their outcome, so the cache is then reloaded
        from a store that holds them (or that refused them)."""
        while self.inflight:
            pending = self.inflight[0]
            with contextlib.suppress(AgentikError):
                await pending.wait()
            self.inflight.pop(0)
        self.stale = True

    async def _repair(self) -> None:
        open_calls: dict[str, int] = {}
        for i, message in enumerate(self.history):
            for call in message.tool_calls:
                open_calls[call.id] = i
            if message.tool_call_id is not None:
                open_calls.pop(message.tool_call_id, None)
        if not open_calls:
            return
        # Only the last assistant message can have open calls: the turn loop
        # answers every call before the next model request.
        log.warning(
            "conversation %r: answering %d tool call(s) left open by an interrupted turn",
            self.conversation_id,
            len(open_calls),
        )
        # Submit all, then wait: if this is cut short, the accepted writes are
        # remembered and the next load waits for them instead of repairing twice.
        for call_id in open_calls:
            pending = await self.storage.message_store.submit(
                self.conversation_id, Message(Role.TOOL, INTERRUPTED, tool_call_id=call_id)
            )
            self.inflight.append(pending)
        repaired = [await p.wait() for p in self.inflight]
        self.inflight.clear()
        self.history.extend(repaired)


def _fail_now(request: TurnRequest) -> None:
    """Tell a caller whose turn will not run (or was cut short) that it did not
    happen; no-op if it already heard back."""
    if request.reply.done:
        return
    error = TurnError("the turn was cancelled before it finished", code="cancelled")
    request.reply.set(outcome.Error(error))
    if request.events is not None:
        with contextlib.suppress(
            trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError
        ):
            request.events.send_nowait(TurnFailed(str(error), error.code))
        request.events.close()
