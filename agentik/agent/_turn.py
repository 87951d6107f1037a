"""One turn of one conversation: the interpreter of ``TurnMachine``'s actions.

The machine (``_turn_machine``) decides; ``Turn`` performs its actions
(``_turn_actions``), in order, in its conversation's task, and feeds back
what happened. What it performs with lives beside it: the writes and their
commits (``_turn_writes``), the model request (``_request``) and call
(``_model_call``), running the calls (``_turn_calls``, each call's run in
``_tool_run``), the facts the machine decides a call on (``_call_plans``),
spans (``_turn_spans``), what a failure is (``_turn_errors``), and what a
turn cut short does as it ends (``_turn_cleanup``).

Invariants, whatever happens (tool failure, timeout, cancellation, model or
store failure):
- the turn reports an outcome (finished, waiting for approval, failed) only
  once everything it recorded is committed;
- the calls the machine starts in one list run at once, each in its own task
  under the turn (a lone call runs in the turn's own task: the common case
  needs no task); leaving the turn, by failure or cancellation, cancels them
  (``_turn_calls``);
- when the turn stops short, the machine's ``Stop`` gives every open call a
  result, written in a shielded scope, and the failure is recorded (the
  store's turn ledger) so a restart does not resume the turn; a turn the
  agent's shutdown cut short past its grace is interrupted instead (its
  calls answered ``interrupted: …``, resumed at the next start)
  (``_turn_cleanup``).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import attrs

from agentik._errors import TurnError
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik._parts import Part
from agentik.agent._call_plans import Ready, plan_call
from agentik.agent._events import (
    ApprovalRequest,
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnResult,
)
from agentik.agent._model_call import ask_model
from agentik.agent._output import (
    FINAL_ANSWER,
    NOT_READ,
    OutputSpec,
    final_answer_tool,
    read_answer,
)
from agentik.agent._recovery import resume_event
from agentik.agent._request import PromptInputs as PromptInputs
from agentik.agent._request import build_request, check_room
from agentik.agent._turn_actions import (
    Activate,
    AskAgain,
    AwaitApproval,
    CallModel,
    Commit,
    Fail,
    Finish,
    Record,
    RecordDecision,
    Refuse,
    RunTool,
    TurnAction,
)
from agentik.agent._turn_calls import refuse, run_call, run_together, several_calls, tell_done
from agentik.agent._turn_cleanup import clean_up, remember_failure
from agentik.agent._turn_errors import Cleanup, cleanup_of
from agentik.agent._turn_events import Begin, CallPlan, ModelAnswered
from agentik.agent._turn_machine import TurnMachine
from agentik.agent._turn_spans import TurnSpans
from agentik.agent._turn_writes import TurnWrites
from agentik.models import structured_output_of
from agentik.toolsets import NamedTool, activate_for_call

if TYPE_CHECKING:
    from agentik.agent._turn_host import TurnHost
    from agentik.storage import TurnRecord
    from agentik.toolsets import ToolsetIndex

EmitFn = Callable[[TurnEvent], Awaitable[None]]


_ENDS = (CallModel, Finish, AwaitApproval, Fail)
"""Actions that end a list (the machine puts them last)."""


@attrs.define
class Turn:
    """One turn: its machine and what the shell needs to perform it. Owned by
    the conversation task; kept while the turn waits for approval."""

    conversation: TurnHost
    machine: TurnMachine
    start: int
    """Index in the conversation's cached history of the turn's user message."""
    writes: TurnWrites
    emit: EmitFn | None = None
    key: str | None = None
    """The idempotency key of the turn's user message."""
    usage: TokenUsage = TokenUsage()
    ready: dict[str, Ready] = attrs.Factory(dict)
    """What each valid planned call runs, until it starts."""
    returned: dict[str, str] = attrs.Factory(dict)
    """Results of calls that returned, until the machine hears of them
    (``ToolDone``): a turn cut in between still has them (``Stop.returned``)."""
    spans: TurnSpans | None = None
    output: OutputSpec | None = None
    """A typed turn's output (``send(..., output=T)``)."""
    value: object = None
    """The typed turn's answer, read (``output.load``) when the model gave it."""
    again: list[Message] = attrs.Factory(list)
    """Invalid answers and their errors (``AskAgain``): in this turn's requests
    only, never stored."""
    answer_tool: NamedTool | None = None
    """A typed turn of a ``structured_output="tool"`` model: the final-answer
    tool it is offered, whose call is the answer."""

    @classmethod
    def new(
        cls,
        conversation: TurnHost,
        start: int,
        emit: EmitFn | None = None,
        key: str | None = None,
        usage: TokenUsage | None = None,
        output: OutputSpec | None = None,
    ) -> Turn:
        """A turn whose user message is (or will be) ``history[start]``."""
        runtime = conversation.runtime
        settings = runtime.settings
        answer_tool = None
        if output is not None and structured_output_of(runtime.model) == "tool":
            answer_tool = final_answer_tool(output)
        machine = TurnMachine(
            settings.max_tool_rounds,
            settings.max_parallel_tools,
            settings.resume_interrupted,
            output_retries=settings.output_retries,
            output_tool=None if answer_tool is None else FINAL_ANSWER,
        )
        spans = None if runtime.tracing is None else TurnSpans(runtime.tracing)
        writes = TurnWrites(conversation, start)
        return cls(
            conversation,
            machine,
            start,
            writes,
            emit,
            key,
            usage or TokenUsage(),
            spans=spans,
            output=output,
            answer_tool=answer_tool,
        )

    async def begin(self, text: str, parts: tuple[Part, ...] = ()) -> TurnResult:
        result = await self.run(self.machine.handle(Begin(text, self.key, parts)))
        assert result is not None
        return result

    async def resume(self, record: TurnRecord) -> TurnResult:
        """Go on from where the stored turn stopped (``record``: its approvals)."""
        conv = self.conversation
        _, index = conv.runtime.toolsets()

        def plan(call: ToolCall) -> CallPlan:
            return self._plan(call, index, read_back=True)

        event = resume_event(conv.cache.history[self.start :], record, plan)
        result = await self.run(self.machine.handle(event))
        assert result is not None
        return result

    async def check_room(self, text: str) -> None:
        await check_room(self.conversation, text)

    async def record_failure(self, code: str) -> None:
        """Record that the turn ended with ``code`` although it stopped cleanly
        (a paused turn cancelled): a restart then leaves it alone."""
        await self.writes.commit_failure(code)

    async def run(self, actions: list[TurnAction]) -> TurnResult | None:
        """Perform ``actions`` and all that follows, until the turn finishes
        (its result), pauses for approval (a result with status
        ``awaiting_approval``) or has nothing more to do (None: a superseded
        turn). Raises ``TurnError`` when it fails; what it recorded is then
        committed and valid."""
        self.writes.first_new = len(self.conversation.cache.history)
        begins = self.writes.first_new <= self.start  # this run records the user message
        if self.spans is not None:
            self.spans.start_run(self.conversation, self.usage)
        result = None
        try:
            result = await self._drive(actions)
            return result
        finally:
            try:
                error = sys.exc_info()[1]
                interrupted = error is not None and self.conversation.interrupted
                cleanup = cleanup_of(
                    self.machine.state, error, begins=begins, interrupted=interrupted
                )
                if cleanup is not Cleanup.NONE:  # cut short (a clean end has nothing to do)
                    await clean_up(self, cleanup, error)
                await self.writes.settle()
            finally:
                if self.spans is not None:
                    self.spans.end_run(result, sys.exc_info()[1], self.usage)

    async def _drive(self, actions: list[TurnAction]) -> TurnResult | None:
        machine = self.machine
        while True:
            if len(actions) > 2 and several_calls(actions):  # [record, call, call]
                last = await run_together(self, actions)
            else:
                # At most one call to start: it runs in this task, no nursery,
                # no task to start (one call per answer is the common case; 2
                # task steps a turn, tests/agent/test_turn_cost.py).
                runs: list[ToolCall] = []
                last = await self.perform(actions, runs.append)
                if runs:
                    call = runs[0]
                    actions = tell_done(self, call.id, await run_call(self, call))
                    continue
            if isinstance(last, CallModel):
                actions = machine.handle(await self._call_model())
            elif isinstance(last, Finish):
                return await self._result(last.text, ())
            elif isinstance(last, AwaitApproval):
                return await self._result("", last.calls)
            elif isinstance(last, Fail):
                remember_failure(self, last.code)
                await self.writes.commit_failure(last.code)
                raise TurnError(last.message, code=last.code)
            else:  # superseded: nothing follows
                await self.writes.commit()
                return None

    async def perform(
        self, actions: list[TurnAction], start: Callable[[ToolCall], object]
    ) -> TurnAction | None:
        """Perform the records and effects of ``actions`` in order, handing each
        call to start to ``start``. Returns what ends the list (``CallModel``,
        ``Finish``, ``AwaitApproval``, ``Fail``), if anything does."""
        writes = self.writes
        for action in actions:
            # Most frequent first; ``isinstance`` narrows for the type checker
            # (an ``if`` chain: class patterns cost several times more).
            if isinstance(action, Message):
                await writes.record(action)
            elif isinstance(action, _ENDS):
                return action
            elif isinstance(action, RunTool):
                if self.emit is not None:
                    await self.emit(ToolCallStarted(action.call))
                start(action.call)
            elif isinstance(action, Commit):
                await writes.commit()
            elif isinstance(action, Record):
                await writes.record_with(action)
            elif isinstance(action, Activate):
                conversation = self.conversation
                runtime = conversation.runtime
                activate_for_call(
                    runtime.toolsets()[1],
                    conversation.activation,
                    action.toolset,
                    action.by,
                    runtime.tools_budget,
                )
                if self.spans is not None:
                    self.spans.toolsets_changed(self.conversation, action.by)
            elif isinstance(action, Refuse):
                await refuse(self, action)
            elif isinstance(action, AskAgain):
                self.again += (action.answer, action.feedback)
            elif isinstance(action, RecordDecision):
                await writes.record_decision(action)
                if self.emit is not None and action.result is not None:
                    # A streamed decision: the denial is the call's result.
                    call = writes.call(action.call_id)
                    await self.emit(ToolCallFinished(call, action.result.content, is_error=True))
            else:
                raise AssertionError(f"unknown action {action!r}")
        return None

    async def _call_model(self) -> ModelAnswered:
        """Ask the model; its answer as the message to record, with a plan per call."""
        conv = self.conversation
        await conv.check_tenure()  # a node that lost the conversation starts no call
        output = self.output
        request, index, active = await build_request(
            conv, self.start, output, self.again, self.answer_tool
        )
        chat = None if self.spans is None else self.spans.start_chat(conv, active, request)
        response = await ask_model(conv.runtime, request, self.emit, chat)
        usage = response.usage
        if usage is not None:
            self.usage += usage
        calls = response.tool_calls
        message = Message(Role.ASSISTANT, response.text or "", calls, None, usage)
        answered, value = read_answer(
            message, output, self.answer_tool, lambda call: self._plan(call, index)
        )
        if value is not NOT_READ:
            self.value = value
        return answered

    def _plan(self, call: ToolCall, index: ToolsetIndex, *, read_back: bool = False) -> CallPlan:
        conv = self.conversation
        plan, ready = plan_call(
            conv.runtime, conv.conversation_id, call, index, read_back=read_back
        )
        if ready is not None:
            self.ready[call.id] = ready
        return plan

    async def _result(self, text: str, waiting: Sequence[ToolCall]) -> TurnResult:
        if not waiting and self.output is not None:
            stored = await self.writes.commit_output()
        else:
            stored = await self.writes.commit()
        if not waiting:
            return TurnResult(text, stored, self.usage, output=self.value)
        cid = self.conversation.conversation_id
        self.conversation.runtime.stats.approvals_requested += len(waiting)
        return TurnResult(
            "",
            stored,
            self.usage,
            status="awaiting_approval",
            approvals=tuple(ApprovalRequest(cid, call) for call in waiting),
        )
