"""What stopped a turn, as the machine and the caller are told, and what the
turn does about it as it ends.

The shell only names what it saw (``failure_of``: a cancellation, a store
failure, another agentik error, a bug, or a failure a component reported
with its own code); the machine's ``FAILURE_CODES`` gives each its code, the
one a failed turn is recorded with and its caller is told. How a run of the
turn that ends (cleanly or not) leaves what it recorded is decided here too
(``cleanup_of``), from the machine's state: the shell performs it
(``_turn_cleanup``).
"""

from __future__ import annotations

import enum
from typing import Final

import trio

from agentik._errors import AgentikError, StoreError, TurnError
from agentik.agent._failures import describe, message_of
from agentik.agent._turn_events import FAILURE_CODES, Failure, Stop, TurnState


def failure_of(error: BaseException | None) -> Failure:
    """What ``error`` says stopped a turn (None, which cannot happen where this
    is called, counts as a cancellation rather than a crash)."""
    if error is None or isinstance(error, trio.Cancelled):
        return Failure.CANCELLED
    if isinstance(error, TurnError):
        return Failure.REPORTED
    if isinstance(error, StoreError):
        return Failure.STORE
    if isinstance(error, AgentikError):
        return Failure.AGENTIK
    if isinstance(error, BaseExceptionGroup) and error.subgroup(trio.Cancelled) is not None:
        return Failure.CANCELLED
    return Failure.BUG


def stop_of(error: BaseException | None, *, interrupted: bool = False) -> Stop:
    """The machine's ``Stop`` for a turn cut short by ``error``; a cancellation
    is an interruption once the agent's shutdown grace is over
    (``interrupted``)."""
    failure = failure_of(error)
    if failure is Failure.CANCELLED and interrupted:
        return Stop(Failure.INTERRUPTED, "the agent shut down")
    if failure is Failure.REPORTED:
        assert isinstance(error, TurnError)
        return Stop(failure, message_of(error), error.code)
    return Stop(failure, "the turn was stopped")


def turn_error(error: Exception) -> TurnError:
    """What the caller of a turn that ``error`` failed is told (a
    ``TurnError`` raised ``from`` it); a ``TurnError`` is told as it is."""
    failure = failure_of(error)
    if failure is Failure.REPORTED:
        assert isinstance(error, TurnError)
        return error
    if failure is Failure.BUG:
        text = f"the turn failed unexpectedly: {describe(error)}"
    else:
        text = f"the turn failed: {message_of(error)}"
    told = TurnError(text, code=FAILURE_CODES[failure])
    told.__cause__ = error
    return told


class Cleanup(enum.Enum):
    """What a run of a turn does as it ends (``Turn.run``), besides settling
    its writes."""

    NONE = "none"
    STOP = "stop"
    """Something ran (the model, tools) when it ended: the machine answers the
    open calls (``Stop``), they are recorded and the failure remembered."""
    END_PAUSE = "end_pause"
    """Cancelled while its pause (or a decision that left it paused) was being
    committed: its caller hears ``cancelled``, so it ends as ``cancel_paused``
    ends a turn, not paused with nobody told it waits."""
    LOST_COMMIT = "lost_commit"
    """It had its answer, or (begun in this run) its pause, when committing it
    failed: remembered as failed, so a reload does not resume it behind its
    caller's back."""


_RUNNING: Final = frozenset({TurnState.MODEL, TurnState.TOOLS})
"""States in which something runs that a failure or a cancel cuts short."""


def cleanup_of(
    state: TurnState, error: BaseException | None, *, begins: bool, interrupted: bool
) -> Cleanup:
    """What a run of a turn that ends in ``state`` (by ``error``, None if it
    ended cleanly) does; ``begins``: the run recorded the turn's user
    message; ``interrupted``: the agent's shutdown grace is over."""
    if state in _RUNNING:
        return Cleanup.STOP
    if error is None:
        return Cleanup.NONE
    if state is TurnState.APPROVAL:
        if stop_of(error, interrupted=interrupted).failure is Failure.CANCELLED:
            return Cleanup.END_PAUSE
        return Cleanup.LOST_COMMIT if begins else Cleanup.NONE
    if state is TurnState.FINISHED:
        return Cleanup.LOST_COMMIT
    return Cleanup.NONE
