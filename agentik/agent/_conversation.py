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
import math
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

import attrs
import outcome
import trio

from agentik._errors import (
    AgentikError,
    ApprovalError,
    ModelBackendError,
    StoreError,
    TurnError,
)
from agentik._memory import MemoryEntry
from agentik._messages import Message, Role
from agentik._scope import scope_of
from agentik.agent._compaction import fit_summary, fold_point, summary_message, summary_request
from agentik.agent._events import ApprovalRequest, TurnEvent, TurnFailed, TurnFinished, TurnResult
from agentik.agent._failures import describe, message_of
from agentik.agent._recovery import (
    StoredState,
    last_turn_start,
    open_calls,
    replay_of,
    status_of,
    turn_messages,
    usage_of,
)
from agentik.agent._turn import EmitFn, PromptInputs, Turn
from agentik.agent._turn_errors import turn_error
from agentik.agent._turn_machine import INTERRUPTED, Decided, TurnState, TurnStateError
from agentik.models import ModelRequest, ModelResponse
from agentik.storage import (
    ConversationDeleter,
    IdempotencyKeyIndex,
    Pending,
    StorageBundle,
    Summary,
    SummaryStore,
    TurnLedger,
    TurnRecord,
)
from agentik.toolsets import ToolsetActivation

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from agentik.agent._runtime import AgentRuntime

log = logging.getLogger("agentik.conversation")

