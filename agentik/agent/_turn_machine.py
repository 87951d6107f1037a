"""One turn as a pure state machine: events in, actions out.

The conversation task is the shell: it feeds ``TurnMachine.handle`` what
happened and performs, in order, the actions it returns. The machine does no
I/O, reads no clock, awaits nothing and imports neither trio nor storage (as
h11 keeps HTTP apart from sockets), so every transition is tested without an
event loop (tests/agent/test_turn_machine.py).

The whole table (``_settle`` is "what next": the next call waiting to run,
else the calls waiting for a person, else the step limit, else the model)::

    state      event                   actions                               next
    ---------  ----------------------  ------------------------------------  ---------
    NEW        Begin(text, key)        Record(user), CallModel               MODEL
    NEW        Resume(steps, calls..)  Record(interrupted) for calls that
                                       cannot run again, then _settle        (settle)
    MODEL      ModelAnswered, no call  Record(answer), Finish                FINISHED
    MODEL      ModelAnswered, calls    Record(assistant + calls, awaiting
                                       the ones needing approval and valid;
                                       an invalid call is queued to be
                                       refused, never asked about), _settle  (settle)
    TOOLS      ToolDone(call id)       Record(result), _settle               (settle)
    APPROVAL   Decided(id, approve)    RecordDecision; AwaitApproval(rest)   APPROVAL
                                       or, the last decision, _settle (the   (settle)
                                       approved calls now run)
    APPROVAL   Decided(id, deny)       RecordDecision(with the result
                                       denied: ..); as above
    APPROVAL   Superseded(reason)      RecordDecision(denied: ..) per
                                       waiting call, Record(not run: ..)
                                       per approved one                      SUPERSEDED
    MODEL,     Stop(code, message)     Record(stopped) per open call, Fail   FAILED
    TOOLS
    (settle)                           Refuse(each invalid call at the head
                                       of the queue), then:
                                       RunTool(next runnable call)           TOOLS
                                       AwaitApproval(waiting calls)          APPROVAL
                                       Fail(step_limit)                      FAILED
                                       CallModel                             MODEL

``Record(m)`` is returned as the bare message ``m`` when it has no key and no
waiting calls (most records: no wrapper to build). Any other (state, event)
pair raises ``TurnStateError``: nothing happens after
FINISHED, FAILED or SUPERSEDED.

Invariants (checked over random walks by the tests):
- every tool call the machine records gets exactly one result, recorded after
  it, whatever the order of events, unless the turn is waiting for approval
  (then exactly the waiting calls have none);
- at most ``max_steps`` model calls;
- calls run one at a time, in the model's order; calls needing approval run
  only once every waiting call is decided, and a denied call never runs;
- a call whose plan says its arguments are invalid (``CallPlan.invalid``)
  never runs and never waits for a person: its one result is that error
  (``Refuse``), in the model's order among the calls that run;
- a call runs at most once per turn, twice only when a crash interrupted it
  and it is declared idempotent (``Resume``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TypeAlias, final

import attrs

from agentik._messages import Message, Role, ToolCall

STOPPED = "error: the turn was stopped before this tool call finished"
INTERRUPTED = "interrupted: the process stopped before this call finished"
SUPERSEDED_REASON = "the user sent a new message"


def denied(reason: str) -> str:
    """The tool result of a denied call: an error result the model sees."""
    return f"denied: {reason}" if reason else "denied"


class TurnState(enum.Enum):
    NEW = "new"
    MODEL = "model"
    """Waiting for the model's answer."""
    TOOLS = "tools"
    """Waiting for a tool call's result."""
    APPROVAL = "approval"
    """Paused: every call that can run has run; the rest wait for a person."""
    FINISHED = "finished"
    FAILED = "failed"
    SUPERSEDED = "superseded"
    """Was waiting for approval when a new user message came: its waiting calls
    were denied and the new message starts a new turn."""


FINAL_STATES = frozenset({TurnState.FINISHED, TurnState.FAILED, TurnState.SUPERSEDED})


class TurnStateError(Exception):
    """An event the turn cannot take in its state (a bug in the shell, or a
    decision about a call that is not waiting)."""


def _calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


def _plans(value: Iterable[CallPlan]) -> tuple[CallPlan, ...]:
    return tuple(value)


# --- what the shell tells the machine ------------------------------------------


