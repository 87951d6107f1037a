"""One turn as a pure state machine: events in, actions out.

The conversation task is the shell (``_turn.Turn``): it feeds
``TurnMachine.handle`` what happened and performs, in order, the actions it
returns; it decides nothing. The machine does no I/O, reads no clock, awaits
nothing and imports neither trio nor storage (as h11 keeps HTTP apart from
sockets), so every transition is tested without an event loop
(tests/agent/test_turn_machine.py).

``TRANSITIONS`` below is the table, as data: for each state the events it
takes, the method that takes each, and the states that may follow. Any other
(state, event) pair raises ``TurnStateError``: nothing happens after
FINISHED, FAILED or SUPERSEDED. In words::

    state     event          actions                                      next
    --------  -------------  -------------------------------------------  ---------
    NEW       Begin          Record(user), CallModel                      MODEL
    NEW       Resume         the open calls: those that wait keep         (settle)
                             waiting; the others run again (idempotent,
                             ``rerun``) or are answered ``interrupted``
    MODEL     ModelAnswered  no call: Record(answer), Finish              FINISHED
                             no call, its output invalid: AskAgain,       MODEL
                             CallModel while ``output_retries`` last,
                             else Fail(invalid_output)                    FAILED
                             (``output_tool``: the answer is a call of
                             that tool, alone: valid, Record(it, a result,
                             its JSON as the final answer), Finish; its
                             arguments invalid, or text, or the call
                             beside others (refused, the others run):
                             as an invalid output)
                             calls: Record(assistant + calls, with the
                             ids that wait for a person), then (run)      TOOLS..
    MODEL     Stop           Fail(code)                                   FAILED
    TOOLS     ToolDone       the results now in call order, (run)         TOOLS..
    TOOLS     Stop           a result per open call (its own, if it       FAILED
                             returned), Fail(code)
    APPROVAL  Decided        RecordDecision; the last decision: (run)     APPROVAL..
                             the approved calls, denied ones answered
                             ``denied: ..`` with their decision
    APPROVAL  Superseded     RecordDecision(denied) per waiting call,
                             a ``not run`` result per approved one        SUPERSEDED

``(run)`` works through the *batch*: the calls of one answer that run now,
in call order (an answer's calls less those that wait for a person; or the
approved ones once every waiting call is decided). It starts calls in call
order, each with ``RunTool``, while fewer than ``max_parallel`` run, none
that runs is ``sequential`` and the next is not ``sequential`` with calls
still running (a sequential call runs alone: after the calls before it,
before the calls after it). Before a call starts: ``Activate(toolset)`` when
its name belongs to a toolset (activations take effect in call order), and
``Commit`` when what it depends on may not be durable yet (its assistant
message, for a call that is not idempotent: write-ahead; its approval, for an
approved call). A call whose arguments are invalid does not run: it is
``Refuse``d when its turn to start comes, its error as its result. Results
are recorded in call order whatever order the calls finish in (a result
waits for the results of the calls before it). When the batch is all
recorded, ``(settle)``:

    the calls waiting for a person         AwaitApproval             APPROVAL
    else ``max_steps`` model calls made    Fail(step_limit)          FAILED
    else                                   CallModel                 MODEL

A turn stops short (``Stop``) for a ``Failure``; ``FAILURE_CODES`` names the
code of each, but a failure a component reported with its own code
(``Failure.REPORTED``: the model's backend, a prompt contributor) keeps it.

Invariants (checked over random walks by the tests):
- every tool call the machine records gets exactly one result, recorded after
  it, whatever the order of events, unless the turn is waiting for approval
  (then exactly the waiting calls have none);
- the results of a batch are recorded in call order;
- at most ``max_steps`` model calls;
- an answer whose output is invalid is never recorded: at most
  ``output_retries`` times the model is asked again, then the turn fails;
- at most ``max_parallel`` calls run at once; a sequential call never runs
  beside another call of its answer; calls needing approval run only once
  every waiting call is decided, and a denied call never runs;
- a call that is not idempotent starts only once its call is committed
  (``Commit`` since it was recorded), an approved call once its approval is;
- a call whose plan says its arguments are invalid (``CallPlan.invalid``)
  never runs and never waits for a person: its one result is that error;
- a call runs at most once per turn, twice only when a crash interrupted it
  and it is declared idempotent (``Resume``);
- ``RunTool`` actions never share a list with ``CallModel``, ``Finish``,
  ``Fail`` or ``AwaitApproval``, and those come last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, final

import attrs

from agentik._messages import Message, Role, ToolCall
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
from agentik.agent._turn_events import (
    ANSWER_RECEIVED,
    FAILURE_CODES,
    INTERRUPTED,
    INVALID_OUTPUT,
    STEP_LIMIT,
    STOPPED,
    SUPERSEDED_REASON,
    Begin,
    CallPlan,
    Decided,
    Failure,
    MachineEvent,
    ModelAnswered,
    Resume,
    Stop,
    Superseded,
    ToolDone,
    TurnState,
    TurnStateError,
    denied,
    output_feedback,
)

_CALL_MODEL: Final = CallModel()
_COMMIT: Final = Commit()

_S = TurnState
_SETTLED: Final = frozenset({_S.TOOLS, _S.APPROVAL, _S.MODEL, _S.FAILED})
"""Where ``(run)`` and ``(settle)`` may lead."""

TRANSITIONS: Final[Mapping[tuple[TurnState, type], tuple[str, frozenset[TurnState]]]] = {
    (_S.NEW, Begin): ("_begin", frozenset({_S.MODEL})),
    (_S.NEW, Resume): ("_resume", _SETTLED),
    (_S.MODEL, ModelAnswered): ("_answered", _SETTLED | {_S.FINISHED}),
    (_S.MODEL, Stop): ("_stop", frozenset({_S.FAILED})),
    (_S.TOOLS, ToolDone): ("_tool_done", _SETTLED),
    (_S.TOOLS, Stop): ("_stop", frozenset({_S.FAILED})),
    (_S.APPROVAL, Decided): ("_decided", _SETTLED),
    (_S.APPROVAL, Superseded): ("_superseded", frozenset({_S.SUPERSEDED})),
}
"""(state, event type) -> (the method that takes it, the states that may follow)."""


@final
@attrs.define
class TurnMachine:
    """The state of one turn; see the module docstring for its table."""

    max_steps: int
    max_parallel: int = 1
    """Calls of one batch running at once, at most."""
    rerun: bool = True
    """On ``Resume``, an idempotent call a crash cut short runs again (else it
    is answered ``interrupted``, as every other such call is)."""
    output_retries: int = attrs.field(default=0, kw_only=True)
    """A typed turn: how many times an invalid answer is sent back to the model."""
    output_tries: int = attrs.field(default=0, kw_only=True)
    """Invalid answers sent back so far."""
    output_tool: str | None = attrs.field(default=None, kw_only=True)
    """A typed turn whose answer is a call of this tool (the model's
    ``structured_output="tool"``), alone in its answer; else None."""
    state: TurnState = TurnState.NEW
    steps: int = 0
    """Model calls asked for so far."""
    batch: list[CallPlan] = attrs.Factory(list)
    """The calls that run now, in call order (see the module docstring)."""
    started: int = 0
    """``batch[:started]`` have started, been refused, or been answered."""
    recorded: int = 0
    """``batch[:recorded]`` have their results recorded."""
    running: dict[str, CallPlan] = attrs.Factory(dict)
    """Started calls without a result yet."""
    alone: str | None = None
    """The sequential call running, if one is: nothing else starts meanwhile."""
    done: dict[str, str] = attrs.Factory(dict)
    """Results of batch calls not recorded yet (a call before them has none)."""
    rerun_ids: set[str] = attrs.Factory(set)
    """Batch calls that a crash interrupted (run again)."""
    durable: bool = True
    """Everything a call may depend on (its assistant message, its approval,
    the decisions of the calls it waited with) is committed: set by
    ``Commit``, cleared by recording such a record."""
    waiting: dict[str, ToolCall] = attrs.Factory(dict)
    """Calls waiting for a decision, by id, in call order."""
    approved: set[str] = attrs.Factory(set)
    """Approved calls waiting for the other decisions before they run."""
    plans: dict[str, CallPlan] = attrs.Factory(dict)
    """The plans of the waiting and approved calls, in call order."""
    decisions: dict[str, bool] = attrs.Factory(dict)
    """Decisions taken in this turn, by call id."""

    def handle(self, event: MachineEvent) -> list[TurnAction]:
        """Take one event (``TRANSITIONS``); return what the shell must do, in order."""
        row = _TAKES.get((self.state, type(event)))
        if row is None:
            name = type(event).__name__
            raise TurnStateError(f"a turn in state {self.state.value} cannot take {name}")
        take, next_states = row
        actions = take(self, event)
        if self.state not in next_states:
            raise AssertionError(f"{take.__name__} led to {self.state}, not one of {next_states}")
        return actions

    # Named entry points for the shell, each through ``handle``.

    def begin(self, text: str, idempotency_key: str | None = None) -> list[TurnAction]:
        return self.handle(Begin(text, idempotency_key))

    def resume(self, event: Resume) -> list[TurnAction]:
        return self.handle(event)

    def supersede(self, reason: str = SUPERSEDED_REASON) -> list[TurnAction]:
        return self.handle(Superseded(reason))

    # --- transitions (``TRANSITIONS``) ------------------------------------------

    def _begin(self, event: Begin) -> list[TurnAction]:
        self.steps = 1
        self.state = TurnState.MODEL
        user = Message(Role.USER, event.text, parts=event.parts)
        key = event.idempotency_key
        return [user if key is None else Record(user, key), _CALL_MODEL]

    def _resume(self, event: Resume) -> list[TurnAction]:
        if event.steps < 0:
            raise TurnStateError(f"steps must be >= 0, got {event.steps}")
        # A turn stored with more model calls than the limit allows now (it was
        # lowered since) is at the limit: it answers its calls and fails.
        self.steps = min(event.steps, self.max_steps)
        # While some call still waits, the approved ones have not started
        # (they run once all are decided); otherwise any open call may have
        # been running when the process stopped.
        still_waiting = any(p.call.id in event.awaiting for p in event.calls)
        batch: list[CallPlan] = []
        for plan in event.calls:
            call_id = plan.call.id
            if call_id in event.awaiting:
                self.waiting[call_id] = plan.call
                self.plans[call_id] = plan
            elif call_id in event.approved and still_waiting:
                self.decisions[call_id] = True
                self.approved.add(call_id)
                self.plans[call_id] = plan
            else:
                batch.append(plan)
                if plan.invalid is not None:
                    pass  # refused again: it never ran
                elif plan.idempotent and self.rerun:
                    self.rerun_ids.add(call_id)
                else:
                    self.done[call_id] = INTERRUPTED
        return self._run(batch)

    def _answered(self, event: ModelAnswered) -> list[TurnAction]:
        message, plans = event.message, event.plans
        if message.role is not Role.ASSISTANT or len(message.tool_calls) != len(plans):
            raise TurnStateError(
                "the answer must be an assistant message carrying the plans' calls"
            )
        tool = self.output_tool
        if tool is not None:
            if not plans:
                error = f"the answer is text, not a call of the tool {tool}"
                return self._invalid_output(message, error)
            if len(plans) == 1 and plans[0].call.name == tool:
                return self._final_call(event, plans[0].call.id)
            # Beside other calls it is refused (they may change the answer).
            refused = f"error: call {tool} alone, once your other calls have their results"
            plans = tuple(
                attrs.evolve(p, invalid=refused) if p.call.name == tool else p for p in plans
            )
        elif not plans:
            if event.invalid_output is not None:
                return self._invalid_output(message, event.invalid_output)
            self.state = TurnState.FINISHED
            return [message, Finish(message.content)]
        batch: list[CallPlan] = []
        for plan in plans:
            if plan.waits:
                self.waiting[plan.call.id] = plan.call
                self.plans[plan.call.id] = plan
            else:
                batch.append(plan)
        self.durable = False  # the calls, just recorded
        awaiting = tuple(self.waiting)
        first: TurnAction = Record(message, awaiting=awaiting) if awaiting else message
        return [first, *self._run(batch)]

    def _tool_done(self, event: ToolDone) -> list[TurnAction]:
        call_id = event.call_id
        if self.running.pop(call_id, None) is None:
            raise TurnStateError(f"no result expected for call {call_id!r}")
        if self.alone == call_id:
            self.alone = None
        self.done[call_id] = event.content
        return self._advance()

    def _decided(self, event: Decided) -> list[TurnAction]:
        call_id, approve, reason = event.call_id, event.approve, event.reason
        earlier = self.decisions.get(call_id)
        if earlier is not None:
            if earlier == approve:
                return []  # the same decision again: nothing to do
            raise TurnStateError(
                f"call {call_id!r} was already {'approved' if earlier else 'denied'}"
            )
        if call_id not in self.waiting:
            raise TurnStateError(f"call {call_id!r} is not waiting for approval")
        del self.waiting[call_id]
        self.decisions[call_id] = approve
        out: list[TurnAction]
        if approve:
            out = [RecordDecision(call_id, True, reason)]
            self.approved.add(call_id)  # runs once every waiting call is decided
        else:
            out = [denial(call_id, reason)]
        # Either decision, just recorded: an approved call may start only once
        # it is durable. Lost in a crash, a restart would see a call still
        # waiting and take the approved ones for not started, and run them again.
        self.durable = False
        if self.waiting:
            return [*out, AwaitApproval(self.waiting.values())]
        batch = [p for i, p in self.plans.items() if i in self.approved]
        self.approved.clear()
        self.plans.clear()
        return [*out, *self._run(batch)]

    def _superseded(self, event: Superseded) -> list[TurnAction]:
        reason = event.reason
        out: list[TurnAction] = [denial(call_id, reason) for call_id in self.waiting]
        # Approved, but waiting for the others to be decided: never ran.
        out += [_result(i, f"error: not run: {reason}") for i in self.plans if i in self.approved]
        self.waiting.clear()
        self.approved.clear()
        self.plans.clear()
        self.state = TurnState.SUPERSEDED
        return out

    def _stop(self, event: Stop) -> list[TurnAction]:
        code = _code(event)
        for returned in event.returned:
            if self.running.pop(returned.call_id, None) is not None:
                self.done[returned.call_id] = returned.content
        # Results known but not recorded yet (a call before them still ran)
        # are recorded as they are; every other open call is stopped (or, the
        # agent having shut down, interrupted: resumed at the next start).
        answer = INTERRUPTED if event.failure is Failure.INTERRUPTED else STOPPED
        out: list[TurnAction] = [
            _result(p.call.id, self.done.get(p.call.id, answer))
            for p in self.batch[self.recorded :]
        ]
        waited = self.waiting.keys() | self.approved
        out += [_result(call_id, answer) for call_id in self.plans if call_id in waited]
        self._clear_batch([])
        self.waiting.clear()
        self.approved.clear()
        self.plans.clear()
        self.state = TurnState.FAILED
        return [*out, Fail(code, event.message)]

    def _final_call(self, event: ModelAnswered, call_id: str) -> list[TurnAction]:
        """The lone final-answer call: the answer, or an invalid one. The call
        is answered and the answer's JSON follows as the final text (what a
        keyed retry reads back), so history stays valid."""
        if event.invalid_output is not None:
            return self._invalid_output(event.message, event.invalid_output, call_id)
        text = event.output_text
        if text is None:
            raise TurnStateError("a valid final-answer call needs its output_text")
        self.state = TurnState.FINISHED
        answer = Message(Role.ASSISTANT, text)
        return [event.message, _result(call_id, ANSWER_RECEIVED), answer, Finish(text)]

    def _invalid_output(
        self, answer: Message, error: str, call_id: str | None = None
    ) -> list[TurnAction]:
        """Ask again while retries (and model calls) last; else fail. The bad
        answer is never recorded: history holds only a valid one. A bad
        final-answer call (``call_id``) is answered with the error, so the
        request that follows stays valid."""
        if self.output_tries < self.output_retries and self.steps < self.max_steps:
            self.output_tries += 1
            self.steps += 1
            feedback = output_feedback(error, self.output_tool)
            told = (
                Message(Role.USER, feedback)
                if call_id is None
                else _result(call_id, f"error: {feedback}")
            )
            return [AskAgain(answer, told), _CALL_MODEL]
        self.state = TurnState.FAILED
        tries = self.output_tries + 1
        return [
            Fail(
                INVALID_OUTPUT,
                f"the model's answer did not match the output schema after {tries}"
                f" {'try' if tries == 1 else 'tries'} (output_retries={self.output_retries}):"
                f" {error}",
            )
        ]

    # --- the batch: (run) and (settle) -------------------------------------------

    def _run(self, batch: list[CallPlan]) -> list[TurnAction]:
        """Start working through a new batch (see the module docstring)."""
        self._clear_batch(batch)
        self.state = TurnState.TOOLS
        return self._advance()

    def _clear_batch(self, batch: list[CallPlan]) -> None:
        self.batch = batch
        self.started = self.recorded = 0
        self.running.clear()
        self.alone = None

    def _advance(self) -> list[TurnAction]:
        """Record the results now in call order, start what may start; settle
        once the whole batch is recorded."""
        out = self._flush()
        out += self._start()
        if self.recorded == len(self.batch):
            self.done.clear()
            self.rerun_ids.clear()
            out += self._settle()
        return out

    def _flush(self) -> list[TurnAction]:
        out: list[TurnAction] = []
        batch, done = self.batch, self.done
        while self.recorded < self.started:
            call_id = batch[self.recorded].call.id
            if call_id not in done:
                break
            out.append(_result(call_id, done.pop(call_id)))
            self.recorded += 1
        return out

    def _start(self) -> list[TurnAction]:
        out: list[TurnAction] = []
        batch, running = self.batch, self.running
        while self.started < len(batch) and self.alone is None:
            plan = batch[self.started]
            call = plan.call
            if call.id in self.done:  # answered on resume: nothing starts
                self.started += 1
                out += self._flush()
                continue
            if plan.sequential and running:
                break  # it waits for the calls before it
            if len(running) >= self.max_parallel:
                break
            self.started += 1
            if plan.invalid is not None:
                if plan.toolset is not None:  # the name alone switches it on
                    out.append(Activate(plan.toolset, call.name))
                out.append(Refuse(call, plan.invalid))
                self.done[call.id] = plan.invalid
                out += self._flush()
                continue
            if not self.durable and (not plan.idempotent or call.id in self.decisions):
                out.append(_COMMIT)
                self.durable = True
            if plan.toolset is not None:
                out.append(Activate(plan.toolset, call.name))
            running[call.id] = plan
            if plan.sequential:
                self.alone = call.id
            out.append(RunTool(call, call.id in self.rerun_ids))
        return out

    def _settle(self) -> list[TurnAction]:
        if self.waiting:
            self.state = TurnState.APPROVAL
            return [AwaitApproval(self.waiting.values())]
        if self.steps >= self.max_steps:
            self.state = TurnState.FAILED
            return [
                Fail(
                    STEP_LIMIT,
                    f"the turn stopped after {self.max_steps} model calls without an answer"
                    " (max_tool_rounds); every tool call made has its result",
                )
            ]
        self.steps += 1
        self.state = TurnState.MODEL
        return [_CALL_MODEL]


_TAKES: Final[
    Mapping[
        tuple[TurnState, type],
        tuple[Callable[[TurnMachine, Any], list[TurnAction]], frozenset[TurnState]],
    ]
] = {key: (getattr(TurnMachine, method), after) for key, (method, after) in TRANSITIONS.items()}
"""``TRANSITIONS`` with each method looked up once."""


def _code(stop: Stop) -> str:
    if stop.failure is not Failure.REPORTED:
        return FAILURE_CODES[stop.failure]
    if stop.code is None:
        raise TurnStateError("a reported failure needs its code")
    return stop.code


def denial(call_id: str, reason: str) -> RecordDecision:
    """Call ``call_id`` denied for ``reason``, with its ``denied: ..`` result."""
    return RecordDecision(call_id, False, reason, _result(call_id, denied(reason)))


def _result(call_id: str, content: str) -> Message:
    return Message(Role.TOOL, content, (), call_id)  # positional: a test pins the order
