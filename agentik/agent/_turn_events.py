"""What a turn machine (``_turn_machine``) takes and knows: its states, the
events the shell feeds it, each call's plan, the failures and their codes,
and the texts of the results it records (fixed, or ``denied`` and
``output_feedback`` filling in a reason). Values only: the machine's
transitions are in ``_turn_machine``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Final, TypeAlias, final

import attrs

from agentik._messages import Message, ToolCall
from agentik._parts import Part

STOPPED = "error: the turn was stopped before this tool call finished"
INTERRUPTED = "interrupted: the process stopped before this call finished"
UNRECORDED = (
    "error: the turn failed before this call's result was stored; it may or may not have run"
)
"""An open call of a turn that failed (its failure recorded or remembered)
whose own ``STOPPED`` answer could not be stored (the storage was failing):
answered on the conversation's next load. Not ``INTERRUPTED``: the process
did not stop, and the turn is not resumed."""
SUPERSEDED_REASON = "the user sent a new message"
CANCELLED_REASON = "the turn was cancelled"
"""Why a paused turn's waiting calls were denied when it was cancelled."""


def denied(reason: str) -> str:
    """The tool result of a denied call: an error result the model sees."""
    return f"denied: {reason}" if reason else "denied"


class TurnState(enum.Enum):
    NEW = "new"
    MODEL = "model"
    """Waiting for the model's answer."""
    TOOLS = "tools"
    """Calls of a batch run (or wait to start); results come as ``ToolDone``."""
    APPROVAL = "approval"
    """Paused: every call that can run has run; the rest wait for a person."""
    FINISHED = "finished"
    FAILED = "failed"
    SUPERSEDED = "superseded"
    """Was waiting for approval when a new user message came: its waiting calls
    were denied and the new message starts a new turn."""

    # Members are singletons compared by identity: hash them so too (C, not
    # ``Enum.__hash__``'s Python-level ``hash(self._name_)``). ``handle`` hashes
    # the state twice per event; with the lookups below, 4 % of an instant
    # turn's CPU (bench.turns -n 1000, in-memory).
    __hash__ = object.__hash__


FINAL_STATES = frozenset({TurnState.FINISHED, TurnState.FAILED, TurnState.SUPERSEDED})


class Failure(enum.Enum):
    """What stopped a turn short, as the shell saw it."""

    CANCELLED = "cancelled"
    """The turn's cancel scope was cancelled (``ChatAgent.cancel``, or the
    agent's nursery)."""
    INTERRUPTED = "interrupted"
    """The agent closed and its grace ran out: no failure of the turn, whose
    open calls are answered as a crash's are (``INTERRUPTED``) and which the
    next start resumes."""
    STORE = "store"
    """The store refused or failed a read or a write (``StoreError``)."""
    AGENTIK = "agentik"
    """Another agentik error."""
    BUG = "bug"
    """Code that should not raise did (agentik's own)."""
    REPORTED = "reported"
    """A component failed and said how (a ``TurnError`` with its code: the
    model's backend, the context window, a prompt contributor)."""


FAILURE_CODES: Final[Mapping[Failure, str]] = {
    Failure.CANCELLED: "cancelled",
    Failure.INTERRUPTED: "interrupted",
    Failure.STORE: "store_error",
    Failure.AGENTIK: "turn_failed",
    Failure.BUG: "internal_error",
}
"""The ``TurnError`` code of each failure (a reported one keeps its own)."""

STEP_LIMIT = "step_limit"
INVALID_OUTPUT = "invalid_output"


def output_feedback(error: str, tool: str | None = None) -> str:
    """What the model is told after an answer that does not match the schema
    (given as text, or by calling ``tool``)."""
    if tool is not None:
        return (
            f"Your answer was not accepted: {error}."
            f" Call the tool {tool} again, alone, its arguments matching its schema."
        )
    return (
        f"Your answer does not match the required JSON schema: {error}."
        " Answer again with only the JSON value, matching the schema."
    )


ANSWER_RECEIVED = "answer received"
"""The result recorded for a valid final-answer call (every call answered)."""


class PolicyAnswer(enum.Enum):
    """What the agent's ``approval_policy`` said about a call."""

    NONE = "none"
    """No policy, or not asked (a resumed call: its decisions are stored)."""
    RUN = "run"
    ASK = "ask"
    RAISED = "raised"
    """It raised: the call waits for a person all the same (fail closed)."""


_POLICY_ASKS: Final = frozenset({PolicyAnswer.ASK, PolicyAnswer.RAISED})


class TurnStateError(Exception):
    """An event the turn cannot take in its state (a bug in the shell, or a
    decision about a call that is not waiting)."""


def _plans(value: Iterable[CallPlan]) -> tuple[CallPlan, ...]:
    return tuple(value)


# --- what the shell tells the machine ------------------------------------------


@final
@attrs.frozen
class CallPlan:
    """A tool call as the shell found it when the model sent it: the facts the
    machine decides on (``_call_plans`` gathers them)."""

    call: ToolCall
    needs_approval: bool = False
    """Its tool or toolset requires a person's approval (``requires_approval``)."""
    idempotent: bool = False
    invalid: str | None = None
    """Why the call cannot run (an unknown tool, arguments that do not match
    its tool's schema), as the error result the model is to see; None when
    it can. A person is never asked about such a call."""
    policy: PolicyAnswer = attrs.field(default=PolicyAnswer.NONE, kw_only=True)
    sequential: bool = attrs.field(default=False, kw_only=True)
    """The call must not overlap another call of its answer."""
    toolset: str | None = attrs.field(default=None, kw_only=True)
    """The toolset its name belongs to: switched on (or its use counted) when
    the call starts, or is refused."""

    @property
    def waits(self) -> bool:
        """Whether a person must decide before it runs: an invalid call never
        waits; a valid one does when its tool or toolset, or the policy, says so."""
        return self.invalid is None and (self.needs_approval or self.policy in _POLICY_ASKS)


@final
@attrs.frozen
class Begin:
    """A user message starts the turn."""

    text: str
    idempotency_key: str | None = None
    parts: tuple[Part, ...] = ()
    """Its images and files (``send(content=[...])``): the machine decides
    from the text alone; the parts only travel with the message it records."""


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
    invalid_output: str | None = None
    """A typed turn's answer without calls (or its lone final-answer call:
    ``TurnMachine.output_tool``) that does not match its output schema: why,
    in words for the model (the shell validated it)."""
    output_text: str | None = attrs.field(default=None, kw_only=True)
    """A valid lone final-answer call's answer as JSON text: the turn's final
    answer, stored as the last assistant message's text."""


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
    """The turn cannot go on: answer what is open and fail. ``code`` only for
    ``Failure.REPORTED`` (the component's own)."""

    failure: Failure
    message: str
    code: str | None = None
    returned: tuple[ToolDone, ...] = attrs.field(default=(), kw_only=True)
    """Results of calls that returned before the machine heard of them (the
    turn was cut between a call's end and its ``ToolDone``): the calls ran to
    their end, so these are their results, not ``STOPPED``."""


MachineEvent: TypeAlias = Begin | Resume | ModelAnswered | ToolDone | Decided | Superseded | Stop