@final
@attrs.frozen
class CallPlan:
    """A tool call as the shell found it when the model sent it: whether it
    needs a person's approval, and whether running it twice is harmless."""

    call: ToolCall
    needs_approval: bool = False
    idempotent: bool = False
    invalid: str | None = None
    """Why the call cannot run (its arguments do not match its tool's
    schema), as the error result the model is to see; None when it can.
    A person is never asked about such a call."""


@final
@attrs.frozen
class Begin:
    """A user message starts the turn."""

    text: str
    idempotency_key: str | None = None


@final
@attrs.frozen
class Resume:
    """The turn's committed state, read back from storage after a restart or a
    cut-short run: ``steps`` model calls made; ``calls`` of the last assistant
    message that have no result yet; of those, ``awaiting`` wait for a decision
    and ``approved`` were approved (and may have been running)."""

    steps: int
    calls: tuple[CallPlan, ...] = attrs.field(default=(), converter=_plans)
    awaiting: frozenset[str] = frozenset()
    approved: frozenset[str] = frozenset()


@final
@attrs.frozen
class ModelAnswered:
    """The model's answer: text, and the calls it made (with their plans)."""

    message: Message
    """The assistant message to record (its ``tool_calls`` are the plans' calls)."""
    plans: tuple[CallPlan, ...] = ()
    """One per call of ``message``, in order (a tuple: no converter on this path)."""


@final
@attrs.frozen
class ToolDone:
    """A call the machine asked to run has its result."""

    call_id: str
    content: str


@final
@attrs.frozen
class Decided:
    """A person's decision about a call waiting for approval."""

    call_id: str
    approve: bool
    reason: str = ""


@final
@attrs.frozen
class Superseded:
    """A new user message arrived while this turn waits for approval."""

    reason: str = SUPERSEDED_REASON


@final
@attrs.frozen
class Stop:
    """The turn cannot go on (the model failed, it was cancelled, a write
    failed): answer what is open and fail with ``code``."""

    code: str
    message: str


TurnEvent: TypeAlias = Begin | Resume | ModelAnswered | ToolDone | Decided | Superseded | Stop


# --- what the machine tells the shell ------------------------------------------


@final
@attrs.frozen
class Record:
    """Store this message (with the turn's idempotency key for the user message;
    with ``awaiting`` set, the call ids that now wait for approval, stored
    with it atomically)."""

    message: Message
    idempotency_key: str | None = None
    awaiting: tuple[str, ...] = ()


@final
@attrs.frozen
class RecordDecision:
    """Store a person's decision about a waiting call (before acting on it),
    with ``result``, a denied call's tool result, in the same write."""

    call_id: str
    approve: bool
    reason: str = ""
    result: Message | None = None


@final
@attrs.frozen
class CallModel:
    """Ask the model, with the history as recorded so far."""


@final
@attrs.frozen
class RunTool:
    """Run this call and feed back ``ToolDone``; ``again`` when a crash
    interrupted an earlier run of it."""

    call: ToolCall
    again: bool = False


@final
@attrs.frozen
class Refuse:
    """Record ``result``, the error result of ``call``, which will not run (its
    plan said why: ``CallPlan.invalid``)."""

    call: ToolCall
    result: Message


@final
@attrs.frozen
class AwaitApproval:
    """Pause: these calls wait for a decision (everything else is recorded)."""

    calls: tuple[ToolCall, ...] = attrs.field(converter=_calls)


@final
@attrs.frozen
class Finish:
    """The turn ended with this answer; commit what was recorded and report it."""

    text: str


@final
@attrs.frozen
class Fail:
    """The turn ended without an answer; what it recorded is valid."""

    code: str
    message: str


TurnAction: TypeAlias = (
    Message | Record | RecordDecision | CallModel | RunTool | Refuse | AwaitApproval | Finish | Fail
)
"""A bare ``Message`` means: record it (the common case, with no wrapper to build)."""

_CALL_MODEL = CallModel()


