"""What stopped a turn, as the machine and the caller are told.

The shell only names what it saw (``failure_of``: a cancellation, a store
failure, another agentik error, a bug, or a failure a component reported
with its own code); the machine's ``FAILURE_CODES`` gives each its code, the
one a failed turn is recorded with and its caller is told.
"""

from __future__ import annotations

import trio

from agentik._errors import AgentikError, StoreError, TurnError
from agentik.agent._failures import describe, message_of
from agentik.agent._turn_events import FAILURE_CODES, Failure, Stop


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
