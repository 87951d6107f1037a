"""What the turn machine tells its shell: the actions, performed in order.

Each is a value (frozen attrs); the shell (``_turn.Turn``) performs them and
decides nothing. See ``_turn_machine`` for when each is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeAlias, final

import attrs

from agentik._messages import Message, ToolCall


def _calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


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
class Commit:
    """Wait until everything recorded so far is durable."""


@final
@attrs.frozen
class Activate:
    """Switch ``toolset`` on, or count a use of it: a call of ``by``, a tool
    of it, starts (or is refused)."""

    toolset: str
    by: str


@final
@attrs.frozen
class CallModel:
    """Ask the model, with the history as recorded so far."""


@final
@attrs.frozen
class RunTool:
    """Start this call; feed back ``ToolDone`` when it finishes (other calls may
    run meanwhile). ``again`` when a crash interrupted an earlier run of it."""

    call: ToolCall
    again: bool = False


@final
@attrs.frozen
class Refuse:
    """``call`` will not run (its plan said why: ``CallPlan.invalid``); its
    result is ``content``, recorded in call order like any result."""

    call: ToolCall
    content: str


@final
@attrs.frozen
class AwaitApproval:
    """Pause: these calls wait for a decision (everything else is recorded)."""

    calls: tuple[ToolCall, ...] = attrs.field(converter=_calls)


@final
@attrs.frozen
class AskAgain:
    """The answer did not match the turn's output schema: show the model
    ``answer`` and then ``feedback`` (the error) in the next requests of this
    turn only (neither is stored), and ask again (``CallModel`` follows)."""

    answer: Message
    feedback: Message


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
    Message
    | Record
    | RecordDecision
    | Commit
    | Activate
    | CallModel
    | RunTool
    | Refuse
    | AwaitApproval
    | AskAgain
    | Finish
    | Fail
)
"""A bare ``Message`` means: record it (most records: no wrapper to build)."""
