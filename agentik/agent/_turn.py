"""One turn of one conversation: the interpreter of ``TurnMachine``'s actions.

The machine (``_turn_machine``) decides; ``Turn`` performs what it decides,
in its conversation's task, and feeds back what happened: it records
messages, calls the model (``_model_call``, with the request ``_request``
builds), runs tool calls (``_tool_run``; the facts the machine decides on
come from ``_call_plans``), and reports the outcome.

Invariants, whatever happens (tool failure, timeout, cancellation, model or
store failure):
- every message is submitted to the store as soon as the machine says to
  record it, and the turn reports an outcome (finished, waiting for approval,
  failed) only after all of them are committed (it waits once);
- the calls the machine starts together run at once, each in its own task
  under the turn (a lone call runs in the turn's own task: the common case
  needs no task); leaving the turn, by failure or cancellation, cancels them
  all;
- when the turn stops short, the machine's ``Stop`` gives every open call a
  result, written in a shielded scope, and the failure is recorded
  (``TurnLedger``) so a restart does not resume the turn.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from agentik._errors import AgentikError, StoreError, TurnError
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.agent._call_plans import Ready, plan_call
from agentik.agent._elicitation import ElicitationRequest
from agentik.agent._events import (
    ApprovalRequest,
    ElicitationAsked,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnResult,
)
from agentik.agent._failures import message_of
from agentik.agent._model_call import ask_model
from agentik.agent._recovery import open_calls, resume_event
from agentik.agent._request import PromptInputs as PromptInputs
from agentik.agent._request import build_request, check_room
from agentik.agent._tool_run import run_tool
from agentik.agent._turn_errors import stop_of
from agentik.agent._turn_machine import (
    STOPPED,
    Activate,
    AwaitApproval,
    Begin,
    CallModel,
    CallPlan,
    Commit,
    Fail,
    Finish,
    ModelAnswered,
    Record,
    RecordDecision,
    Refuse,
    RunTool,
    ToolDone,
    TurnAction,
    TurnMachine,
    TurnState,
)
from agentik.agent._turn_spans import TurnSpans
from agentik.storage import TurnLedger, TurnRecord

if TYPE_CHECKING:
    from agentik.agent._conversation import Conversation
    from agentik.storage import Pending
    from agentik.toolsets import ToolsetIndex

log = logging.getLogger("agentik.turn")

EmitFn = Callable[[TurnEvent], Awaitable[None]]

_CLEANUP_SECONDS = 10.0
"""How long a failing or cancelled turn may spend recording the results of
calls it could not finish, shielded from cancellation."""
_RUNNING = frozenset({TurnState.MODEL, TurnState.TOOLS})
"""States in which something runs that a failure or a cancel cuts short."""


@attrs.define
class Turn:
    """One turn: its machine and what the shell needs to perform it. Owned by
    the conversation task; kept while the turn waits for approval."""

    conversation: Conversation
    machine: TurnMachine
    start: int
    """Index in the conversation's cached history of the turn's user message."""
    emit: EmitFn | None = None
    key: str | None = None
    """The idempotency key of the turn's user message."""
    usage: TokenUsage = TokenUsage()
    pending: list[Pending[Message]] = attrs.Factory(list)
    """Messages submitted since ``first_new`` and maybe not committed yet."""
    first_new: int = 0
    """Index in history of the first message in ``pending``."""
    decisions: list[Pending[Message | None]] = attrs.Factory(list)
    """Decisions submitted and maybe not committed yet."""
    ready: dict[str, Ready] = attrs.Factory(dict)
    """What each valid planned call runs, until it starts."""
    spans: TurnSpans | None = None
    cleanup_deadline: float | None = None
    """When a stopped turn's clean-up gives up (``_cleanup_deadline``)."""

    @classmethod
    def new(
        cls,
        conversation: Conversation,
        start: int,
        emit: EmitFn | None = None,
        key: str | None = None,
        usage: TokenUsage | None = None,
    ) -> Turn:
        """A turn whose user message is (or will be) ``history[start]``."""
        settings = conversation.runtime.settings
        machine = TurnMachine(
            settings.max_tool_rounds, settings.max_parallel_tools, settings.resume_interrupted
        )
        tracing = conversation.runtime.tracing
        spans = None if tracing is None else TurnSpans(tracing)
        return cls(conversation, machine, start, emit, key, usage or TokenUsage(), spans=spans)

    async def begin(self, text: str) -> TurnResult:
        result = await self.run(self.machine.handle(Begin(text, self.key)))
        assert result is not None
        return result

    async def resume(self, record: TurnRecord) -> TurnResult:
        """Go on from where the stored turn stopped (``record``: its approvals)."""
        conv = self.conversation
        _, index = conv.runtime.toolsets()

        def plan(call: ToolCall) -> CallPlan:
            return self._plan(call, index, read_back=True)

        event = resume_event(conv.history[self.start :], record, plan)
        result = await self.run(self.machine.handle(event))
        assert result is not None
        return result

    async def check_room(self, text: str) -> None:
        await check_room(self.conversation, text)

    async def run(self, actions: list[TurnAction]) -> TurnResult | None:
        """Perform ``actions`` and all that follows, until the turn finishes
        (its result), pauses for approval (a result with status
        ``awaiting_approval``) or has nothing more to do (None: a superseded
        turn). Raises ``TurnError`` when it fails; what it recorded is then
        committed and valid."""
        self.first_new = len(self.conversation.history)
        if self.spans is not None:
            self.spans.start_run(self.conversation, self.usage)
        result = None
        try:
            result = await self._drive(actions)
            return result
        finally:
            try:
                if self.machine.state in _RUNNING:
                    await self._stop(sys.exc_info()[1])
                if self.pending or self.decisions:
                    await self._settle()
            finally:
                if self.spans is not None:
                    self.spans.end_run(result, sys.exc_info()[1], self.usage)

    async def _drive(self, actions: list[TurnAction]) -> TurnResult | None:
        machine = self.machine
        while True:
            if sum(isinstance(a, RunTool) for a in actions) > 1:
                last = await self._run_together(actions)
            else:
                # At most one call to start: it runs in this task, no nursery,
                # no task to start (one call per answer is the common case; 2
                # task steps a turn, tests/agent/test_turn_cost.py).
                runs: list[ToolCall] = []
                last = await self._perform(actions, runs.append)
                if runs:
                    call = runs[0]
                    actions = machine.handle(ToolDone(call.id, await self._run_tool(call)))
                    continue
            if isinstance(last, CallModel):
                actions = machine.handle(await self._call_model())
            elif isinstance(last, Finish):
                return await self._result(last.text, ())
            elif isinstance(last, AwaitApproval):
                return await self._result("", last.calls)
            elif isinstance(last, Fail):
                conv = self.conversation
                conv.runtime.remember_failure(
                    conv.conversation_id, conv.first_seq + self.start, last.code
                )
                await self._commit_failure(last.code)
                raise TurnError(last.message, code=last.code)
            else:  # superseded: nothing follows
                await self.commit()
                return None

    async def _perform(
        self, actions: list[TurnAction], start: Callable[[ToolCall], object]
    ) -> TurnAction | None:
        """Perform the records and effects of ``actions`` in order, handing each
        call to start to ``start``. Returns what ends the list (``CallModel``,
        ``Finish``, ``AwaitApproval``, ``Fail``), if anything does."""
        for action in actions:
            # Most frequent first; ``isinstance`` narrows for the type checker
            # (an ``if`` chain: class patterns cost several times more).
            if isinstance(action, Message):
                await self.record(action)
            elif isinstance(action, RunTool):
                if self.emit is not None:
                    await self.emit(ToolCallStarted(action.call))
                start(action.call)
            elif isinstance(action, Commit):
                await self.commit()
            elif isinstance(action, Record):
                await self._record(action)
            elif isinstance(action, Activate):
                self.conversation.activation.enable(action.toolset)
                if self.spans is not None:
                    self.spans.toolsets_changed(self.conversation, action.by)
            elif isinstance(action, Refuse):
                await self._refuse(action)
            elif isinstance(action, RecordDecision):
                await self._record_decision(action)
            else:
                return action
        return None

    async def _run_together(self, actions: list[TurnAction]) -> TurnAction | None:
        """Perform ``actions``, each call they start in its own task as it is
        met, and what follows as the calls finish, until none runs; what ends
        the batch."""
        machine = self.machine
        send, receive = trio.open_memory_channel[tuple[str, str]](machine.max_parallel)
        running = 0
        try:
            async with trio.open_nursery() as nursery:

                def start(call: ToolCall) -> None:
                    nonlocal running
                    nursery.start_soon(self._tool_task, call, send)
                    running += 1

                last = await self._perform(actions, start)
                while running:
                    call_id, content = await receive.receive()
                    running -= 1
                    last = await self._perform(machine.handle(ToolDone(call_id, content)), start)
                return last
        except BaseExceptionGroup as group:
            # The tasks raise nothing but Cancelled: a lone other error is this
            # body's own (a store failure), raised as itself as if no nursery
            # were here; a cancellation of the turn stays the group trio handles.
            rest = group.split(trio.Cancelled)[1]
            if rest is not None and len(rest.exceptions) == 1:
                raise rest.exceptions[0] from None
            raise

    async def _tool_task(
        self, call: ToolCall, done: trio.MemorySendChannel[tuple[str, str]]
    ) -> None:
        await done.send((call.id, await self._run_tool(call)))

    async def _run_tool(self, call: ToolCall) -> str:
        conv = self.conversation
        tool, arguments = self.ready.pop(call.id)  # planned when it was made or read back
        if self.spans is None:
            content, is_error = await run_tool(conv, call, tool, arguments, self._announce)
        else:
            content, is_error = await self.spans.tool(
                conv, call, lambda: run_tool(conv, call, tool, arguments, self._announce)
            )
        return await self._finished(call, content, is_error)

    async def _finished(self, call: ToolCall, content: str, is_error: bool) -> str:
        if self.emit is not None:
            await self.emit(ToolCallFinished(call, content, is_error))
        return content

    async def _announce(self, request: ElicitationRequest) -> None:
        """Put a tool's question into the turn's stream, if it streams."""
        if self.emit is not None:
            await self.emit(ElicitationAsked(request))

    async def _call_model(self) -> ModelAnswered:
        """Ask the model; its answer as the message to record, with a plan per call."""
        conv = self.conversation
        request, index, active = await build_request(conv, self.start)
        chat = None if self.spans is None else self.spans.start_chat(conv, active, request)
        response = await ask_model(conv.runtime, request, self.emit, chat)
        usage = response.usage
        if usage is not None:
            self.usage += usage
        calls = response.tool_calls
        message = Message(Role.ASSISTANT, response.text or "", calls, None, usage)
        if not calls:
            return ModelAnswered(message)
        return ModelAnswered(message, tuple([self._plan(call, index) for call in calls]))

    def _plan(self, call: ToolCall, index: ToolsetIndex, *, read_back: bool = False) -> CallPlan:
        plan, ready = plan_call(
            self.conversation.runtime,
            self.conversation.conversation_id,
            call,
            index,
            read_back=read_back,
        )
        if ready is not None:
            self.ready[call.id] = ready
        return plan

    # --- records --------------------------------------------------------------------

    async def record(self, message: Message) -> None:
        """Submit ``message`` for commit and add it to the cached history.

        Through ``submit_nowait`` when the store has it and has room: no
        schedule point per message (the turn checkpoints when it waits for
        its commit, and at every model and tool call)."""
        conv = self.conversation
        runtime = conv.runtime
        nowait = runtime.submit_nowait
        pending = None if nowait is None else nowait(conv.conversation_id, message)
        if pending is None:
            store = runtime.storage.message_store
            pending = await store.submit(conv.conversation_id, message)
        self.pending.append(pending)
        conv.history.append(message)

    async def _record(self, action: Record) -> None:
        """``record``, with the message's idempotency key or waiting calls."""
        conv = self.conversation
        message, key, awaiting = action.message, action.idempotency_key, action.awaiting
        if awaiting:
            pending = await _ledger(conv).submit_awaiting(conv.conversation_id, message, awaiting)
        else:
            store = conv.runtime.storage.message_store
            pending = await store.submit(conv.conversation_id, message, idempotency_key=key)
        self.pending.append(pending)
        conv.history.append(message)
        if key is not None:
            # Only now: the store has accepted the message and the cache holds
            # it at ``start``. Remembered earlier, a turn cancelled while the
            # store made room left the key naming the slot another turn took.
            conv.keys[key] = conv.first_seq + self.start

    async def _record_decision(self, action: RecordDecision) -> None:
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
            conv.history.append(action.result)
            if self.emit is not None:  # a streamed decision: the denial is the call's result
                call = self._call(action.call_id)
                await self.emit(ToolCallFinished(call, action.result.content, is_error=True))

    async def _refuse(self, action: Refuse) -> None:
        """A call that will not run (``CallPlan.invalid``), told to a streaming
        reader and traced as any failed call is, and counted as one."""
        call, refused = action.call, (action.content, True)
        stats = self.conversation.runtime.stats
        stats.tool_calls += 1
        stats.tool_errors += 1
        if self.emit is not None:
            await self.emit(ToolCallStarted(call))
        if self.spans is not None:

            async def result() -> tuple[str, bool]:
                return refused

            await self.spans.tool(self.conversation, call, result)
        await self._finished(call, *refused)

    def _call(self, call_id: str) -> ToolCall:
        """The call ``call_id`` of this turn, as the model made it."""
        for message in reversed(self.conversation.history[self.start :]):
            for call in message.tool_calls:
                if call.id == call_id:
                    return call
        raise StoreError(f"call {call_id!r} is in no message of the turn")

    def _seq_of_call(self, call_id: str) -> int:
        """The seq of the committed assistant message of this turn with ``call_id``."""
        for message in reversed(self.conversation.history[self.start :]):
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
                await pending[-1].wait()
            stored = [p.result() if p.done else await p.wait() for p in pending]
            conv.history[self.first_new : self.first_new + len(stored)] = stored
            self.first_new += len(stored)
            pending.clear()
        for decision in self.decisions:
            await decision.wait()
        self.decisions.clear()
        return conv.history[self.start :]

    async def _result(self, text: str, waiting: Sequence[ToolCall]) -> TurnResult:
        stored = await self.commit()
        if not waiting:
            return TurnResult(text, stored, self.usage)
        cid = self.conversation.conversation_id
        self.conversation.runtime.stats.approvals_requested += len(waiting)
        return TurnResult(
            "",
            stored,
            self.usage,
            status="awaiting_approval",
            approvals=tuple(ApprovalRequest(cid, call) for call in waiting),
        )

    # --- stopping short ----------------------------------------------------------------

    async def record_failure(self, code: str) -> None:
        """Record that the turn ended with ``code`` although it stopped cleanly
        (a paused turn cancelled): a restart then leaves it alone."""
        await self._commit_failure(code)

    async def _commit_failure(self, code: str) -> None:
        """Commit what the turn recorded, then record that it failed (so a restart
        does not resume it); a cancelled turn too."""
        conv = self.conversation
        await self.commit()
        if len(conv.history) <= self.start:
            return  # stopped before its user message was accepted: no turn to mark
        user = conv.history[self.start]
        store = conv.runtime.storage.message_store
        if isinstance(store, TurnLedger) and user.seq is not None:
            await (await store.submit_turn_failure(conv.conversation_id, user.seq, code)).wait()

    async def _stop(self, error: BaseException | None) -> None:
        """The turn cannot go on (``error`` cut it short): record results for its
        open calls and its failure, shielded, so what it recorded is valid and
        committed."""
        conv = self.conversation
        actions = self.machine.handle(stop_of(error))
        fail = actions[-1]
        assert isinstance(fail, Fail)
        conv.runtime.remember_failure(conv.conversation_id, conv.first_seq + self.start, fail.code)
        # The machine answers the calls it knows open (with the results it
        # holds), but an action cut short (a record the store never accepted)
        # is invisible to it: the calls to answer are those the store holds
        # without a result.
        known = {a.tool_call_id: a.content for a in actions if isinstance(a, Message)}
        with trio.move_on_at(self._cleanup_deadline(), shield=True):
            try:
                for call in open_calls(conv.history[self.start :]):
                    content = known.get(call.id, STOPPED)
                    await self.record(Message(Role.TOOL, content, tool_call_id=call.id))
                await self._commit_failure(fail.code)
            except AgentikError as exc:
                conv.stale = True
                log.error(
                    "conversation %r: could not settle a failed turn: %s",
                    conv.conversation_id,
                    message_of(exc),
                )

    def _cleanup_deadline(self) -> float:
        """One bound for all of a stopped turn's clean-up (answering its open
        calls, marking it failed, settling its writes): behind a stuck writer
        a cancel then waits ``_CLEANUP_SECONDS`` in all, not once per step."""
        if self.cleanup_deadline is None:
            self.cleanup_deadline = trio.current_time() + _CLEANUP_SECONDS
        return self.cleanup_deadline

    async def _settle(self) -> None:
        """Cut short (cancelled, failed): wait, shielded and bounded, for what
        the turn submitted, so the outcome is reported once it is committed.
        Writes still not committed then will commit later: the next reload
        must wait for them, or it would miss them."""
        conv = self.conversation
        with trio.move_on_at(self._cleanup_deadline(), shield=True):
            try:
                await self.commit()
            except AgentikError:
                conv.stale = True  # the store refused some: the cache is unsure
        if any(not p.done for p in self.pending):
            conv.stale = True
            conv.inflight.extend(p for p in self.pending if not p.done)
        self.pending.clear()
        self.decisions.clear()


def _ledger(conversation: Conversation) -> TurnLedger:
    store = conversation.runtime.storage.message_store
    if not isinstance(store, TurnLedger):
        raise StoreError(
            f"{type(store).__name__} keeps no approvals (TurnLedger); tools that require"
            " approval need a store that does"
        )
    return store
