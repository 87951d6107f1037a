"""One turn of one conversation: the I/O shell around ``TurnMachine``.

The machine (``_turn_machine``) decides; ``Turn`` performs what it decides,
in its conversation's task: it records messages, calls the model, runs tool
calls, and feeds back what happened. It holds no decision of its own.

Invariants, whatever happens (tool failure, timeout, cancellation, model or
store failure):
- every message is submitted to the store as soon as the machine says to
  record it, and the turn reports an outcome (finished, waiting for approval,
  failed) only after all of them are committed (it waits once);
- a call a person approved runs only once that decision is committed, so a
  crash can never run it and then ask for it again;
- a call of a tool that is not idempotent runs only once the call itself is
  committed (write-ahead), so a crash can never run it and leave no record:
  the restart answers it ``interrupted``, where a model asked again would
  have called it again (an idempotent tool's call need not wait);
- when the turn stops short (failure, cancellation), the machine's ``Stop``
  gives every open call a result, written in a shielded scope, and the
  failure is recorded (the store's turn ledger) so a restart does not resume the turn.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from agentik._errors import AgentikError, ModelBackendError, StoreError, ToolError, TurnError
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.agent._builtin_tools import ConversationTool
from agentik.agent._context import (
    ContextExhausted,
    ContextPolicy,
    cut_to_tokens,
    estimate_tokens,
    select_window,
)
from agentik.agent._elicitation import ElicitationRequest, ToolCallContext, current_tool_call
from agentik.agent._events import (
    ApprovalRequest,
    ElicitationAsked,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnResult,
)
from agentik.agent._failures import component_error, describe, message_of, model_failure
from agentik.agent._prompt import PromptContext, render_system_prompt
from agentik.agent._recovery import open_calls
from agentik.agent._turn_machine import (
    INTERRUPTED,
    STOPPED,
    AwaitApproval,
    CallModel,
    CallPlan,
    Finish,
    Record,
    RecordDecision,
    Refuse,
    RunTool,
    TurnAction,
    TurnMachine,
    TurnState,
)
from agentik.models import (
    ModelRequest,
    ModelResponse,
    StreamingChatModel,
    TextDelta,
    ToolCallDelta,
)
from agentik.storage import FullMessageStore
from agentik.toolsets import Error, NamedTool, Run, ToolsetIndex, parse_arguments

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext

    from agentik.agent._conversation import Conversation
    from agentik.agent._spans import Tracing
    from agentik.storage import Pending

log = logging.getLogger("agentik.turn")

EmitFn = Callable[[TurnEvent], Awaitable[None]]

_NONE_ACTIVE: frozenset[str] = frozenset()

# How long a failing or cancelled turn may spend recording the results of
# calls it could not finish, shielded from cancellation.
_CLEANUP_SECONDS = 10.0


@attrs.define
class TurnSpans:
    """A traced turn's spans: one ``invoke_agent`` span per run (``_spans``)."""

    tracing: Tracing
    span: Span | None = None
    """The span of the run in progress, while it records."""
    trace: Context | None = None
    """The context the run's chat and tool spans start in (None: no spans)."""
    first: SpanContext | None = None
    """The first run's span: later runs (after a pause) link to it."""
    runs: int = 0
    run_usage: TokenUsage = TokenUsage()
    """The turn's usage when the run in progress started."""


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
    index: ToolsetIndex | None = None
    """The toolsets as of the last model answer: its calls dispatch through it."""
    spans: TurnSpans | None = None
    """The turn's spans, when the agent traces (one field: a turn of an agent
    that does not trace pays one None check per step)."""
    cleanup_deadline: float | None = None
    """When a stopped turn's clean-up gives up (``_cleanup_deadline``)."""

    async def run(self, actions: list[TurnAction]) -> TurnResult | None:
        """Perform ``actions`` and all that follows, until the turn finishes
        (its result), pauses for approval (a result with status
        ``awaiting_approval``) or has nothing more to do (None: a superseded
        turn). Raises ``TurnError`` when it fails; what it recorded is then
        committed and valid."""
        self.first_new = len(self.conversation.history)
        if self.conversation.runtime.tracing is not None:
            self._start_span()
        result = None
        try:
            result = await self._drive(actions)
            return result
        except TurnError as exc:
            await self._stop(exc.code, message_of(exc))
            raise
        finally:
            try:
                state = self.machine.state
                if state is TurnState.MODEL or state is TurnState.TOOLS:
                    # Cancelled, or an error that is not the turn's own (a store
                    # failure, a bug): answer what is open all the same.
                    code = _code_of(sys.exc_info()[1])
                    if code == "cancelled" and self.conversation.interrupted:
                        code = "interrupted"  # a shutdown past its grace: resumed at start
                    await self._stop(code, "the turn was stopped")
                if self.pending or self.decisions:
                    await self._settle()
            finally:
                if self.spans is not None:
                    self._end_span(result, sys.exc_info()[1])

    # --- spans (only when the agent traces: ``_spans``) ----------------------------

    def _start_span(self) -> None:
        conv = self.conversation
        spans = self.spans
        if spans is None:
            tracing = conv.runtime.tracing
            assert tracing is not None
            spans = self.spans = TurnSpans(tracing)
        spans.runs += 1
        running = conv.running
        started = spans.tracing.start_turn(
            conv.conversation_id,
            None if running is None else running.trace_context,
            spans.first,
            spans.runs,
        )
        if started is None:
            spans.span = spans.trace = None
            return
        spans.span, spans.trace = started
        if spans.first is None:
            spans.first = spans.span.get_span_context()
        spans.run_usage = self.usage

    def _end_span(self, result: TurnResult | None, error: BaseException | None) -> None:
        spans = self.spans
        assert spans is not None
        span = spans.span
        if span is None:
            return
        spans.span = spans.trace = None
        start, end = spans.run_usage, self.usage
        spans.tracing.end_turn(
            span,
            status=None if result is None else result.status,
            text="" if result is None else result.text,
            usage=TokenUsage(
                end.prompt_tokens - start.prompt_tokens,
                end.completion_tokens - start.completion_tokens,
            ),
            error=error,
        )

    async def _drive(self, actions: list[TurnAction]) -> TurnResult | None:
        # An ``if`` chain rather than ``match``: this runs for every action of
        # every turn, and class patterns cost several times more.
        machine = self.machine
        while True:
            follow: list[TurnAction] | None = None
            for action in actions:
                # Most frequent first; ``isinstance`` narrows for the type checker.
                if isinstance(action, Message):
                    await self.record(action)
                elif isinstance(action, CallModel):
                    message, plans = await self._call_model()
                    follow = machine.answered(message, plans)
                elif isinstance(action, RunTool):
                    call = action.call
                    follow = machine.tool_done(call.id, await self._run_tool(call))
                elif isinstance(action, Finish):
                    return await self._result(action.text, ())
                elif isinstance(action, Record):
                    await self._record(action)
                elif isinstance(action, RecordDecision):
                    await self._record_decision(action)
                elif isinstance(action, Refuse):
                    await self._refuse(action)
                elif isinstance(action, AwaitApproval):
                    return await self._result("", action.calls)
                else:
                    conv = self.conversation
                    conv.runtime.remember_failure(
                        conv.conversation_id, conv.first_seq + self.start, action.code
                    )
                    await self._commit_failure(action.code)
                    raise TurnError(action.message, code=action.code)
            if follow is None:
                await self.commit()
                return None
            actions = follow

    # --- effects ------------------------------------------------------------------

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
        """A call that will not run (``CallPlan.invalid``): its error result,
        told to a streaming reader as any failed call is. Dispatch counts as
        for a call that runs: the name alone switches its toolset on."""
        call = action.call
        self._dispatch(call)
        stats = self.conversation.runtime.stats
        stats.tool_calls += 1
        stats.tool_errors += 1
        if self.emit is not None:
            await self.emit(ToolCallStarted(call))
        await self.record(action.result)
        if self.emit is not None:
            await self.emit(ToolCallFinished(call, action.result.content, is_error=True))

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
        if user.seq is not None:
            await (await store.submit_turn_failure(conv.conversation_id, user.seq, code)).wait()

    async def _stop(self, code: str, message: str) -> None:
        """The turn cannot go on: record results for its open calls and its
        failure, shielded, so what it recorded is valid and committed."""
        machine = self.machine
        if machine.state is not TurnState.MODEL and machine.state is not TurnState.TOOLS:
            return  # ended, or paused: nothing runs that could be cut short
        conv = self.conversation
        # Interrupted (the agent shut down) is no failure: its calls are answered
        # as a crash's are, nothing marks it failed, and the next start resumes it.
        interrupted = code == "interrupted"
        if not interrupted:
            conv.runtime.remember_failure(conv.conversation_id, conv.first_seq + self.start, code)
        machine.stop(code, message)
        # The machine answers the calls it knows open, but an action cut short
        # (a record the store never accepted) is invisible to it: the calls to
        # answer are those the store holds without a result.
        with trio.move_on_at(self._cleanup_deadline(), shield=True):
            try:
                answer = INTERRUPTED if interrupted else STOPPED
                for call in open_calls(conv.history[self.start :]):
                    await self.record(Message(Role.TOOL, answer, tool_call_id=call.id))
                await (self.commit() if interrupted else self._commit_failure(code))
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

    # --- the model ----------------------------------------------------------------

    def _window(self, system: Message, policy: ContextPolicy) -> tuple[Message, ...]:
        """What of the conversation this request carries (``_context``)."""
        conv = self.conversation
        try:
            window = select_window(
                system=conv.cost(system),
                summary=conv.summary_message,
                history=conv.history,
                turn_start=self.start,
                budget=policy.max_tokens,
                cost=conv.cost,
            )
        except ContextExhausted as exc:
            raise TurnError(str(exc), code="context_exhausted") from exc
        return window.messages

    async def check_room(self, text: str) -> None:
        """Refuse a user message that cannot fit the context window with the
        system message, before it is stored (``context_exhausted``): stored,
        it would fail this turn and weigh on every later one."""
        conv = self.conversation
        policy = conv.runtime.settings.context
        assert policy is not None
        system, _, _ = await self.system_message()
        needed = conv.cost(system) + conv.cost(Message(Role.USER, text))
        if needed > policy.max_tokens:
            raise TurnError(
                f"the message needs {needed} tokens of context with the system message and"
                f" the window is {policy.max_tokens} (context max_tokens); send a shorter one",
                code="context_exhausted",
            )

    def _plan(self, call: ToolCall, index: ToolsetIndex) -> CallPlan:
        """What the machine needs to know of ``call``: whether it needs a
        person's approval (its tool or toolset says so, or the agent's policy
        does; a policy that raises asks for approval), and, when a person or
        the policy would look at it, whether its arguments are invalid (the
        machine then refuses it: nobody is asked about a call that cannot run,
        and the policy sees only valid ones)."""
        conv = self.conversation
        runtime = conv.runtime
        tool = tool_for(call, index, runtime.core_tools)
        if tool is None:
            return CallPlan(call)  # an error result, nothing runs
        needs = tool.requires_approval or _toolset_requires_approval(call, index)
        policy = runtime.approval_policy
        if needs or policy is not None:
            try:
                parse_arguments(tool, call.arguments)
            except ToolError as exc:
                return CallPlan(call, invalid=f"error: {message_of(exc)}")
        if not needs and policy is not None:
            try:
                needs = bool(policy(conv.conversation_id, call))
            except Exception as exc:
                log.error(
                    "conversation %r: the approval policy raised %s; the call waits for approval",
                    conv.conversation_id,
                    describe(exc),
                    exc_info=exc,
                )
                needs = True
        return CallPlan(call, needs, tool.idempotent)

    async def system_message(self) -> tuple[Message, ToolsetIndex, frozenset[str]]:
        """The system message of the next request (built from the contributors,
        or the last one while its inputs are unchanged), with the toolsets and
        the active ones it was built for."""
        conv = self.conversation
        runtime = conv.runtime
        contributions, index = runtime.toolsets()
        active = conv.activation.active_names() if contributions else _NONE_ACTIVE
        cached = runtime.cached_prompt_reads(conv.skill_scope)
        if cached is None:
            skills = await runtime.skills(conv.skill_scope)
            reflections = await runtime.reflections()
        else:
            skills, reflections = cached
        memory = conv.memory
        # The system message of the last request, reused while what it was
        # built from is unchanged (only when every contributor is one of
        # agentik's own, which read nothing but their context).
        key = (index, active, skills, reflections, tuple([e.id for e in memory]))
        last = conv.system_prompt
        if last is not None and _same_prompt_inputs(last[0], key):
            return last[1], index, active
        budgets = runtime.budgets
        policy = runtime.settings.context
        context = PromptContext(
            conversation_id=conv.conversation_id,
            contributions=index,
            active_toolsets=active,
            skills=skills,
            memory=memory,
            reflections=reflections,
            skills_budget=budgets.skills,
            memory_budget=budgets.notes,
            reflections_budget=budgets.reflections,
            count_tokens=estimate_tokens if policy is None else policy.count_tokens,
        )
        system = Message(Role.SYSTEM, render_system_prompt(runtime.contributors, context))
        if runtime.pure_prompt:
            conv.system_prompt = (key, system)
        return system, index, active

    async def _call_model(self) -> tuple[Message, tuple[CallPlan, ...]]:
        """Ask the model; its answer as the message to record, with a plan per call."""
        conv = self.conversation
        runtime = conv.runtime
        system, index, active = await self.system_message()
        tools = offered_tools(runtime.offered_core, index, active)
        policy = runtime.settings.context
        if policy is None:
            request = ModelRequest((system, *conv.history), tools)
        else:
            request = ModelRequest((system, *self._window(system, policy)), tools)
        stats = runtime.stats
        stats.model_calls += 1
        started = trio.current_time()
        streaming = self.emit is not None and isinstance(runtime.model, StreamingChatModel)
        chat = None if self.spans is None else self._start_chat(active, request)
        response = None
        # Whatever the backend raises fails this turn only: an agentik error
        # is the model failing (model_error), anything else a bug in it.
        try:
            if streaming:
                response = await self._stream_model(request)
            else:
                response = await runtime.model.complete(request)
        except AgentikError as exc:
            stats.model_errors += 1
            raise model_failure(exc) from exc
        except Exception as exc:
            stats.model_errors += 1
            raise component_error("the model", exc) from exc
        finally:
            stats.model_latency.observe(trio.current_time() - started)
            if chat is not None:
                answer = response if isinstance(response, ModelResponse) else None
                chat[0].end_chat(chat[1], chat[2], answer, sys.exc_info()[1])
        if not isinstance(response, ModelResponse):
            stats.model_errors += 1
            raise TurnError(
                f"the model returned {type(response).__name__}, expected ModelResponse",
                code="model_error",
            )
        if self.emit is not None and not streaming and response.text:
            await self.emit(TextDelta(response.text))
        usage = response.usage
        if usage is not None:
            self.usage += usage
            stats.input_tokens += usage.prompt_tokens
            stats.output_tokens += usage.completion_tokens
        calls = response.tool_calls
        message = Message(Role.ASSISTANT, response.text or "", calls, None, usage)
        if not calls:
            return message, ()
        self.index = index
        if runtime.approvals_possible:
            return message, tuple([self._plan(call, index) for call in calls])
        if len(calls) == 1:
            return message, (CallPlan(calls[0]),)
        return message, tuple([CallPlan(call) for call in calls])

    async def _stream_model(self, request: ModelRequest) -> ModelResponse:
        model = self.conversation.runtime.model
        assert isinstance(model, StreamingChatModel)
        assert self.emit is not None
        final: ModelResponse | None = None
        stream = model.stream(request)
        try:
            async for event in stream:
                if isinstance(event, ModelResponse):
                    final = event
                elif isinstance(event, TextDelta | ToolCallDelta):
                    await self.emit(event)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        if final is None:
            raise ModelBackendError("the model's stream ended without a final response")
        return final

    # --- tools ----------------------------------------------------------------------

    async def _run_tool(self, call: ToolCall) -> str:
        if self.decisions:
            # An approved call runs only once its approval is durable: a crash
            # must never run it and then ask for it again.
            await self.commit()
        if self.emit is not None:
            await self.emit(ToolCallStarted(call))
        if self.spans is None:
            content, is_error = await self._run_call(call)
        else:
            content, is_error = await self._run_traced(self.spans, call)
        if self.emit is not None:
            await self.emit(ToolCallFinished(call, content, is_error))
        return content

    def _start_chat(
        self, active: frozenset[str], request: ModelRequest
    ) -> tuple[Tracing, Span, object] | None:
        """Toolsets that expired since the last look, as events; the model
        request's span, if the run records."""
        spans = self.spans
        assert spans is not None
        conv = self.conversation
        tracing = spans.tracing
        tracing.toolsets(spans.span, conv.toolsets_seen, active, None)
        conv.toolsets_seen = active
        if spans.trace is None:
            return None
        return (tracing, *tracing.start_chat(spans.trace, conv.conversation_id, request))

    async def _run_traced(self, spans: TurnSpans, call: ToolCall) -> tuple[str, bool]:
        """``_run_call`` in its span, with the toolsets it switched on or off as
        events of the run's span."""
        conv = self.conversation
        tracing = spans.tracing
        before = conv.toolsets_seen
        tool = None
        if spans.trace is not None:
            tool = tracing.start_tool(spans.trace, conv.conversation_id, call)
        result = None
        try:
            result = await self._run_call(call)
            return result
        finally:
            if tool is not None:
                tracing.end_tool(*tool, result, sys.exc_info()[1])
            after = conv.activation.active_names()
            tracing.toolsets(spans.span, before, after, call.name)
            conv.toolsets_seen = after

    async def _run_call(self, call: ToolCall) -> tuple[str, bool]:
        """Run one tool call; any failure becomes an error result the model sees."""
        conv = self.conversation
        runtime = conv.runtime
        runtime.stats.tool_calls += 1
        decision = self._dispatch(call)
        if isinstance(decision, Error):
            return self._error(decision.message)
        tool = decision.tool
        try:
            arguments = parse_arguments(tool, call.arguments)
        except ToolError as exc:
            return self._error(str(exc))
        if self.pending and not tool.idempotent:
            # Write-ahead: the call is durable before its effect. A crash then
            # leaves it recorded and open (a restart answers it ``interrupted``),
            # never unrecorded, where the model, asked again, would call it again.
            await self.commit()
        timeout = runtime.settings.tool_timeout
        result: object = None
        with trio.move_on_after(timeout) as scope:
            # Which conversation runs the tool, for a tool that asks a person mid-call.
            running = current_tool_call.set(
                ToolCallContext(
                    conversation_id=conv.conversation_id, scope=scope, announce=self._announce
                )
            )
            try:
                if isinstance(tool, ConversationTool):
                    result = await tool.run(conv, arguments)
                else:
                    result = await tool.handler(arguments)
            except ToolError as exc:
                return self._error(message_of(exc))
            except Exception as exc:  # a tool's failure is a result, not a crash
                log.warning("tool %r raised %s", call.name, type(exc).__name__, exc_info=True)
                return self._error(f"tool '{call.name}' failed: {describe(exc)}")
            finally:
                current_tool_call.reset(running)
        if scope.cancelled_caught:
            return self._error(f"tool '{call.name}' timed out after {timeout:g} s")
        if not isinstance(result, str):
            return self._error(f"tool '{call.name}' returned {type(result).__name__}, expected str")
        result = _cap(result, runtime.settings.max_tool_output)
        budget = runtime.budgets.tool_result
        if budget is not None:  # a context policy: at most a share of its window
            policy = runtime.settings.context
            assert policy is not None
            result = cut_to_tokens(result, budget, policy.count_tokens)
        return result, False

    def _dispatch(self, call: ToolCall) -> Run | Error:
        """What ``call`` runs, with the toolset its name belongs to switched on
        (or its use counted), whether or not its arguments are valid."""
        conv = self.conversation
        runtime = conv.runtime
        index = self.index
        if index is None:  # a call resumed from storage: no model answer in this run
            _, index = runtime.toolsets()
            self.index = index
        active = conv.activation.active_names() if len(index) else _NONE_ACTIVE
        decision = index.dispatch(active, call, runtime.core_tools)
        if isinstance(decision, Error):
            return decision
        if decision.activates is not None:
            conv.activation.enable(decision.activates)
        elif decision.toolset is not None:
            conv.activation.touch(decision.toolset)
        return decision

    async def _announce(self, request: ElicitationRequest) -> None:
        """Put a tool's question into the turn's stream, if it streams."""
        if self.emit is not None:
            await self.emit(ElicitationAsked(request))

    def _error(self, message: str) -> tuple[str, bool]:
        self.conversation.runtime.stats.tool_errors += 1
        return f"error: {message}", True