@final
@attrs.define
class TurnMachine:
    """The state of one turn; see the module docstring for its table."""

    max_steps: int
    state: TurnState = TurnState.NEW
    steps: int = 0
    """Model calls asked for so far."""
    queue: list[CallPlan] = attrs.Factory(list)
    """Calls to run, in the model's order (``again`` for the re-runs)."""
    running: ToolCall | None = None
    """The call whose result the machine waits for."""
    rerun: set[str] = attrs.Factory(set)
    """Queued calls that a crash interrupted (run again)."""
    waiting: dict[str, ToolCall] = attrs.Factory(dict)
    """Calls waiting for a decision, by id, in the model's order."""
    approved: list[ToolCall] = attrs.Factory(list)
    """Approved calls waiting for the other decisions before they run."""
    decisions: dict[str, bool] = attrs.Factory(dict)
    """Decisions taken in this turn, by call id."""

    def handle(self, event: TurnEvent) -> list[TurnAction]:
        """Take one event; return what the shell must do, in order. (The shell's
        hot path calls the method of each event directly: same transitions,
        no event object.)"""
        if isinstance(event, Begin):
            return self.begin(event.text, event.idempotency_key)
        if isinstance(event, ModelAnswered):
            return self.answered(event.message, event.plans)
        if isinstance(event, ToolDone):
            return self.tool_done(event.call_id, event.content)
        if isinstance(event, Decided):
            return self.decide(event.call_id, event.approve, event.reason)
        if isinstance(event, Superseded):
            return self.supersede(event.reason)
        if isinstance(event, Stop):
            return self.stop(event.code, event.message)
        return self.resume(event)

    def _refuse(self, event: str) -> TurnStateError:
        return TurnStateError(f"a turn in state {self.state.value} cannot take {event}")

    def begin(self, text: str, idempotency_key: str | None = None) -> list[TurnAction]:
        """``Begin``."""
        if self.state is not TurnState.NEW:
            raise self._refuse("Begin")
        self.steps = 1
        self.state = TurnState.MODEL
        user = Message(Role.USER, text)
        return [user if idempotency_key is None else Record(user, idempotency_key), _CALL_MODEL]

    def resume(self, event: Resume) -> list[TurnAction]:
        """``Resume``."""
        if self.state is not TurnState.NEW:
            raise self._refuse("Resume")
        return self._resume(event)

    def answered(self, message: Message, plans: tuple[CallPlan, ...] = ()) -> list[TurnAction]:
        """``ModelAnswered``."""
        if self.state is not TurnState.MODEL:
            raise self._refuse("ModelAnswered")
        calls = message.tool_calls
        if message.role is not Role.ASSISTANT or len(calls) != len(plans):
            raise TurnStateError(
                "the answer must be an assistant message carrying the plans' calls"
            )
        if not plans:
            self.state = TurnState.FINISHED
            return [message, Finish(message.content)]
        if len(plans) == 1 and not plans[0].needs_approval and plans[0].invalid is None:
            # The common case, the rest of this and _settle written out.
            call = plans[0].call
            self.running = call
            self.state = TurnState.TOOLS
            return [message, RunTool(call)]
        awaiting = []
        for plan in plans:
            # Invalid arguments first: a person is asked only about a call
            # that could run as it stands (the queue refuses it in order).
            if plan.needs_approval and plan.invalid is None:
                self.waiting[plan.call.id] = plan.call
                awaiting.append(plan.call.id)
            else:
                self.queue.append(plan)
        first: TurnAction = Record(message, awaiting=tuple(awaiting)) if awaiting else message
        return [first, *self._settle()]

    def tool_done(self, call_id: str, content: str) -> list[TurnAction]:
        """``ToolDone``."""
        if self.state is not TurnState.TOOLS:
            raise self._refuse("ToolDone")
        running = self.running
        if running is None or running.id != call_id:
            raise TurnStateError(f"no result expected for call {call_id!r}")
        self.running = None
        result = Message(Role.TOOL, content, tool_call_id=call_id)
        if not self.queue and not self.waiting and self.steps < self.max_steps:
            self.steps += 1  # the common case, _settle written out: ask the model
            self.state = TurnState.MODEL
            return [result, _CALL_MODEL]
        return [result, *self._settle()]

    def decide(self, call_id: str, approve: bool, reason: str = "") -> list[TurnAction]:
        """``Decided``."""
        return self._decided(call_id, approve, reason)

    def supersede(self, reason: str = SUPERSEDED_REASON) -> list[TurnAction]:
        """``Superseded``."""
        if self.state is not TurnState.APPROVAL:
            raise self._refuse("Superseded")
        out: list[TurnAction] = [_denial(call_id, reason) for call_id in self.waiting]
        # Approved, but waiting for the others to be decided: never ran.
        out += [_result(c.id, f"error: not run: {reason}") for c in self.approved]
        self.waiting.clear()
        self.approved.clear()
        self.state = TurnState.SUPERSEDED
        return out

    def stop(self, code: str, message: str) -> list[TurnAction]:
        """``Stop``."""
        if self.state is not TurnState.MODEL and self.state is not TurnState.TOOLS:
            raise self._refuse("Stop")
        return self._stop(code, message)

    # --- transitions ----------------------------------------------------------

    def _resume(self, event: Resume) -> list[TurnAction]:
        if not 0 <= event.steps <= self.max_steps:
            raise TurnStateError(f"steps must be 0..{self.max_steps}, got {event.steps}")
        self.steps = event.steps
        # While some call still waits, the approved ones have not started
        # (they run once all are decided); otherwise any open call may have
        # been running when the process stopped.
        still_waiting = any(p.call.id in event.awaiting for p in event.calls)
        out: list[TurnAction] = []
        for plan in event.calls:
            call = plan.call
            if call.id in event.awaiting:
                self.waiting[call.id] = call
            elif call.id in event.approved and still_waiting:
                self.decisions[call.id] = True
                self.approved.append(call)
            elif plan.invalid is not None:
                self.queue.append(plan)  # refused again: it never ran
            elif plan.idempotent:
                self.queue.append(plan)
                self.rerun.add(call.id)
            else:
                out.append(_result(call.id, INTERRUPTED))
        return [*out, *self._settle()]

    def _decided(self, call_id: str, approve: bool, reason: str) -> list[TurnAction]:
        earlier = self.decisions.get(call_id)
        if earlier is not None:
            if earlier == approve:
                return []  # the same decision again: nothing to do
            raise TurnStateError(
                f"call {call_id!r} was already {'approved' if earlier else 'denied'}"
            )
        if self.state is not TurnState.APPROVAL or call_id not in self.waiting:
            raise TurnStateError(f"call {call_id!r} is not waiting for approval")
        call = self.waiting.pop(call_id)
        self.decisions[call_id] = approve
        out: list[TurnAction]
        if approve:
            out = [RecordDecision(call_id, True, reason)]
            self.approved.append(call)  # runs once every waiting call is decided
        else:
            out = [_denial(call_id, reason)]
        if self.waiting:
            return [*out, AwaitApproval(self.waiting.values())]
        self.queue += (CallPlan(c) for c in self.approved)
        self.approved.clear()
        return [*out, *self._settle()]

    def _stop(self, code: str, message: str) -> list[TurnAction]:
        out: list[TurnAction] = []
        if self.running is not None:
            out.append(_result(self.running.id, STOPPED))
            self.running = None
        out += [_result(p.call.id, STOPPED) for p in self.queue]
        out += [_result(call_id, STOPPED) for call_id in self.waiting]
        out += [_result(c.id, STOPPED) for c in self.approved]
        self.queue.clear()
        self.waiting.clear()
        self.approved.clear()
        self.state = TurnState.FAILED
        return [*out, Fail(code, message)]

    def _settle(self) -> list[TurnAction]:
        out: list[TurnAction] = []
        queue = self.queue
        while queue:
            plan = queue.pop(0)
            call = plan.call
            if plan.invalid is not None:
                out.append(Refuse(call, _result(call.id, plan.invalid)))
                continue
            self.running = call
            self.state = TurnState.TOOLS
            out.append(RunTool(call, call.id in self.rerun))
            return out
        if self.waiting:
            self.state = TurnState.APPROVAL
            out.append(AwaitApproval(self.waiting.values()))
            return out
        if self.steps >= self.max_steps:
            self.state = TurnState.FAILED
            out.append(
                Fail(
                    "step_limit",
                    f"the turn stopped after {self.max_steps} model calls without an answer"
                    " (max_tool_rounds); every tool call made has its result",
                )
            )
            return out
        self.steps += 1
        self.state = TurnState.MODEL
        out.append(_CALL_MODEL)
        return out


def _denial(call_id: str, reason: str) -> RecordDecision:
    result = Message(Role.TOOL, denied(reason), tool_call_id=call_id)
    return RecordDecision(call_id, False, reason, result)


def _result(call_id: str, content: str) -> Message:
    return Message(Role.TOOL, content, tool_call_id=call_id)
