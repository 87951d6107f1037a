"""The conversation actor: one trio task per live conversation.

It owns everything that is this conversation's alone: the working-memory
notes, the toolset activation, and three parts with rules of their own, the
history cached from the store with the idempotency keys it has seen
(``_history_cache``), the turn paused for approval (``_approvals``) and the
summary and reflection under way beside it (``_optional_work``). How it
comes back to where it stood (after a restart, a failed write, or a turn sent
again with its key) is ``_recovery_actor``'s. This module is the actor's loop:
requests (``_requests``) arrive over its bounded inbox and run one at a time,
in order; ``_serve`` is the one place their type is matched. When idle, and
only once none of its toolsets is still active, it retires; the next request
respawns it from storage, so a user sees no difference.

Only this task touches a ``Conversation`` (and the summary and reflection
tasks it starts in its own nursery, which read snapshots and send results
back: ``_optional_work``). The supervisor holds a ``ConversationHandle``
(``_handle``): it sends requests, cancels what runs through a cancel scope,
and reads what this task publishes there.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, assert_never

import attrs
import outcome
import trio

from agentik._errors import AgentikError, ApprovalError, TurnError
from agentik._memory import MemoryEntry
from agentik._messages import Message
from agentik._scope import scope_of
from agentik.agent._approvals import Approvals
from agentik.agent._child_calls import current_children
from agentik.agent._events import TurnEvent, TurnFailed, TurnFinished, TurnResult
from agentik.agent._handle import NO_TOOLSETS, ConversationHandle
from agentik.agent._history_cache import HistoryCache
from agentik.agent._model_limits import fairness_key
from agentik.agent._optional_work import OptionalWork, log_failure
from agentik.agent._output import stored_output
from agentik.agent._recovery_actor import ready, sent_again
from agentik.agent._requests import Abandon, Decision, Delete, NewTurn, Reply, Request, StatusQuery
from agentik.agent._turn import EmitFn, PromptInputs, Turn
from agentik.agent._turn_errors import turn_error
from agentik.models import current_call_fence, current_fairness_key
from agentik.storage import Storage
from agentik.toolsets import ToolsetActivation

if TYPE_CHECKING:
    from agentik.agent._runtime import AgentRuntime

log = logging.getLogger("agentik.conversation")
_NOT_COUNTED = contextlib.nullcontext()
"""``_running`` off a cluster: a nullcontext may be entered again and again."""

_FINAL_EVENT_SECONDS = 5.0
STALLED_READER_SECONDS = 30.0
"""A stream reader that takes no event for this long is dropped (its stream
ends); the turn goes on and commits as if nobody were watching."""

RunRequest = TypeVar("RunRequest", NewTurn, Decision, Abandon, StatusQuery)


@attrs.define(eq=False)
class Conversation:
    """The state of one live conversation; only its own task touches it."""

    conversation_id: str
    runtime: AgentRuntime
    inbox: trio.MemoryReceiveChannel[Request]
    handle: ConversationHandle
    """What the supervisor sees and may do (``_handle``): this task writes
    only the fields the table there gives it."""
    activation: ToolsetActivation
    memory: list[MemoryEntry] = attrs.Factory(list)
    """The working-memory notes (the cache refills them as it loads)."""
    cache: HistoryCache = attrs.field(init=False)
    """The history as the store holds it, the idempotency keys seen, the
    writes in flight (``_history_cache``)."""
    notes_seen: int = 0
    """The handle's ``notes_version`` when the notes were last read: notes
    changed from outside this task (``ChatAgent.archive_memory``) are read
    again before the next turn."""
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    """The task's cancel scope, for many requests (``_serve_in_scope``); the
    handle shows it while something cancellable runs."""
    running_on: Turn | None = None
    """The paused turn a decision runs on now: it counts as its own key's, how
    ever the decision was addressed (the handle's ``running_key``)."""
    new_turn: Turn | bool = False
    """The turn the running ``NewTurn`` starts: True until it begins (none of
    it stored yet), then the ``Turn``; False for any other request, or a turn
    sent again with its key (already stored). Cut short by the agent's
    shutdown, a turn whose user message may be stored is told ``interrupted``
    (the next start resumes it); one whose message is not, ``unavailable``
    (send it again): nothing would resume it (``_resumable``)."""
    system_prompt: tuple[PromptInputs, Message] | None = None
    """The last system message and what it was built from (``Turn._call_model``)."""
    toolsets_seen: frozenset[str] = frozenset()
    """The active toolsets when the agent last looked, when it traces: the
    next look tells which expired (span events, ``_spans``)."""
    moved: bool = False
    """This node no longer holds the conversation as the task started
    (``check_tenure``): the task serves nothing more; a new one, started
    under the new tenure, loads the conversation afresh."""
    approvals: Approvals = attrs.field(init=False)
    """The paused turn and its approval deadline (``_approvals``)."""
    optional: OptionalWork = attrs.field(init=False)
    """The summary and the reflection under way beside this task (``_optional_work``)."""
    skill_scope: str = attrs.field(init=False)
    """The owner scope of this conversation's skills (``_scope``): ``""``
    unless its id names an owner."""

    @cache.default
    def _cache(self) -> HistoryCache:
        return HistoryCache(self.conversation_id, self.runtime, self.memory, self._dropped)

    def _dropped(self) -> None:
        """The cache was dropped (``HistoryCache.forget``): so is the paused
        turn, whose indexes point into it."""
        self.approvals.clear()

    @approvals.default
    def _approvals(self) -> Approvals:
        return Approvals(self)

    @optional.default
    def _optional(self) -> OptionalWork:
        return OptionalWork(self)

    @skill_scope.default
    def _skill_scope(self) -> str:
        return scope_of(self.conversation_id)

    @property
    def storage(self) -> Storage:
        return self.runtime.storage

    @property
    def running(self) -> Request | None:
        """The request running now (``Turn`` reads its trace context)."""
        return self.handle.running

    @property
    def interrupted(self) -> bool:
        """The agent's shutdown grace is over, or this node no longer holds
        the conversation: a turn cut short now ends interrupted (resumed at
        the next start, or by the conversation's new owner), not cancelled."""
        return self.handle.interrupted or self.moved

    async def check_tenure(self) -> None:
        """Before a model or tool call: stop the turn, as interrupted, if this
        node no longer holds the conversation as it did when the task started
        (its lease lapsed, its shard moved), so two nodes never run a turn's
        calls at the same time; the conversation's owner resumes it. A model
        call checks again once it leaves its queues (``fence``)."""
        if self.runtime.storage.ownership is None:
            return
        self.fence()
        if self.moved:
            await trio.lowlevel.checkpoint()

    def fence(self) -> None:
        """``check_tenure`` without its checkpoint: cancels the running turn
        if this node no longer holds the conversation. The conversation's
        model calls run it right before they send (``current_call_fence``),
        however long they waited for a slot."""
        ownership = self.runtime.storage.ownership
        if ownership is None:
            return
        tenure = ownership.tenure(self.conversation_id)
        if self.moved or tenure is None or tenure != self.handle.tenure:
            if not self.moved:
                log.warning(
                    "conversation %r: this node no longer holds it; its turn stops here",
                    self.conversation_id,
                )
            self.moved = True
            self.scope.cancel()

    def _running(self) -> contextlib.AbstractContextManager[object]:
        """Counts the turn as running in its shard, so a shard handed off to
        another node waits for it (``ConversationOwnership.running``)."""
        ownership = self.runtime.storage.ownership
        if ownership is None:
            return _NOT_COUNTED
        return ownership.running(self.conversation_id)

    async def run(
        self,
        retire: Callable[[ConversationHandle], None],
        exited: Callable[[ConversationHandle], None],
    ) -> None:
        """Serve requests until the inbox closes (the agent closes it when this
        conversation has been idle long enough, or when the agent shuts down);
        then give the summary or reflection under way ``OPTIONAL_WORK_GRACE``.
        ``retire`` takes it out of the agent's registry; ``exited`` says the
        task is over."""
        settings = self.runtime.settings
        optional = settings.context is not None or settings.reflection
        # Summaries and reflections run in this task's own nursery, opened only
        # when they are configured: most agents need none, and each costs.
        # Every model call made in this task (and its children) takes this
        # conversation's share under the model's limits (``_model_limits``).
        current_fairness_key.set(fairness_key(self.conversation_id))
        if self.runtime.storage.ownership is not None:  # a cluster: see ``fence``
            current_call_fence.set(self.fence)
        # Its agent-tool calls register with this agent (``_child_calls``).
        current_children.set(self.runtime.children)
        inbox = self.inbox
        try:
            async with trio.open_nursery() if optional else contextlib.nullcontext() as beside:
                self.optional.nursery = beside
                try:
                    while not await self._serve_in_scope(self._receive):
                        pass
                    if self.cache.inflight:
                        # Writes a cut-short turn left in flight (its clean-up gave
                        # up waiting) are resolved before the task ends, so whoever
                        # reads the store once the agent closed reads them (a next
                        # request would have waited for them the same way).
                        await self.cache.settle_inflight()
                finally:
                    cut = self.handle.running
                    if cut is not None:  # cut short from outside (the agent's nursery)
                        _fail_now(cut)
                        self.ran()
                    # Leave the registry, take what was already queued and close, with
                    # no checkpoint in between: a later send fails and goes to a new
                    # task, and no accepted request is dropped.
                    retire(self.handle)
                    queued: list[Request] = []
                    while True:
                        try:
                            queued.append(inbox.receive_nowait())
                        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                            break
                    inbox.close()
                    try:
                        if queued:  # most often none: no scope to open for nothing
                            await self._serve_queued(queued)
                    finally:
                        self.optional.wind_down()
        finally:
            exited(self.handle)

    async def _serve_queued(self, queued: list[Request]) -> None:
        """Serve what was queued when the inbox closed (cut short, every one
        still waiting is told it did not happen)."""
        left = iter(queued)

        async def next_queued() -> Request | None:
            request = next(left, None)
            if request is None:
                raise trio.EndOfChannel
            return request

        try:
            while not await self._serve_in_scope(next_queued):
                pass
        finally:
            if self.handle.running is not None:  # cut short by the agent closing
                _fail_now(self.handle.running)
            for request in queued:
                _fail_now(request)

    async def _receive(self) -> Request | None:
        """The next request from the inbox (``EndOfChannel`` once it is closed),
        or None once a paused turn's approval deadline passed."""
        if self.approvals.deadline == math.inf:
            return await self.inbox.receive()
        return await self._receive_or_time_out()

    async def _serve_in_scope(self, receive: Callable[[], Awaitable[Request | None]]) -> bool:
        """Serve requests from ``receive`` in one cancel scope until there are
        no more (True), or until the supervisor cancelled what ran (False: the
        caller opens a new scope and goes on).

        One scope for many requests, not one per request: trio spends about
        8 µs entering and leaving one, a twentieth of a turn. Only what runs is
        ever cancelled (the handle shows the scope only while a turn or a
        timed-out decision runs); a cancel that comes as a turn ends without a
        checkpoint left fires at the next receive, which takes nothing then.
        """
        with trio.CancelScope() as scope:
            self.scope = scope
            while True:
                try:
                    request = await receive()
                except trio.EndOfChannel:
                    return True
                if request is not None:
                    await self._serve(request)
        # Only a cancel of this scope lands here: answer the request it cut short.
        request = self.handle.running
        resumable = self._resumable()
        self.ran()
        if request is not None:
            self.runtime.stats.turns_failed += 1
            if self.moved:
                error = TurnError(
                    "this node lost the conversation before the turn finished; the node"
                    " that owns it now resumes it",
                    code="interrupted",
                )
            elif self.interrupted and not resumable:
                error = TurnError(
                    "the agent shut down before the turn's message was stored; send it again",
                    code="unavailable",
                )
            elif self.interrupted:
                error = TurnError(
                    "the agent shut down before the turn finished; it resumes when the"
                    " agent starts again",
                    code="interrupted",
                )
            else:
                error = TurnError("the turn was cancelled", code="cancelled")
            if not isinstance(request, Delete):
                await self._deliver(request.reply, outcome.Error(error))
            _fail_now(request)
        self.publish()
        return False

    async def _receive_or_time_out(self) -> Request | None:
        """The next request, or None once the paused turn's approval deadline
        passed (its waiting calls are then denied)."""
        with trio.move_on_at(self.approvals.deadline):
            return await self.inbox.receive()
        await self.approvals.timed_out()
        return None

    async def _serve(self, request: Request) -> None:
        """Serve one request; its caller always hears back. The one place a
        request's type is matched."""
        reply = request.reply
        try:
            refusal = None
            if self.handle.interrupted:
                refusal = TurnError(
                    "the agent shut down before this request ran; send it again",
                    code="unavailable",
                )
            elif self.moved:
                refusal = TurnError(
                    "this node no longer owns the conversation; send the request again",
                    code="unavailable",
                )
            elif reply.cancelled:
                refusal = TurnError("the turn was cancelled", code="cancelled")
            elif reply.gone:
                # Its caller left while it waited (a client that disconnected):
                # nobody would read the answer, so the model is not asked.
                log.info(
                    "conversation %r: a request whose caller left was dropped before it ran",
                    self.conversation_id,
                )
                refusal = TurnError("the caller left", code="cancelled")
            if refusal is not None:
                self.publish()
                _fail_now(request, refusal)
            else:
                match request:  # each answers its caller, ``publish`` first
                    case NewTurn():
                        await self._run(request, self._new_turn)
                    case Decision():
                        await self._run(request, self.approvals.decision)
                    case Abandon():
                        await self._run(request, self.approvals.abandon)
                    case StatusQuery():
                        await self._run(request, self.approvals.status)
                    case Delete():
                        await self._delete(request)
                    case _:
                        assert_never(request)
        finally:
            if self.handle.running is not request or not self.scope.cancel_called:
                _fail_now(request)  # else the scope's end answers it (``_serve_in_scope``)

    def ran(self) -> None:
        """Nothing cancellable runs any more (the handle says so)."""
        handle = self.handle
        handle.scope = handle.running = handle.running_key = None
        self.running_on = None
        self.new_turn = False

    def _resumable(self) -> bool:
        """Whether the request cut short may have left a turn the next start
        resumes: anything but a new turn whose user message is known not
        stored (``new_turn``; in flight or in doubt, it may be)."""
        turn = self.new_turn
        if isinstance(turn, bool):
            return not turn
        return turn.writes.stored(turn.start) is not False

    def runs_on(self, turn: Turn | None) -> None:
        """A paused or resumed ``turn`` runs now (None: no longer): it is its
        key's turn, seen running and cancelled by that key."""
        self.running_on = turn
        running = self.handle.running
        key = None if running is None else running.idempotency_key
        if turn is not None and turn.key is not None:
            key = turn.key
        self.handle.running_key = key

    def publish(self) -> None:
        """Tell the supervisor how things stand (the handle): when this task
        was last active, until when it must live, which toolsets are active.
        Once per request, before its caller hears back."""
        handle = self.handle
        now = trio.current_time()
        handle.last_active = now
        names = self.activation.active_names() if self.runtime.toolsets()[0] else None
        if names:
            toolsets = {n: now + (self.activation.expires_in(n) or 0.0) for n in names}
            handle.toolsets = toolsets
            keep = max(toolsets.values())
        else:
            handle.toolsets = NO_TOOLSETS
            keep = -math.inf
        # It must live to deny the waiting calls on time.
        handle.keep_until = math.inf if self.approvals.deadline != math.inf else keep

    async def _delete(self, request: Delete) -> None:
        """Delete the conversation in the store, then forget it here: whatever
        comes next in the inbox starts from nothing, as in a new task. Writes a
        cut-short turn left are settled first, and the summary or reflection
        under way is stopped, so none lands after the delete."""
        reply = request.reply.pending
        store = self.storage.message_store
        try:
            await self.optional.stop()
            if self.cache.inflight:
                await self.cache.settle_inflight()
            deleted = await store.delete_conversation(
                self.conversation_id, idle_before=request.idle_before
            )
        except AgentikError as exc:
            self.cache.stale = True  # the store may or may not have done it
            self.publish()
            reply.set(outcome.Error(exc))
            return
        if deleted or request.idle_before is None:
            self.cache.forget()
            self.memory.clear()
            self.cache.had_history = False
            self.system_prompt = None
            self.toolsets_seen = frozenset()
            self.activation = ToolsetActivation(self.activation.timeout)
            self.runtime.forget_conversation(self.conversation_id)
        self.publish()
        reply.set(outcome.Value(deleted))

    async def _run(
        self, request: RunRequest, body: Callable[[RunRequest], Awaitable[TurnResult]]
    ) -> None:
        """Run ``body`` for ``request`` (a turn, a decision, a query) in the
        cancel scope the handle shows, and deliver its outcome."""
        stats = self.runtime.stats
        message = isinstance(request, NewTurn)
        stats.turns_started += message
        handle = self.handle
        # ``ChatAgent.cancel`` cancels the task's scope while this runs (``_serve_in_scope``).
        handle.scope = self.scope
        handle.running = request
        handle.running_key = request.idempotency_key
        self.new_turn = message  # nothing of a new turn is stored yet
        result: outcome.Outcome[TurnResult]
        try:
            with self._running():  # a load may resume an interrupted turn: counted too
                cache = self.cache
                if cache.inflight or cache.stale or not cache.loaded or self.notes_stale:
                    await ready(self)
                self.optional.land_if_back()
                result = outcome.Value(await body(request))
        except (TurnError, ApprovalError) as exc:
            result = outcome.Error(exc)
        except Exception as exc:
            # A store failure, or a bug (ours, or in code the turn calls that
            # was not wrapped where it was called), fails this turn only: the
            # agent serves thousands of other conversations.
            self.cache.stale = True
            result = outcome.Error(turn_error(exc))
        self.ran()
        if isinstance(result, outcome.Value):
            stats.turns_finished += message
        else:
            assert isinstance(result, outcome.Error)
            if isinstance(result.error, TurnError):  # not an ApprovalError: nothing ran
                stats.turns_failed += 1
                log_failure(self.conversation_id, result.error)
        await self._deliver(request.reply, result)
        # A query or a cancelled pause has no new answer to learn from.
        if isinstance(result, outcome.Value) and isinstance(request, NewTurn | Decision):
            self.optional.start(request.trace_context)

    @property
    def notes_stale(self) -> bool:
        """Notes were changed from outside this task since they were read."""
        return self.notes_seen != self.handle.notes_version

    async def _deliver(self, reply: Reply[TurnResult], result: outcome.Outcome[TurnResult]) -> None:
        self.publish()  # before the caller wakes: ``toolset_status`` is current
        reply.pending.set(result)
        events = reply.events
        if events is None:
            return
        if isinstance(result, outcome.Value):
            active = tuple(sorted(self.activation.active_names()))
            final: TurnEvent = TurnFinished(result.value, active)
        else:
            assert isinstance(result, outcome.Error)
            error = result.error
            code = error.code if isinstance(error, TurnError | ApprovalError) else "turn_failed"
            retry_after = error.retry_after if isinstance(error, TurnError) else None
            final = TurnFailed(str(error), code, retry_after)
        # A slow reader gets the end by waiting (briefly); a gone one needs nothing.
        with (
            trio.move_on_after(_FINAL_EVENT_SECONDS, shield=True),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
        ):
            await events.send(final)
        events.close()

    # --- the requests that run ---------------------------------------------------------

    async def _new_turn(self, request: NewTurn) -> TurnResult:
        key = request.idempotency_key
        emit = self.emitter(request.reply)
        if key is not None:
            seq = await self.cache.find_key(key)
            if seq is not None:
                self.new_turn = False  # its turn is stored: it resumes
                again = await sent_again(self, key, seq, emit, request.output)
                return again if request.output is None else stored_output(again, request.output)
        turn = Turn.new(self, len(self.cache.history), emit, key, output=request.output)
        if self.runtime.settings.context is not None:
            await turn.check_room(request.text)  # before anything is stored
        if self.approvals.paused is not None:
            # Its calls denied: over, also if this turn's message is then
            # lost (``StoredState.SUPERSEDED``), after a restart too.
            await self.approvals.supersede()
            # Its user message comes after the denials: the turn starts there.
            turn = Turn.new(self, len(self.cache.history), emit, key, output=request.output)
        self.new_turn = turn
        result = await turn.begin(request.text, request.parts)
        if result.status == "finished" and self.approvals.paused is None:
            return result  # the common case: nothing paused before or now
        return self.approvals.after(turn, result)

    def emitter(self, reply: Reply[TurnResult]) -> EmitFn | None:
        events = reply.events
        if events is None:
            return None

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

        return emit


def _fail_now(request: Request, error: AgentikError | None = None) -> None:
    """Tell a caller whose request will not run (or was cut short) that it did
    not happen (``error``, else ``cancelled``); no-op if it already heard back."""
    reply = request.reply
    if reply.pending.done:
        return
    if error is None:
        what = "delete" if isinstance(request, Delete) else "turn"
        error = TurnError(f"the {what} was cancelled before it finished", code="cancelled")
    reply.pending.set_error(error)
    events = reply.events
    if events is not None:
        code = error.code if isinstance(error, TurnError) else "turn_failed"
        with contextlib.suppress(
            trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError
        ):
            events.send_nowait(TurnFailed(str(error), code))
        events.close()
