"""Running a turn's tool calls: a lone call in the turn's own task, several
in a nursery under the turn, and a call that will not run told as if it had.

Apart from ``_turn`` because it is how calls run, not what the turn does
next: ``Turn`` performs the machine's actions in order and hands each call
to start to one of these; the machine hears of each result (``ToolDone``)
as the call ends. Everything here runs in the conversation's task or in a
nursery under the turn, so leaving the turn cancels every call it started.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import trio

from agentik._groups import raise_lone_error
from agentik._messages import ToolCall
from agentik.agent._events import ElicitationAsked, ToolCallFinished, ToolCallStarted
from agentik.agent._tool_run import run_tool
from agentik.agent._turn_actions import Refuse, RunTool, TurnAction
from agentik.agent._turn_events import ToolDone

if TYPE_CHECKING:
    from agentik.agent._call_plans import Ready
    from agentik.agent._elicitation import ElicitationRequest
    from agentik.agent._events import TurnEvent
    from agentik.agent._turn_host import TurnHost
    from agentik.agent._turn_machine import TurnMachine
    from agentik.agent._turn_spans import TurnSpans


class CallingTurn(Protocol):
    """What running calls uses of the turn (``Turn`` implements it)."""

    conversation: TurnHost
    machine: TurnMachine
    ready: dict[str, Ready]
    returned: dict[str, str]
    spans: TurnSpans | None
    emit: Callable[[TurnEvent], Awaitable[None]] | None

    async def perform(
        self, actions: list[TurnAction], start: Callable[[ToolCall], object]
    ) -> TurnAction | None: ...


def several_calls(actions: list[TurnAction]) -> bool:
    """Whether ``actions`` start more than one call (then they run in a
    nursery; one call runs in the turn's own task). Stops at the second."""
    seen = False
    for action in actions:
        if type(action) is RunTool:
            if seen:
                return True
            seen = True
    return False


async def run_together(turn: CallingTurn, actions: list[TurnAction]) -> TurnAction | None:
    """Perform ``actions``, each call they start in its own task as it is
    met, and what follows as the calls finish, until none runs; what ends
    the batch."""
    machine = turn.machine
    send, receive = trio.open_memory_channel[tuple[str, str]](machine.max_parallel)
    running = 0
    # The tasks raise nothing but Cancelled: a lone other error is this body's
    # own (a store failure), raised as itself as if no nursery were here; a
    # cancellation of the turn stays the group trio handles.
    with raise_lone_error(beside=trio.Cancelled):
        async with trio.open_nursery() as nursery:

            def start(call: ToolCall) -> None:
                nonlocal running
                nursery.start_soon(_tool_task, turn, call, send)
                running += 1

            last = await turn.perform(actions, start)
            while running:
                call_id, content = await receive.receive()
                running -= 1
                last = await turn.perform(tell_done(turn, call_id, content), start)
            return last


async def _tool_task(
    turn: CallingTurn, call: ToolCall, done: trio.MemorySendChannel[tuple[str, str]]
) -> None:
    await done.send((call.id, await run_call(turn, call)))


def tell_done(turn: CallingTurn, call_id: str, content: str) -> list[TurnAction]:
    """Tell the machine that call ``call_id`` returned ``content``; what it says to do."""
    turn.returned.pop(call_id, None)
    return turn.machine.handle(ToolDone(call_id, content))


async def run_call(turn: CallingTurn, call: ToolCall) -> str:
    """Run ``call`` (planned when it was made or read back); its result, kept
    in ``turn.returned`` from its return (no checkpoint between) until the
    machine hears of it (``tell_done``): the turn may be cut in between."""
    conv = turn.conversation
    await conv.check_tenure()  # a node that lost the conversation starts no call
    tool, arguments = turn.ready.pop(call.id)
    announce = functools.partial(_announce, turn)
    if turn.spans is None:
        content, is_error = await run_tool(conv, call, tool, arguments, announce)
    else:
        content, is_error = await turn.spans.tool(
            conv, call, lambda: run_tool(conv, call, tool, arguments, announce)
        )
    turn.returned[call.id] = content
    if turn.emit is not None:
        await turn.emit(ToolCallFinished(call, content, is_error))
    return content


async def refuse(turn: CallingTurn, action: Refuse) -> None:
    """A call that will not run (``CallPlan.invalid``), told to a streaming
    reader and traced as any failed call is, and counted as one."""
    call, refused = action.call, (action.content, True)
    stats = turn.conversation.runtime.stats
    stats.tool_calls += 1
    stats.tool_errors += 1
    if turn.emit is not None:
        await turn.emit(ToolCallStarted(call))
    if turn.spans is not None:

        async def result() -> tuple[str, bool]:
            return refused

        await turn.spans.tool(turn.conversation, call, result)
    if turn.emit is not None:
        await turn.emit(ToolCallFinished(call, *refused))


async def _announce(turn: CallingTurn, request: ElicitationRequest) -> None:
    """Put a tool's question into the turn's stream, if it streams."""
    if turn.emit is not None:
        await turn.emit(ElicitationAsked(request))