CANCELLED_REASON = "the turn was cancelled"
REFLECTION_PROMPT = (
    "You review a finished conversation and state one short, general lesson that"
    " would help in future conversations. Answer with the lesson only, one or two sentences."
)
_FINAL_EVENT_SECONDS = 5.0
_LOAD_PAGE = 500
OPTIONAL_WORK_GRACE = 5.0
"""Seconds a summary or reflection under way may still take once the agent
closes; past that it is cancelled and stores nothing (a slow model must not
hold a shutdown)."""
_REPLAY_LIMIT = 1000
"""Messages of one turn read back at most to replay it from the store."""
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
    decision: Decided | None = None
    """For ``ChatAgent.decide``: the decision to take, instead of a new message."""
    status_only: bool = False
    """For ``ChatAgent.pending_approvals``: report, run nothing."""
    trace_context: Context | None = None
    """The caller's OpenTelemetry context, when the agent traces: the parent of
    the turn's span, carried over the hop into the conversation's task."""
    deletion: Pending[bool] | None = None
    """For ``ChatAgent.delete_conversation``: delete the conversation, run nothing."""
    idle_before: datetime | None = None
    """With ``deletion``: only if its newest message is older (retention)."""
    abandon: bool = False
    """For ``ChatAgent.cancel_paused``: end the paused turn with this key, cancelled."""

    @property
    def is_message(self) -> bool:
        """Whether this request brings a new user message (a turn of its own)."""
        return self.decision is None and not self.status_only and not self.abandon


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
    """Idempotency keys used since load -> seq of their user message. A key
    enters only once its own user message is in ``history`` (accepted by the
    store), so it never names a slot another turn takes."""
    first_seq: int = 1
    """The seq of ``history[0]``: the cache holds the conversation from there
    on (all of it, or, with a context policy, what its summary does not cover)."""
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
    memory_stale: bool = False
    """Notes were changed from outside this task (``ChatAgent.archive_memory``):
    read them again before the next turn."""
    had_history: bool = False
    """Whether the store held messages at load (older keys must be looked up there)."""
    stale: bool = False
    """The cache may disagree with the store: reload before the next turn."""
    inflight: list[Pending[Message]] = attrs.Factory(list)
    """Writes accepted by the store that may not be committed yet (a turn was
    cut short while they waited); a reload waits for them first."""
    backlog: int = 0
    """Turns sent to the inbox and not yet taken (maintained by the agent)."""
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    """The conversation task's cancel scope, for many turns (``_serve_in_scope``)."""
    cancel_scope: trio.CancelScope | None = None
    """What cancels the running turn (``scope``, while one runs; None between turns)."""
    running: TurnRequest | None = None
    """The turn ``cancel_scope`` belongs to."""
    running_on: Turn | None = None
    """The paused turn a decision runs on now: it counts as its own key's, how
    ever the decision was addressed (``runs_key``)."""
    waiting: dict[str, list[TurnRequest]] = attrs.Factory(dict)
    """Keyed turns in the inbox, by key, so one can be cancelled by its key
    before it runs (unkeyed turns are not tracked: they cost nothing here)."""
    last_active: float = attrs.field(factory=trio.current_time)
    paused: Turn | None = None
    """The last turn, while calls of it wait for a person's decision."""
    optional_work: trio.CancelScope | None = None
    """Around summaries and reflections while they run: when the agent closes
    it gives them ``OPTIONAL_WORK_GRACE`` seconds (and sets ``closing``)."""
    closing: bool = False
    system_prompt: tuple[PromptInputs, Message] | None = None
    """The last system message and what it was built from (``Turn._call_model``)."""
    approval_deadline: float = math.inf
    """When the paused turn's waiting calls are denied (``approval_timeout``)."""
    toolsets_seen: frozenset[str] = frozenset()
    """The active toolsets when the agent last looked, when it traces: the
    next look tells which expired (span events, ``_spans``)."""
    skill_scope: str = attrs.field(init=False)
    """The owner scope of this conversation's skills (``_scope``): ``""``
    unless its id names an owner."""

    @skill_scope.default
    def _skill_scope(self) -> str:
        return scope_of(self.conversation_id)

    @property
    def storage(self) -> StorageBundle:
        return self.runtime.storage

    async def run(self, retire: Callable[[Conversation], None]) -> None:
        """Serve turns until the inbox closes (the agent closes it when this
        conversation has been idle long enough, or when the agent shuts down)."""
        inbox = self.inbox
        try:
            while not await self._serve_in_scope(self._receive):
                pass
        finally:
            cut = self.running
            if cut is not None:  # cut short from outside (the agent closing)
                _fail_now(cut)
                self.running = self.cancel_scope = None
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
            left = iter(queued)

            async def next_queued() -> TurnRequest | None:
                request = next(left, None)
                if request is None:
                    raise trio.EndOfChannel
                self.backlog += 1  # ``_serve_in_scope`` counts it taken
                return request

            try:
                while not await self._serve_in_scope(next_queued):
                    pass
            finally:
                if self.running is not None:  # cut short by the agent closing
                    _fail_now(self.running)
                for request in queued:
                    _fail_now(request)

    async def _receive(self) -> TurnRequest | None:
        """The next request from the inbox (``EndOfChannel`` once it is closed),
        or None once a paused turn's approval deadline passed."""
        if self.approval_deadline == math.inf:
            return await self.inbox.receive()
        return await self._receive_or_time_out()

    async def _serve_in_scope(self, receive: Callable[[], Awaitable[TurnRequest | None]]) -> bool:
        """Serve requests from ``receive`` in one cancel scope until there are
        no more (True), or until ``cancel`` cancelled what ran (False: the
        caller opens a new scope and goes on).

        One scope for many turns, not one per turn: trio spends about 8 µs
        entering and leaving one, a twentieth of a turn. Only what runs is
        ever cancelled (``cancel_scope`` is set while a turn or a timed-out
        decision runs); a cancel that comes as a turn ends without a
        checkpoint left fires at the next receive, which takes nothing then.
        """
        with trio.CancelScope() as scope:
            self.scope = scope
            while True:
                try:
                    request = await receive()
                except trio.EndOfChannel:
                    return True
                if request is None:
                    continue
                self.backlog -= 1
                await self._serve(request)
                self.last_active = trio.current_time()
        # Only a cancel of this scope lands here: answer the turn it cut short.
        request = self.running
        self.cancel_scope = self.running = None
        self.running_on = None
        if request is not None:
            self.runtime.stats.turns_failed += 1
            await self._deliver(
                request, outcome.Error(TurnError("the turn was cancelled", code="cancelled"))
            )
            _fail_now(request)
            self.last_active = trio.current_time()
        return False

    async def _receive_or_time_out(self) -> TurnRequest | None:
        """The next request, or None once the paused turn's approval deadline
        passed (its waiting calls are then denied)."""
        with trio.move_on_at(self.approval_deadline):
            return await self.inbox.receive()
        await self._approval_timed_out()
        return None

    def idle_for(self, now: float) -> float:
        """Seconds this conversation has had nothing to do, 0 while it is busy
        or while one of its toolsets is still active (it must not forget it)."""
        if self.backlog or self.cancel_scope is not None or self.activation.active_names():
            return 0.0
        if self.approval_deadline != math.inf:
            return 0.0  # it must live to deny the waiting calls on time
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

    def runs_key(self, key: str) -> bool:
        """Whether the turn running now carries ``key``: a keyed message's, or
        the paused turn keyed so that a decision runs on."""
        running = self.running
        if running is not None and running.idempotency_key == key:
            return True
        turn = self.running_on
        return turn is not None and turn.key == key

    def cancel_key(self, key: str) -> bool:
        """Cancel the turns carrying ``key``: the running one, and any still in
        the inbox (each is answered ``cancelled`` when its turn comes, without
        running). True if there was one. Other turns are left alone."""
        found = False
        if self.cancel_scope is not None and self.runs_key(key):
            self.cancel_scope.cancel()
            found = True
        for request in self.waiting.get(key, ()):
            request.cancelled = found = True
        return found

    async def _serve(self, request: TurnRequest) -> None:
        """Run one turn and deliver its outcome; the caller always hears back."""
        self.taken(request)
        try:
            if request.deletion is not None:
                await self._delete(request.deletion, request.idle_before)
            elif not request.cancelled:
                await self._serve_inner(request)
        finally:
            if self.running is not request or not self.scope.cancel_called:
                _fail_now(request)  # else the scope's end answers it (``_serve_in_scope``)

    async def _delete(self, reply: Pending[bool], idle_before: datetime | None) -> None:
        """Delete the conversation in the store, then forget it here: whatever
        comes next in the inbox starts from nothing, as in a new task. Writes a
        cut-short turn left are settled first, so none lands after the delete."""
        store = self.storage.message_store
        assert isinstance(store, ConversationDeleter)  # ChatAgent checked
        try:
            if self.inflight:
                await self._settle_inflight()
            deleted = await store.delete_conversation(self.conversation_id, idle_before=idle_before)
        except AgentikError as exc:
            self.stale = True  # the store may or may not have done it
            reply.set(outcome.Error(exc))
            return
        if deleted or idle_before is None:
            self._forget()
            self.memory.clear()
            self.had_history = False
            self.system_prompt = None
            self.toolsets_seen = frozenset()
            self.activation = ToolsetActivation(self.activation.timeout)
            self.runtime.forget_conversation(self.conversation_id)
        reply.set(outcome.Value(deleted))

    async def _serve_inner(self, request: TurnRequest) -> None:
        stats = self.runtime.stats
        stats.turns_started += request.is_message
        result: outcome.Outcome[TurnResult]
        # ``cancel`` cancels the conversation's scope while this turn runs (``_serve_in_scope``).
        self.cancel_scope = self.scope
        self.running = request
        try:
            result = outcome.Value(await self._turn(request))
        except (TurnError, ApprovalError) as exc:
            result = outcome.Error(exc)
        except Exception as exc:
            # A store failure, or a bug (ours, or in code the turn calls that
            # was not wrapped where it was called), fails this turn only: the
            # agent serves thousands of other conversations.
            self.stale = True
            result = outcome.Error(turn_error(exc))
        self.cancel_scope = None
        self.running = None
        message = request.is_message
        if isinstance(result, outcome.Value):
            stats.turns_finished += message
        else:
            assert isinstance(result, outcome.Error)
            if isinstance(result.error, TurnError):  # not an ApprovalError: nothing ran
                stats.turns_failed += 1
                self._log_failure(result.error)
        await self._deliver(request, result)
        # A query or a cancelled pause has no new answer to learn from.
        quiet = request.status_only or request.abandon
        settings = self.runtime.settings
        if (
            isinstance(result, outcome.Value)
            and not quiet
            and (settings.reflection or (settings.context is not None and self.paused is None))
        ):
            # Off the turn's latency path: its caller has the answer already.
            # Optional work: shutting down cancels it (it then stores nothing).
            # No scope when there is nothing to do: entering and leaving one
            # was a third of the cancel-scope cost of a turn (profiled).
            with trio.CancelScope() as self.optional_work:
                if self.closing:
                    self.optional_work.deadline = trio.current_time() + OPTIONAL_WORK_GRACE
                if self.runtime.settings.context is not None and self.paused is None:
                    await self._compact(request)
                if self.runtime.settings.reflection:
                    await self._reflect(request)
            self.optional_work = None

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

    async def _reflect(self, turn: TurnRequest) -> None:
        """Ask the model for one short lesson from the history and store it.

        The turn has finished and its caller has its answer, so whatever fails
        here (the model, the reflection store, anything they raise) fails this
        step alone: logged once and counted, never raised."""
        request = ModelRequest(
            (Message(Role.SYSTEM, REFLECTION_PROMPT), *self.history, Message(Role.USER, REFLECT)),
            purpose="reflection",
        )
        try:
            response = await self._ask(request, turn.trace_context)
            if not isinstance(response, ModelResponse):
                raise ModelBackendError(
                    f"the model returned {type(response).__name__}, expected ModelResponse"
                )
            usage = response.usage
            if usage is not None:
                self.runtime.stats.input_tokens += usage.prompt_tokens
                self.runtime.stats.output_tokens += usage.completion_tokens
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

    async def _ask(self, request: ModelRequest, parent: Context | None) -> ModelResponse:
        """A model request outside a turn (a reflection, a summary), in a
        ``chat`` span of its purpose when the agent traces."""
        model = self.runtime.model
        tracing = self.runtime.tracing
        if tracing is None:
            return await model.complete(request)
        chat = tracing.start_chat(parent, self.conversation_id, request)
        response = None
        try:
            response = await model.complete(request)
            return response
        finally:
            answer = response if isinstance(response, ModelResponse) else None
            tracing.end_chat(*chat, answer, sys.exc_info()[1])

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
            code = error.code if isinstance(error, TurnError | ApprovalError) else "turn_failed"
            final = TurnFailed(str(error), code)
        # A slow reader gets the end by waiting (briefly); a gone one needs nothing.
        with (
            trio.move_on_after(_FINAL_EVENT_SECONDS, shield=True),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
        ):
            await events.send(final)
        events.close()

    async def _turn(self, request: TurnRequest) -> TurnResult:
        if self.inflight or self.stale or not self.loaded or self.memory_stale:
            await self._ready()
        if request.decision is not None:
            key = request.idempotency_key
            if not await self._paused_by(key):
                return await self._decided_earlier(request.decision, key)
            paused = self.paused
            if key is not None and paused is not None and paused.key is None:
                paused.key = key  # resumed after a restart, it did not know its key
            return await self._decide(request.decision, self._emitter(request))
        if request.abandon:
            return await self._abandon(request.idempotency_key)
        if request.status_only:
            paused = self.paused
            return TurnResult("", ()) if paused is None else self._paused_result(paused)
        key = request.idempotency_key
        emit = None if request.events is None else self._emitter(request)
        if key is not None:
            seq = await self._find_key(key)
            if seq is not None:
                return await self._again(key, seq, emit)
        turn = Turn.new(self, len(self.history), emit, key)
        if self.runtime.settings.context is not None:
            await turn.check_room(request.text)  # before anything is stored
        if self.paused is not None:
            await self._supersede()
        result = await turn.begin(request.text)
        if result.status == "finished" and self.paused is None:
            return result  # the common case: nothing paused before or now
        return self._after(turn, result)

    async def _again(self, key: str, seq: int, emit: EmitFn | None) -> TurnResult:
        """A turn sent again with its idempotency key: its stored result, its
        pending approvals, or (cut short earlier) the turn resumed."""
        start = seq - self.first_seq
        if start < 0:  # older than the cache (summarized): read it back
            return await self._replay_stored(key, seq)
        replay = self._replay(start)
        if replay is not None:
            self.runtime.stats.turns_replayed += 1
            return replay
        paused = self.paused
        if paused is not None and paused.start == start:
            return self._paused_result(paused)
        if self._has_later_turn(start):
            raise TurnError(
                f"the turn with idempotency key {key!r} did not finish and later"
                " turns followed it; it cannot be resumed",
                code="turn_failed",
            )
        # Its user message is stored: resume the turn where it stopped.
        record = await self._turn_record(start)
        return await self._resume(start, record, emit, key)

    async def _resume(
        self, start: int, record: TurnRecord, emit: EmitFn | None, key: str | None
    ) -> TurnResult:
        turn = Turn.new(self, start, emit, key, usage_of(self.history[start:]))
        self.runtime.stats.turns_resumed += 1
        # Running as its key's turn (``runs_key``): seen running, cancelled by its key.
        self.running_on = turn
        try:
            result = await turn.resume(record)
        finally:
            self.running_on = None
        return self._after(turn, result)

    def _after(self, turn: Turn, result: TurnResult) -> TurnResult:
        """Keep a turn that waits for approval (and arm its timeout)."""
        if result.status == "awaiting_approval":
            self.paused = turn
            timeout = self.runtime.settings.approval_timeout
            if timeout is not None and self.approval_deadline == math.inf:
                self.approval_deadline = trio.current_time() + timeout
        else:
            self.paused = None
            self.approval_deadline = math.inf
        return result

    def _paused_result(self, turn: Turn) -> TurnResult:
        cid = self.conversation_id
        return TurnResult(
            "",
            self.history[turn.start :],
            turn.usage,
            status="awaiting_approval",
            approvals=tuple(ApprovalRequest(cid, c) for c in turn.machine.waiting.values()),
        )

    async def _supersede(self) -> None:
        """A new message while calls wait: they are denied, history stays valid."""
        paused = self.paused
        assert paused is not None
        self.paused = None
        self.approval_deadline = math.inf
        paused.emit = None
        await paused.run(paused.machine.supersede())

    async def _decide(self, decision: Decided, emit: EmitFn | None = None) -> TurnResult:
        paused = self.paused
        machine = None if paused is None else paused.machine
        if (
            paused is None
            or machine is None
            or (
                decision.call_id not in machine.waiting
                and decision.call_id not in machine.decisions
            )
        ):
            return await self._decided_earlier(decision)
        try:
            actions = machine.handle(decision)
        except TurnStateError as exc:
            raise ApprovalError(str(exc), code="already_decided") from exc
        if not actions:  # the same decision again
            return self._paused_result(paused)
        self.runtime.stats.approvals_decided += 1
        paused.emit = emit  # a streamed decision (``stream_decision``) reports what follows
        self.paused = None  # running again; _after keeps it if it pauses again
        self.approval_deadline = math.inf
        self.running_on = paused
        try:
            result = await paused.run(actions)
        finally:
            paused.emit = None  # this caller's stream ends with the result
            self.running_on = None
        assert result is not None
        return self._after(paused, result)

    async def _paused_by(self, key: str | None) -> bool:
        """Whether the paused turn is the one carrying ``key`` (any paused turn
        when ``key`` is None); False when none is paused."""
        paused = self.paused
        if paused is None:
            return False
        return key is None or await self._find_key(key) == self.first_seq + paused.start

    async def _abandon(self, key: str | None) -> TurnResult:
        """``ChatAgent.cancel_paused``: deny the waiting calls, run nothing more,
        record the turn as cancelled."""
        paused = self.paused
        if paused is None or not await self._paused_by(key):
            raise ApprovalError(
                f"no turn with idempotency key {key!r} waits for approval in conversation"
                f" {self.conversation_id!r}",
                code="not_waiting",
            )
        self.paused = None
        self.approval_deadline = math.inf
        paused.emit = None
        await paused.run(paused.machine.supersede(CANCELLED_REASON))
        seq = self.first_seq + paused.start
        self.runtime.remember_failure(self.conversation_id, seq, "cancelled")
        await paused.record_failure("cancelled")
        return TurnResult("", self.history[paused.start :], paused.usage)

    async def _decided_earlier(self, decision: Decided, key: str | None = None) -> TurnResult:
        """A decision about a call of the last turn that no longer waits: the
        same decision again answers the turn as it stands; another is refused.
        With ``key``, only about the turn carrying it."""
        start = last_turn_start(self.history)
        named = None if key is None else await self._find_key(key)
        if key is not None and start is not None and named != self.first_seq + start:
            start = None  # the key names no turn, or not the last one
        record = TurnRecord() if start is None else await self._turn_record(start)
        for approval in record.approvals:
            if approval.call_id != decision.call_id or approval.approved is None:
                continue
            if approval.approved != decision.approve:
                taken = "approved" if approval.approved else "denied"
                raise ApprovalError(
                    f"call {decision.call_id!r} was already {taken}", code="already_decided"
                )
            assert start is not None
            replay = self._replay(start)
            if replay is not None:
                return replay
            paused = self.paused
            if paused is not None:
                return self._paused_result(paused)
        raise ApprovalError(
            f"call {decision.call_id!r} is not waiting for approval in conversation"
            f" {self.conversation_id!r}",
            code="not_waiting",
        )

    async def _approval_timed_out(self) -> None:
        """No decision came in time: deny every waiting call, and let the turn go on."""
        paused = self.paused
        self.approval_deadline = math.inf
        if paused is None:
            return
        timeout = self.runtime.settings.approval_timeout
        reason = f"no decision within {timeout:g} s"
        self.cancel_scope = self.scope  # ``cancel`` stops the denials (``_serve_in_scope``)
        try:
            for call_id in list(paused.machine.waiting):
                if paused.machine.state is not TurnState.APPROVAL:
                    break
                await self._decide(Decided(call_id, False, reason))
        except (TurnError, ApprovalError) as exc:
            self._log_failure(TurnError(message_of(exc), code=getattr(exc, "code", "")))
        except AgentikError as exc:
            self.stale = True
            log.warning("conversation %r: %s", self.conversation_id, message_of(exc))
        self.cancel_scope = None
        self.last_active = trio.current_time()

    def _emitter(self, request: TurnRequest) -> EmitFn | None:
        if request.events is None:
            return None
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

        return emit

    async def _turn_record(self, start: int) -> TurnRecord:
        store = self.storage.message_store
        seq = self.history[start].seq
        if not isinstance(store, TurnLedger) or seq is None:
            return TurnRecord()
        return await store.turn_record(self.conversation_id, seq)

    async def _ready(self) -> None:
        """The cache is current: writes a cut-short turn left are settled, a
        stale cache reloaded, and the last turn's state recovered."""
        if self.inflight:
            await self._settle_inflight()
        if self.stale:
            # A failed write left the cache unsure: start again from the store.
            self._forget()
        if not self.loaded:
            # Cleared before the read, so a change while it runs is read next time.
            self.memory_stale = False
            await self._load()
            recovered = False
            try:
                await self._recover()
                recovered = True
            finally:
                # Cut short (cancelled while it read the turn's record, say): the
                # cache would pass for recovered with the last turn still open,
                # and the next turn would follow calls that wait for results.
                # The next request loads and recovers again.
                self.stale = self.stale or not recovered
        elif self.memory_stale:
            self.memory_stale = False
            notes = await self.storage.working_memory_store.list(self.conversation_id)
            self.memory[:] = notes

    async def _find_key(self, key: str) -> int | None:
        """The seq of the user message stored with ``key``."""
        seq = self.keys.get(key)
        if seq is not None or not self.had_history:
            return seq
        store = self.storage.message_store
        seq = await store.find_idempotency_key(self.conversation_id, key)
        if seq is None or seq < self.first_seq:
            return seq  # unknown, or older than the cache: read from the store
        if not self._holds(seq):
            # Someone else wrote to this conversation since it was loaded:
            # the cache is short of the store. Read it again, then look again.
            self._forget()
            await self._load()
            seq = await store.find_idempotency_key(self.conversation_id, key)
            if seq is None or seq < self.first_seq:
                return seq
            if not self._holds(seq):
                self.stale = True
                raise StoreError(
                    f"idempotency key {key!r} names message seq {seq}, which is not a"
                    " user message of the history just read; retry"
                )
        self.keys[key] = seq
        return seq

    def _holds(self, seq: int) -> bool:
        """Whether the cache holds user message ``seq`` where seqs put it: seqs
        are gapless and the cache holds them all from ``first_seq`` on."""
        index = seq - self.first_seq
        if not 0 <= index < len(self.history):
            return False
        message = self.history[index]
        return message.seq == seq and message.role is Role.USER

    def _forget(self) -> None:
        """Drop the cache; the next turn loads the conversation again."""
        self.history.clear()
        self.keys.clear()
        self.costs.clear()
        self.first_seq = 1
        self.summary = self.summary_message = None
        self.paused = None
        self.approval_deadline = math.inf
        self.loaded = self.stale = False

    async def _replay_stored(self, key: str, seq: int) -> TurnResult:
        """A keyed turn older than the cache (a summary covers it): its result
        read back from the store. It has later turns, so if it did not finish
        it cannot be resumed."""
        store = self.storage.message_store
        messages: list[Message] = []
        async for message in store.get_messages(self.conversation_id, after_seq=seq - 1):
            if messages and message.role is Role.USER:
                break
            messages.append(message)
            if len(messages) > _REPLAY_LIMIT:
                break
        replay = replay_of(messages) if messages else None
        if replay is None:
            raise TurnError(
                f"the turn with idempotency key {key!r} did not finish and later"
                " turns followed it; it cannot be resumed",
                code="turn_failed",
            )
        self.runtime.stats.turns_replayed += 1
        return replay

    def _turn_messages(self, start: int) -> list[Message]:
        return turn_messages(self.history, start)

    def _has_later_turn(self, start: int) -> bool:
        return len(self._turn_messages(start)) + start < len(self.history)

    def _replay(self, start: int) -> TurnResult | None:
        """The stored result of the turn starting at ``start``, if it finished."""
        return replay_of(self._turn_messages(start))

    async def _load(self) -> None:
        """Read history and notes once: all of the history, or with a context
        policy only what the latest summary does not cover."""
        # Read into locals and publish at once: a load cut short (cancelled,
        # failed) leaves nothing half-filled for the next attempt.
        store = self.storage.message_store
        cid = self.conversation_id
        summary = None
        if self.runtime.settings.context is not None and isinstance(store, SummaryStore):
            summary = await store.latest_summary(cid)
        after = 0 if summary is None else summary.through_seq
        loader = self.runtime.loader
        if loader is not None:
            snapshot = await loader.load_conversation(cid, page_size=_LOAD_PAGE, after_seq=after)
            history, memory = list(snapshot.messages), list(snapshot.memory)
            if len(history) == _LOAD_PAGE and history[-1].seq is not None:
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

    async def _compact(self, turn: TurnRequest) -> None:
        """Fold the oldest turns into the summary once what it does not cover
        passes ``summarize_at`` of the budget (``_compaction``). Runs between
        turns; whatever fails (the model, the store) changes nothing but is
        logged once: the window then carries less of the older history."""
        policy = self.runtime.settings.context
        store = self.storage.message_store
        if policy is None or not isinstance(store, SummaryStore) or not self.history:
            return
        history = self.history
        if sum(map(self.cost, history)) < policy.summarize_at * policy.max_tokens:
            return
        fold = fold_point(history, self.cost, policy.max_tokens // 2)
        if fold == 0:
            return
        through = history[fold - 1].seq
        if through is None:
            return  # not committed yet: next time
        try:
            text = self.summary.text if self.summary is not None else None
            position = 0
            while position < fold:
                built = summary_request(
                    text, history[position:fold], policy.max_tokens, policy.count_tokens
                )
                if built is None:
                    raise ModelBackendError("the budget leaves no room for a summary request")
                request, taken = built
                self.runtime.stats.model_calls += 1
                # A chat span of purpose summary in the turn's trace, as reflections.
                response = await self._ask(request, turn.trace_context)
                if not isinstance(response, ModelResponse) or not (response.text or "").strip():
                    raise ModelBackendError("the model answered no summary")
                if response.usage is not None:  # agentik_tokens_total counts it
                    self.runtime.stats.input_tokens += response.usage.prompt_tokens
                    self.runtime.stats.output_tokens += response.usage.completion_tokens
                text = fit_summary(
                    (response.text or "").strip(), policy.max_tokens, policy.count_tokens
                )
                position += taken
            assert text is not None
            stored = await (await store.submit_summary(self.conversation_id, through, text)).wait()
        except Exception as exc:
            self.runtime.stats.summaries_failed += 1
            error = TurnError(f"the summary step failed: {describe(exc)}", code="summary_failed")
            error.__cause__ = exc
            self._log_failure(error)
            return
        self.runtime.stats.summaries += 1
        self.summary = stored
        self.summary_message = summary_message(stored)
        del history[:fold]
        self.first_seq = through + 1
        self.keys = {k: seq for k, seq in self.keys.items() if seq > through}
        self.costs = {seq: c for seq, c in self.costs.items() if seq > through}
        self.had_history = True  # older keys are now looked up in the store

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

    async def _recover(self) -> None:
        """Put the last turn where it stopped: a turn waiting for approval waits
        again; an interrupted one (the process stopped mid-turn) is resumed
        (``resume_interrupted``), or its open calls only answered; a failed one
        keeps its record, its open calls answered if a stop left any."""
        start = last_turn_start(self.history)
        if start is None:
            return
        turn = self.history[start:]
        if len(turn) > 1 and turn[-1].role is Role.ASSISTANT and not turn[-1].tool_calls:
            return  # finished: the common case, no read
        record = await self._turn_record(start)
        failed_here = self.runtime.failures.get((self.conversation_id, self.first_seq + start))
        if record.failure is None and failed_here is not None:
            record = attrs.evolve(record, failure=failed_here)
        state = status_of(turn, record)
        if state is StoredState.FINISHED:
            return
        if state is StoredState.WAITING or (
            state is StoredState.INTERRUPTED and self.runtime.settings.resume_interrupted
        ):
            if state is StoredState.INTERRUPTED:
                log.warning(
                    "conversation %r: resuming a turn the process stopped in", self.conversation_id
                )
            # The turn learns its key: a decision that names none (another
            # transport) then still runs a waiting one on as that key's turn,
            # and a resumed one is seen running as that key's (``runs_key``).
            key = await self._key_at(start)
            try:
                await self._resume(start, record, None, key)
            except TurnError as exc:
                self._log_failure(exc)  # recorded as failed: it will not be resumed again
            return
        await self._answer_open_calls(turn)

    async def _key_at(self, start: int) -> str | None:
        """The idempotency key of the user message at ``start``, from storage:
        one indexed read, for a turn recovered after a restart."""
        store = self.storage.message_store
        seq = self.history[start].seq
        if seq is None or not isinstance(store, IdempotencyKeyIndex):
            return None
        found = await store.list_idempotency_keys(self.conversation_id, before_seq=seq + 1, limit=1)
        return next((key for at, key in found if at == seq), None)

    async def _answer_open_calls(self, turn: list[Message]) -> None:
        """Answer the calls a stop left open, without resuming the turn."""
        calls = open_calls(turn)
        if not calls:
            return
        log.warning(
            "conversation %r: answering %d tool call(s) left open by an interrupted turn",
            self.conversation_id,
            len(calls),
        )
        # Submit all, then wait: if this is cut short, the accepted writes are
        # remembered and the next load waits for them instead of answering twice.
        for call in calls:
            pending = await self.storage.message_store.submit(
                self.conversation_id, Message(Role.TOOL, INTERRUPTED, tool_call_id=call.id)
            )
            self.inflight.append(pending)
        repaired = [await p.wait() for p in self.inflight]
        self.inflight.clear()
        self.history.extend(repaired)


def _fail_now(request: TurnRequest) -> None:
    """Tell a caller whose turn will not run (or was cut short) that it did not
    happen; no-op if it already heard back."""
    if request.deletion is not None and not request.deletion.done:
        request.deletion.set(
            outcome.Error(TurnError("the delete was cancelled before it ran", code="cancelled"))
        )
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
