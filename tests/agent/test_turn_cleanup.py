"""How a run of a turn leaves what it recorded as it ends (``cleanup_of``):
every machine state, every kind of error, a run that recorded the user
message or not, inside the shutdown's grace or past it. The turn-level
tests (``test_turn_faults``, ``test_cancel_turns``, the crash tests) show
each cleanup does what it says; this pins which one is chosen."""

from __future__ import annotations

import itertools

import pytest
import trio

from agentik._errors import StoreError, TurnError
from agentik.agent._turn_errors import Cleanup, cleanup_of
from agentik.agent._turn_events import TurnState


def _cancelled() -> BaseException:
    return trio.Cancelled._create()  # type: ignore[attr-defined]  # trio makes them itself


ERRORS: dict[str, BaseException | None] = {
    "none": None,
    "cancelled": _cancelled(),
    "store": StoreError("disk full"),
    "reported": TurnError("the model failed", code="model_error"),
    "bug": KeyError("oops"),
}


def expected(state: TurnState, error: str, begins: bool, interrupted: bool) -> Cleanup:
    """The rules, case by case, as docs/agent.md tells them."""
    if state in (TurnState.MODEL, TurnState.TOOLS):
        return Cleanup.STOP  # something ran: its open calls get results
    if error == "none":
        return Cleanup.NONE  # ended cleanly
    if state is TurnState.APPROVAL and error == "cancelled" and not interrupted:
        return Cleanup.END_PAUSE  # its caller hears "cancelled": not left paused
    if state is TurnState.FINISHED or (state is TurnState.APPROVAL and begins):
        return Cleanup.LOST_COMMIT  # its answer or first pause was not committed
    return Cleanup.NONE  # a decision's failed commit leaves the stored pause as it was


@pytest.mark.parametrize(
    ("state", "error", "begins", "interrupted"),
    list(itertools.product(TurnState, ERRORS, (False, True), (False, True))),
)
def test_each_end_of_a_run_gets_its_cleanup(
    state: TurnState, error: str, begins: bool, interrupted: bool
) -> None:
    got = cleanup_of(state, ERRORS[error], begins=begins, interrupted=interrupted)
    assert got is expected(state, error, begins, interrupted)


def test_a_cancellation_inside_a_group_ends_a_pause_as_a_cancel() -> None:
    group = BaseExceptionGroup("tasks", [_cancelled()])
    got = cleanup_of(TurnState.APPROVAL, group, begins=False, interrupted=False)
    assert got is Cleanup.END_PAUSE
