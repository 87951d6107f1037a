"""A2A task runs: every turn an A2A request starts (a new message, or the
decisions that let a paused task go on) runs in the server's nursery, not in
the request's handler, and tells the task's watchers how it goes.

Why not in the handler: a client that leaves cancels its handler, but the
turn goes on in the agent; a run owned by the server always ends (it waits
for the turn), so it always clears the task's "running" entry in the ledger
and always publishes how the task ended. A blocking SendMessage waits for
its run; ``returnImmediately`` does not; a streamed SendMessage and
SubscribeToTask relay what the run publishes.

What a run publishes (``TaskLedger.publish``), as ``(state, result)`` where
``result`` is a StreamResponse result object and ``state`` the task state it
announces (None for an artifact): WORKING when it starts; then the answer
artifact and COMPLETED, or INPUT_REQUIRED with the waiting calls, or the
task's state as stored when the run failed or was refused (FAILED, CANCELED,
or INPUT_REQUIRED again when a decision was not taken). While it runs, a
tool's question (MCP elicitation) publishes INPUT_REQUIRED with the question;
the follow-up that answers it publishes WORKING, and the same run goes on.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import trio

from agentik._errors import AgentikError, TurnError
from agentik._json import JsonObject, JsonValue
from agentik._serde import converter
from agentik.agent import (
    ElicitationAsked,
    ElicitationRequest,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnResult,
)
from agentik.server._owners import Caller
from agentik.server.a2a._ledger import TaskKey, TaskLedger, TaskUpdate
from agentik.server.a2a._rpc import A2AError
from agentik.server.a2a._views import (
    ENDS_A_STREAM,
    INPUT_REQUIRED,
    TaskView,
    artifact,
    conversational,
)

FindTask = Callable[[Caller, str], Awaitable[TaskView]]


RUN_TASK_NAME = "agentik.server.a2a-task-run"
"""The name of a run's trio task: it belongs to its turn, not to a connection."""


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def status_update(view: TaskView) -> TaskUpdate:
    update: JsonObject = {
        "taskId": view.task_id,
        "contextId": view.context_id,
        "status": view.status_json(),
    }
    return view.state, {"statusUpdate": update}


def working(task_id: str, context_id: str) -> TaskView:
    return TaskView(task_id, context_id, "TASK_STATE_WORKING", now())


def view_of_question(task_id: str, context_id: str, question: ElicitationRequest) -> TaskView:
    """The task a tool's question holds: INPUT_REQUIRED with the question."""
    return TaskView(task_id, context_id, INPUT_REQUIRED, now(), question=question)


def view_of_result(task_id: str, context_id: str, result: TurnResult) -> TaskView:
    """The task a turn's result shows: COMPLETED with its answer, or
    INPUT_REQUIRED with the calls that wait."""
    at = (result.messages[-1].created_at if result.messages else None) or now()
    history = conversational(result.messages)
    if result.status == "awaiting_approval":
        waiting = tuple(request.call for request in result.approvals)
        return TaskView(task_id, context_id, INPUT_REQUIRED, at, history=history, waiting=waiting)
    output: JsonValue = None if result.output is None else converter.unstructure(result.output)
    return TaskView(
        task_id,
        context_id,
        "TASK_STATE_COMPLETED",
        at,
        answer=result.text,
        output=output,
        history=history,
    )


