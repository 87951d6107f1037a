"""A turn cut short: what a run of a turn that a failure, a cancel or a
shutdown stopped does as it ends (``cleanup_of``, ``_turn_errors``, says
which), and remembering in this process that a turn failed.

Apart from ``_turn`` because none of it is on a turn's way: the interpreter
runs it only when the run ends with something left open (``Turn.run``'s
``finally``), or a turn fails; what it records is written shielded and
bounded, so what the turn recorded is valid and committed whatever stopped
it, and a restart or a reload does not resume a turn its caller was told
failed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from agentik._errors import AgentikError
from agentik._messages import Message, ToolCall
from agentik.agent._recovery import open_calls
from agentik.agent._turn_actions import Fail, RecordDecision, TurnAction
from agentik.agent._turn_errors import Cleanup, stop_of
from agentik.agent._turn_events import CANCELLED_REASON, FAILURE_CODES, Failure, ToolDone
from agentik.agent._turn_machine import TurnMachine, denial

if TYPE_CHECKING:
    from agentik.agent._events import TurnEvent
    from agentik.agent._turn_host import TurnHost
    from agentik.agent._turn_writes import TurnWrites


class EndingTurn(Protocol):
    """What ending a turn cut short uses of it (``Turn`` implements it)."""

    conversation: TurnHost
    machine: TurnMachine
    start: int
    writes: TurnWrites
    returned: dict[str, str]
    emit: Callable[[TurnEvent], Awaitable[None]] | None

    async def perform(
        self, actions: list[TurnAction], start: Callable[[ToolCall], object]
    ) -> TurnAction | None: ...


async def clean_up(turn: EndingTurn, cleanup: Cleanup, error: BaseException | None) -> None:
    """Do what ``cleanup`` says for a run of ``turn`` that ``error`` (None if
    none) ended; its writes are settled after."""
    if cleanup is Cleanup.STOP:
        await stop(turn, error)
    elif cleanup is Cleanup.END_PAUSE:
        await end_pause(turn)
    elif cleanup is Cleanup.LOST_COMMIT:
        assert error is not None
        remember_lost_commit(turn, error)


async def stop(turn: EndingTurn, error: BaseException | None) -> None:
    """The turn cannot go on (``error`` cut it short): the machine answers
    its open calls (with the results it holds) and names the failure; both
    are recorded, so what the turn recorded is valid and committed."""
    event = stop_of(error, interrupted=turn.conversation.interrupted)
    # Calls that returned before the machine heard of them ran to their end:
    # their results, not "stopped before this tool call finished".
    returned = tuple(ToolDone(i, content) for i, content in turn.returned.items())
    turn.returned.clear()
    actions = turn.machine.handle(attrs.evolve(event, returned=returned))
    fail = actions[-1]
    assert isinstance(fail, Fail)
    if event.failure is not Failure.INTERRUPTED:  # else no failure: resumed at start
        remember_failure(turn, fail.code)
    known = {a.tool_call_id: a.content for a in actions if isinstance(a, Message)}
    await turn.writes.answer_open_calls(known, fail.code)


async def end_pause(turn: EndingTurn) -> None:
    """Cancelled while its pause, or a decision that left it paused, was
    being committed: its caller hears ``cancelled``, so the turn ends as
    ``cancel_paused`` ends one (its waiting calls denied, approved ones
    answered ``not run``, its failure recorded), shielded and bounded. Kept
    paused instead, it would be a turn nobody was told waits; on a
    shutdown it is (decided after the restart)."""
    remember_failure(turn, "cancelled")
    turn.emit = None  # the caller's stream ended with the cancel
    writes = turn.writes
    with trio.move_on_at(writes.cleanup_at(), shield=True):
        try:
            # The pause first: cut short while it committed, its call message
            # has no seq in the cache yet, and a decision names the call by it.
            await writes.commit()
            # Only the calls the store took: cut short before it accepted the
            # pause's message, the turn has no call to decide (the history's
            # calls, not the machine's, as ``answer_open_calls`` answers them).
            taken = [c.id for c in open_calls(turn.conversation.cache.history[turn.start :])]
            machine = turn.machine
            actions = [a for a in machine.supersede(CANCELLED_REASON) if _call_of(a) in taken]
            # A denial cut short before the store accepted it: the machine took
            # the call for decided, the store has it waiting, so it is denied
            # as the waiting ones are (left open, the next load would answer
            # it as a failed turn's call that may or may not have run).
            answered = {_call_of(a) for a in actions}
            lost = [i for i in taken if i not in answered and machine.decisions.get(i) is False]
            denials = [denial(i, CANCELLED_REASON) for i in lost]
            await turn.perform([*actions, *denials], _no_call)
            await writes.commit_failure("cancelled")
        except AgentikError as exc:
            writes.unsettled(exc)


def remember_lost_commit(turn: EndingTurn, error: BaseException) -> None:
    """The turn had its answer, or (begun in this run) its pause, when
    committing it failed: its caller is told it failed, while the store may
    hold its first messages, a call without a result and no failure record
    (the storage is failing). A reload in this process would take it for
    interrupted and resume it behind the caller's back, so it is
    remembered, as ``stop`` does. (A decision's failed commit leaves the
    turn paused as stored: nothing to remember, the decision can come again.)"""
    event = stop_of(error, interrupted=turn.conversation.interrupted)
    if event.failure is not Failure.INTERRUPTED:  # else resumed at the next start
        remember_failure(turn, event.code or FAILURE_CODES[event.failure])


def remember_failure(turn: EndingTurn, code: str) -> None:
    """Remember in this process that the turn failed (``runtime.failures``),
    unless its user message is known lost: then there is no turn, and its
    seq goes to the next turn, which a failure kept under it would end.
    Not known either way (in flight, its commit in doubt), the failure is
    remembered in doubt, settled when the conversation is next read."""
    stored = turn.writes.stored(turn.start)
    if stored is False:
        return
    conv = turn.conversation
    seq = conv.cache.first_seq + turn.start
    conv.runtime.remember_failure(conv.conversation_id, seq, code, in_doubt=stored is None)


def _call_of(action: TurnAction) -> str | None:
    """The call a superseded turn's action decides or answers."""
    if isinstance(action, RecordDecision):
        return action.call_id
    return action.tool_call_id if isinstance(action, Message) else None


def _no_call(call: ToolCall) -> None:
    raise AssertionError(f"a superseded turn starts no call, not {call.id!r}")
