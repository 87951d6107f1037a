"""The A2A JSON-RPC methods: SendMessage (a new message, or the follow-up that
decides or answers a task waiting for input), SendStreamingMessage,
SubscribeToTask, GetTask, CancelTask and ListTasks.

``A2aMethods`` holds its dependencies as attributes (the agent, the ledger,
the task lookup, the server context whose nursery runs the turns); each
method takes the caller and the parsed call and returns the JSON-RPC result,
or an ``EventStream`` for the streamed ones. Turns run in the server's
nursery (``_tasks.launch``): a blocking SendMessage waits for its run, a
streamed one and SubscribeToTask relay what the run publishes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import trio

from agentik._errors import AgentikError, ApprovalError, TurnError
from agentik._json import JsonObject
from agentik.agent import ElicitationError, ElicitationRequest, TurnResult
from agentik.server._context import ServerContext
from agentik.server._decisions import log_decision
from agentik.server._owners import Caller
from agentik.server._turns import claim_here, open_stream, to_http_error
from agentik.server.a2a._answers import Decision, parse_decisions, parse_elicitation_answer
from agentik.server.a2a._ledger import TaskLedger
from agentik.server.a2a._list import (
    context_page,
    ledger_page,
    page_json,
    parse_query,
)
from agentik.server.a2a._lookup import TaskLookup
from agentik.server.a2a._rpc import (
    A2AError,
    RpcCall,
    history_length,
    invalid_params,
    rpc_error,
    rpc_result,
    task_id_param,
)
from agentik.server.a2a._send import SendParams, parse_send
from agentik.server.a2a._tasks import (
    Recheck,
    Run,
    consume,
    launch,
    now,
    outcome_view,
    relay,
    status_update,
    view_of_question,
    working,
)
from agentik.server.a2a._views import (
    INPUT_REQUIRED,
    TERMINAL,
    TaskView,
)
from agentik.server.http import (
    EventStream,
    HttpError,
    sse_frame,
)


class A2aMethods:
    """One method per JSON-RPC method, over the agent and the task ledger."""

    def __init__(self, ctx: ServerContext, ledger: TaskLedger, lookup: TaskLookup) -> None:
        self.ctx = ctx
        """Its ``background`` nursery runs the turns (read when a run starts)."""
        self.agent = ctx.agent
        self.store = ctx.agent.storage.message_store
        self.ledger = ledger
        self.lookup = lookup
        self.active = lookup.active
        self.heartbeat = ctx.config.sse_heartbeat
        self.part_limit = ctx.config.limits.max_part_bytes

    async def start_message(self, caller: Caller, send: SendParams) -> Run:
        """Admit a new message's turn (or refuse it now: 429, 503, 422) and run it."""
        run = Run(
            caller, (caller.internal(send.context_id), send.task_id), send.task_id, send.context_id
        )
        self.ledger.start(run.key)
        try:
            events, stack = await open_stream(
                self.agent,
                "a2a",
                caller,
                send.context_id,
                send.text,
                send.task_id,
                output=send.output_schema,
                parts=send.parts,
            )
        except HttpError:
            self.ledger.finish(run.key)
            raise

        def asked(question: ElicitationRequest) -> None:
            run.question = question
            self.ledger.publish(
                run.key, status_update(view_of_question(run.task_id, run.context_id, question))
            )
            run.asked.set()

        async def turn() -> TurnResult:
            self.active[run.key] = run
            try:
                async with stack:
                    return await consume(events, asked)
            finally:
                del self.active[run.key]

        await launch(self.ledger, self.ctx.background, self.lookup.find, run, turn)
        return run

    async def answer_question(
        self, caller: Caller, send: SendParams, question: ElicitationRequest
    ) -> Run | None:
        """Answer the question holding the task's turn; its run (if this process
        has it) goes on and is returned."""
        reply = parse_elicitation_answer(send, question)
        key = (caller.internal(send.context_id), send.task_id)
        run = self.active.get(key)
        if run is not None:
            run.asked = trio.Event()  # the next question sets a new one
        try:
            await self.agent.answer_elicitation(
                key[0], reply.elicitation_id, action=reply.action, content=reply.content
            )
        except ElicitationError as exc:
            if run is not None:
                run.asked.set()  # still asked
            raise invalid_params(str(exc)) from exc
        self.ledger.publish(key, status_update(working(send.task_id, send.context_id)))
        return run

    async def waiting_task(
        self, caller: Caller, send: SendParams
    ) -> tuple[TaskView, list[Decision] | None]:
        """The task a follow-up names, which must wait for input; or, if it no
        longer does, the decisions the follow-up repeats: the last decision
        sent again (its answer was lost: a crash, a dropped connection), taken
        the same way. Answered as the first one was: the task as that decision
        left it, once it settles (a turn a crash interrupted resumes first)."""
        view = await self.lookup.find(caller, send.task_id)
        if view.state != INPUT_REQUIRED:
            repeated = await self.lookup.repeated_decisions(caller, send)
            if repeated is not None:
                return view, repeated
        if view.state in TERMINAL:
            raise A2AError(
                -32004,
                f"This operation is not supported: task {send.task_id!r} is {view.state};"
                " a finished task takes no more messages (send a new message in its contextId)",
            )
        if view.state != INPUT_REQUIRED:
            raise A2AError(
                -32004,
                f"This operation is not supported: task {send.task_id!r} is {view.state};"
                f" a task takes a message only while it waits for input ({INPUT_REQUIRED})",
            )
        return view, None

    async def answer_repeated(
        self,
        caller: Caller,
        send: SendParams,
        view: TaskView,
        repeated: list[Decision],
        limit: int | None,
    ) -> JsonObject:
        """A repeated decision's answer: the task, once the turn it decided has
        settled (the decisions, taken already, change nothing: they wait in
        the conversation's queue behind that turn and read how it ended)."""
        if view.state in TERMINAL or send.return_immediately:
            return {"task": view.to_json(history_length=limit)}
        run = await self.start_decisions(caller, send, repeated)
        try:
            return await self.answer(run, limit)
        except A2AError:  # it ended otherwise (failed, cancelled): the task says how
            shown = await self.lookup.find(caller, send.task_id)
            return {"task": shown.to_json(history_length=limit)}

    async def start_decisions(
        self, caller: Caller, send: SendParams, decisions: list[Decision]
    ) -> Run:
        """Run the paused task on with ``decisions``, each tied to the task's turn."""
        stored = caller.internal(send.context_id)
        run = Run(caller, (stored, send.task_id), send.task_id, send.context_id)
        self.ledger.start(run.key)

        async def turn() -> TurnResult:
            # One ``decision`` line, as the native API logs one: ``finished`` or
            # ``awaiting_approval`` (the turn went on, or calls still wait),
            # ``failed:<code>`` when it ran on and failed, ``refused:<code>``
            # when nothing was decided.
            began = time.perf_counter()
            result: TurnResult | None = None
            outcome = "failed:internal_error"  # replaced unless something unforeseen
            try:
                for decision in decisions:
                    result = await self.agent.decide(
                        stored,
                        decision.call_id,
                        approve=decision.approve,
                        reason=decision.reason,
                        idempotency_key=send.task_id,
                    )
            except TurnError as exc:
                outcome = f"failed:{exc.code}"
                raise
            except (AgentikError, ValueError) as exc:
                code = (
                    getattr(exc, "code", None) or to_http_error(exc, caller, send.context_id).code
                )
                outcome = f"refused:{code}"
                raise
            else:
                assert result is not None, "parse_decisions gives at least one decision"
                outcome = result.status
            finally:
                log_decision("a2a", caller, send.context_id, outcome, began)
            return result

        await launch(self.ledger, self.ctx.background, self.lookup.find, run, turn)
        return run

    async def answer(self, run: Run, limit: int | None) -> JsonObject:
        """A blocking SendMessage's answer once its run is done (the run has
        logged the turn), or once a tool of its turn asks a question."""
        await run.settled()
        if not run.done.is_set():
            return {
                "task": (await self.lookup.find(run.caller, run.task_id)).to_json(
                    history_length=limit
                )
            }
        try:
            view = await outcome_view(self.lookup.find, run)
        except ApprovalError as exc:  # decided meanwhile by someone else
            raise invalid_params(str(exc)) from exc
        except (AgentikError, ValueError) as exc:  # overloaded, closing: as everywhere
            raise to_http_error(exc, run.caller, run.context_id) from exc
        return {"task": view.to_json(history_length=limit)}

    async def send_message(self, caller: Caller, call: RpcCall) -> JsonObject:
        send = parse_send(call.params, self.part_limit)
        limit = history_length(call.params)  # bad params refuse before anything runs
        if send.follow_up:
            view, repeated = await self.waiting_task(caller, send)
            if repeated is not None:
                return await self.answer_repeated(caller, send, view, repeated, limit)
            if view.question is not None:
                asked = await self.answer_question(caller, send, view.question)
                if asked is None or send.return_immediately:
                    shown = await self.lookup.find(caller, send.task_id)
                    return {"task": shown.to_json(history_length=limit)}
                return await self.answer(asked, limit)
            run = await self.start_decisions(caller, send, parse_decisions(send, view.waiting))
            if send.return_immediately:
                shown = working(send.task_id, send.context_id)
                return {"task": shown.to_json(history_length=limit)}
            return await self.answer(run, limit)
        run = await self.start_message(caller, send)
        if send.return_immediately:
            # Admitted; the turn runs on in the server, GetTask and ListTasks
            # follow it, and shutdown drains it like any in-flight turn.
            submitted = TaskView(send.task_id, send.context_id, "TASK_STATE_SUBMITTED", now())
            return {"task": submitted.to_json(history_length=limit)}
        return await self.answer(run, limit)

    async def stream_message(self, caller: Caller, call: RpcCall) -> EventStream:
        send = parse_send(call.params, self.part_limit)
        key = (caller.internal(send.context_id), send.task_id)
        with contextlib.ExitStack() as watching:
            updates = watching.enter_context(self.ledger.watch(key))  # before the run starts
            if send.follow_up:
                view, repeated = await self.waiting_task(caller, send)
                first: JsonObject = {"task": view.to_json()}
                if repeated is not None:
                    if view.state in TERMINAL:  # as it ended: nothing follows
                        return sse_stream(
                            call, relay(first, None), watching.pop_all(), self.heartbeat
                        )
                    await self.start_decisions(caller, send, repeated)
                elif view.question is not None:
                    await self.answer_question(caller, send, view.question)
                else:
                    await self.start_decisions(caller, send, parse_decisions(send, view.waiting))
            else:
                submitted = TaskView(send.task_id, send.context_id, "TASK_STATE_SUBMITTED", now())
                first = {"task": submitted.to_json()}
                await self.start_message(caller, send)
            return sse_stream(call, relay(first, updates), watching.pop_all(), self.heartbeat)

    async def subscribe(self, caller: Caller, call: RpcCall) -> EventStream:
        task_id = task_id_param(call.params)
        view = await self.lookup.find(caller, task_id)
        if view.state in TERMINAL:
            raise A2AError(
                -32004,
                f"This operation is not supported: task {task_id!r} is {view.state};"
                " a finished task has no updates to subscribe to (GetTask reads it)",
            )
        key = (caller.internal(view.context_id), task_id)
        with contextlib.ExitStack() as watching:
            updates = watching.enter_context(self.ledger.watch(key))
            view = await self.lookup.find(caller, task_id)  # now: no update can be missed
            current: JsonObject = {"task": view.to_json()}
            # Ended meanwhile: the task as it ended is all there is to send.
            follow = None if view.state in TERMINAL else updates
            # A task no run has may still change (see IDLE_RECHECK_SECONDS).
            recheck = Recheck(
                read=lambda: self.lookup.find(caller, task_id),
                idle=lambda: key not in self.ledger.running and not self.ledger.draining,
                state=view.state,
                waiting=tuple(call.id for call in view.waiting),
            )
            return sse_stream(
                call, relay(current, follow, recheck), watching.pop_all(), self.heartbeat
            )

    async def get_task(self, caller: Caller, call: RpcCall) -> JsonObject:
        view = await self.lookup.find(caller, task_id_param(call.params))
        return view.to_json(history_length=history_length(call.params))

    async def cancel_task(self, caller: Caller, call: RpcCall) -> JsonObject:
        task_id = task_id_param(call.params)
        view = await self.lookup.find(caller, task_id)
        if view.state in TERMINAL:
            raise A2AError(-32002, f"Task cannot be canceled: {task_id!r} is {view.state}")
        # Several nodes: the task's turn runs on its context's owner, which
        # cancels it (the request is forwarded there); not marked here.
        await claim_here(self.agent, caller, view.context_id)
        stored = caller.internal(view.context_id)
        key = (stored, task_id)
        self.ledger.mark_cancelled(key)
        canceled = TaskView(
            task_id, view.context_id, "TASK_STATE_CANCELED", now(), error="the task was canceled"
        )
        if view.state == INPUT_REQUIRED and view.question is None:  # paused for approval
            try:
                await self.agent.cancel_paused(stored, idempotency_key=task_id)
            except ApprovalError:  # no longer waits: a decision runs it on now
                await self.agent.cancel(stored, idempotency_key=task_id)
            except (AgentikError, ValueError) as exc:
                raise to_http_error(exc, caller, view.context_id) from exc
            else:
                self.ledger.publish(key, status_update(canceled))  # no run tells the watchers
        else:
            # This task's turn only (its id is the turn's key), running or queued:
            # the conversation's running turn may be another task's. A turn a
            # tool's question holds runs (in the call): cancelled like any.
            await self.agent.cancel(stored, idempotency_key=task_id)
        return canceled.to_json()

    async def list_tasks(self, caller: Caller, call: RpcCall) -> JsonObject:
        query = parse_query(call.params)
        # A seed store lists no keys (``full_storage``): what this process remembers.
        if query.context is not None and not self.agent.storage.degraded:
            page = await context_page(self.store, self.store, self.ledger, caller, query)
        else:
            page = await ledger_page(self.ledger, self.lookup.find, caller, query)
        return page_json(query, page)


def error_stream(call: RpcCall, error: A2AError) -> EventStream:
    """The answer to a stream request refused before its first event: an SSE
    stream of one ``error`` event carrying the JSON-RPC error response."""

    async def frames() -> AsyncIterator[bytes]:
        yield sse_frame(rpc_error(call.id, error), event="error")

    async def close() -> None:
        pass

    return EventStream(frames(), close, heartbeat=None)  # one frame, sent at once


def sse_stream(
    call: RpcCall,
    results: AsyncIterator[JsonObject],
    watching: contextlib.ExitStack,
    heartbeat: float | None,
) -> EventStream:
    """The SSE response of a task stream: each result a JSON-RPC response frame,
    a heartbeat after ``heartbeat`` seconds without one (``EventStream``); the
    watch ends with the stream, however it ends."""

    async def frames() -> AsyncIterator[bytes]:
        async for result in results:
            yield sse_frame(rpc_result(call.id, result))

    async def close() -> None:
        watching.close()

    return EventStream(frames(), close, heartbeat=heartbeat)