@attrs.define(eq=False)
class Run:
    """One turn of a task, running in the server's nursery."""

    caller: Caller
    key: TaskKey
    task_id: str
    context_id: str
    done: trio.Event = attrs.Factory(trio.Event)
    result: TurnResult | None = None
    error: Exception | None = None
    question: ElicitationRequest | None = None
    """The last question a tool of the turn asked (it may be answered by now)."""
    asked: trio.Event = attrs.Factory(trio.Event)
    """Set when a question is asked; a fresh one once it is answered."""

    async def settled(self) -> None:
        """Until the run is done or its turn asks the person a question: what a
        blocking SendMessage waits for (A2A returns at an interrupted state)."""
        async with trio.open_nursery() as nursery:

            async def until(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(until, self.done)
            nursery.start_soon(until, self.asked)

    """Why the run ended without a result: a ``TurnError`` (the turn failed or
    was cancelled), or a refusal (``ApprovalError``, ``OverloadedError`` ...)."""


async def consume(
    events: AsyncIterator[TurnEvent], asked: Callable[[ElicitationRequest], None] | None = None
) -> TurnResult:
    """Read a streamed turn to its end; its result, or its failure raised.
    ``asked`` hears each question a tool of the turn asks on the way."""
    result: TurnResult | None = None
    failure: TurnFailed | None = None
    async for event in events:  # to the end, so the stream's own log line is written
        if isinstance(event, TurnFinished):
            result = event.result
        elif isinstance(event, TurnFailed):
            failure = event
        elif isinstance(event, ElicitationAsked) and asked is not None:
            asked(event.request)
    if result is not None:
        return result
    if failure is not None:
        raise TurnError(failure.message, code=failure.code, retry_after=failure.retry_after)
    raise TurnError("the turn ended without telling how", code="turn_failed")


async def launch(
    ledger: TaskLedger,
    background: trio.Nursery | None,
    find_task: FindTask,
    run: Run,
    body: Callable[[], Awaitable[TurnResult]],
) -> None:
    """Start ``body`` (the turn) as ``run`` in the server's nursery
    (``background``; or, for an app served without one, here). The caller has
    put ``run.key`` in the ledger's running tasks; the run takes it out when
    it ends."""

    async def go() -> None:
        try:
            ledger.publish(run.key, status_update(working(run.task_id, run.context_id)))
            try:
                run.result = await body()
            except (AgentikError, ValueError) as exc:  # the run's outcome, for its waiter
                run.error = exc
            ledger.finish(run.key)  # the turn has ended: the task as stored is how
            if run.result is not None:
                _publish_result(ledger, run, run.result)
            else:
                ledger.publish(run.key, status_update(await _stored_view(find_task, run)))
        finally:
            ledger.finish(run.key)
            run.done.set()

    if background is None:
        await go()
    else:
        background.start_soon(go, name=RUN_TASK_NAME)


def view_updates(view: TaskView) -> list[TaskUpdate]:
    """What tells a watcher the task is now ``view``: its answer artifact (if
    it has one), then its status."""
    updates: list[TaskUpdate] = []
    if view.answer is not None:
        update: JsonObject = {
            "taskId": view.task_id,
            "contextId": view.context_id,
            "artifact": artifact(view.task_id, view.answer, view.output),
            "lastChunk": True,
        }
        updates.append((None, {"artifactUpdate": update}))
    updates.append(status_update(view))
    return updates


def _publish_result(ledger: TaskLedger, run: Run, result: TurnResult) -> None:
    for update in view_updates(view_of_result(run.task_id, run.context_id, result)):
        ledger.publish(run.key, update)


async def _stored_view(find_task: FindTask, run: Run) -> TaskView:
    """The task as stored after a run that did not finish: failed, cancelled,
    or (a refused decision) still waiting."""
    try:
        view = await find_task(run.caller, run.task_id)
    except A2AError:  # cut short before its user message was stored
        cancelled = isinstance(run.error, TurnError) and run.error.code == "cancelled"
        state = "TASK_STATE_CANCELED" if cancelled else "TASK_STATE_FAILED"
        return TaskView(run.task_id, run.context_id, state, now(), error=str(run.error))
    error = run.error
    if view.state == "TASK_STATE_FAILED" and isinstance(error, TurnError):
        # The run knows why its turn failed; stored history only that it did.
        stored = run.caller.internal(run.context_id)
        reason = str(error).replace(stored, run.context_id)
        view = attrs.evolve(view, error=f"the turn failed ({error.code}): {reason}")
    return view


async def outcome_view(find_task: FindTask, run: Run) -> TaskView:
    """What a blocking SendMessage answers once ``run`` is done: the task as the
    result shows it, or as stored after a failure. A refusal is raised."""
    if run.result is not None:
        return view_of_result(run.task_id, run.context_id, run.result)
    error = run.error
    if isinstance(error, TurnError):
        return await _stored_view(find_task, run)
    assert error is not None
    raise error


IDLE_RECHECK_SECONDS = 1.0
"""How often a stream following a task that no run of this process has (it
waits for input) reads the task again. Such a task can change without an A2A
request, so without an update published: a new message in its context over
any transport replaces it, a decision over the native API or AG-UI (or the
agent's approval timeout) runs it on. A waiting task waits for a person, so
a second is prompt enough; each read is one task lookup."""


@attrs.define
class Recheck:
    """Reading a followed task again while no run of this process has it."""

    read: Callable[[], Awaitable[TaskView]]
    idle: Callable[[], bool]
    """Whether no run has the task (a run publishes what happens to it)."""
    state: str
    waiting: tuple[str, ...] = ()
    """The state (and waiting call ids) the stream has sent last."""

    def sent(self, state: str | None) -> None:
        if state is not None:  # an artifact announces no state
            self.state, self.waiting = state, ()

    async def changes(self) -> list[TaskUpdate]:
        """What the task as stored shows changed since the stream's last
        state (nothing while a run has it, or if it cannot be read)."""
        if not self.idle():
            return []
        try:
            view = await self.read()
        except A2AError:
            return []
        waiting = tuple(call.id for call in view.waiting)
        if (view.state, waiting) == (self.state, self.waiting) or not self.idle():
            return []
        self.state, self.waiting = view.state, waiting
        return view_updates(view)


def relay(
    first: JsonObject,
    updates: trio.MemoryReceiveChannel[TaskUpdate] | None,
    recheck: Recheck | None = None,
) -> AsyncIterator[JsonObject]:
    """The results a task stream sends: ``first`` (the task as it is), then
    the published updates (if any), and with ``recheck`` what reading the task
    again shows, until one announces a state that ends a stream; a watcher
    dropped for falling behind (or at shutdown, if nothing runs it) ends there."""

    async def results() -> AsyncIterator[JsonObject]:
        yield first
        if updates is None:
            return
        while True:
            batch = await _next_updates(updates, recheck)
            if batch is None:
                return
            for state, result in batch:
                yield result
                if state in ENDS_A_STREAM:
                    return

    return results()


async def _next_updates(
    updates: trio.MemoryReceiveChannel[TaskUpdate], recheck: Recheck | None
) -> list[TaskUpdate] | None:
    """The next published update; or, when none came for a while, the task's
    changes read again (maybe none); None once the watch is over."""
    with trio.move_on_after(math.inf if recheck is None else IDLE_RECHECK_SECONDS):
        try:
            update = await updates.receive()
        except trio.EndOfChannel:
            return None
        if recheck is not None:
            recheck.sent(update[0])
        return [update]
    assert recheck is not None
    return await recheck.changes()