PromptInputs = tuple[
    ToolsetIndex, frozenset[str], Sequence[object], Sequence[object], tuple[int, ...]
]
"""What agentik's own prompt contributors read: the toolsets, the active ones,
the skills catalog, recent reflections (both cached lists: the same object
until a write), and the working-memory notes (by id: notes never change)."""


def _same_prompt_inputs(a: PromptInputs, b: PromptInputs) -> bool:
    return (
        a[0] is b[0]
        and a[1] == b[1]
        and (a[2] is b[2] or a[2] == b[2])
        and (a[3] is b[3] or a[3] == b[3])
        and a[4] == b[4]
    )


def tool_for(
    call: ToolCall, index: ToolsetIndex, core: Mapping[str, NamedTool]
) -> NamedTool | None:
    """The tool ``call`` names, whether or not its toolset is active; None if none."""
    decision = index.dispatch(frozenset(), call, core)
    return None if isinstance(decision, Error) else decision.tool


def _toolset_requires_approval(call: ToolCall, index: ToolsetIndex) -> bool:
    name = index.toolset_of(call.name)
    contribution = None if name is None else index.get(name)
    return contribution is not None and contribution.requires_approval


def _ledger(conversation: Conversation) -> FullMessageStore:
    # A seed store's stand-in raises a StoreError saying it keeps no approvals.
    return conversation.runtime.storage.message_store


def _code_of(error: BaseException | None) -> str:
    """The failure code of a turn stopped by ``error`` (None: no error, which
    cannot happen here but is not worth a crash)."""
    if error is None or isinstance(error, trio.Cancelled):
        return "cancelled"
    if isinstance(error, StoreError):
        return "store_error"
    if isinstance(error, BaseExceptionGroup) and error.subgroup(trio.Cancelled) is not None:
        return "cancelled"
    return "internal_error"


def offered_tools(
    core: Sequence[NamedTool], index: ToolsetIndex, active: frozenset[str]
) -> tuple[NamedTool, ...]:
    """What the model is offered: core tools (with enable/disable when toolsets
    exist) and the tools of active toolsets; inactive toolsets stay hidden."""
    if not active:
        return tuple(core)
    return (*core, *index.tools_for(active))


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [output truncated: {len(text) - limit} more characters]"
