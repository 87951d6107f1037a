"""A2A 1.0 over JSON-RPC at ``POST /a2a``, and the agent card at
``/.well-known/agent-card.json``.

contextId is the conversation id, in the caller's owner scope (``_owners``):
tasks are found only through the caller's own conversations, and the ledger
keys them by the stored (owner-scoped) context id. A task is one turn: its id is the
idempotency key of the turn's user message (see ``_a2a_wire``), so GetTask
rebuilds status and answer from stored history and the turn's record, also
after a restart; the ledger in ``ServerContext`` only adds what history
cannot show (running now, cancelled here) and the ids ListTasks lists.

A task whose turn waits for a person's approval is INPUT_REQUIRED; the
client's next message on it (``message.taskId``) decides, through
``agent.decide`` tied to the task's key, and the task goes on. A task whose
running turn a tool's question holds (MCP elicitation) is INPUT_REQUIRED too,
with the question; the next message answers it (``agent.answer_elicitation``)
and the same run goes on. Turns run in
the server's nursery (``_a2a_tasks``): a blocking SendMessage waits for its
run, a streamed one and SubscribeToTask relay what the run publishes.
Protocol errors are JSON-RPC errors with HTTP 200; an overloaded
conversation is HTTP 429 like every other transport.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import attrs
import trio

from agentik._errors import AgentikError, ApprovalError, TurnError
from agentik._json import JsonObject
from agentik._messages import Message
from agentik._version import __version__
from agentik.agent import ElicitationError, ElicitationRequest, TurnResult
from agentik.server._context import ServerContext, TaskKey
from agentik.server._decisions import log_decision
from agentik.server._owners import Caller, caller_of
from agentik.server._turns import open_stream, to_http_error
from agentik.server.a2a._list import (
    MAX_TURN_MESSAGES,
    context_page,
    ledger_page,
    page_json,
    parse_query,
    will_resume,
)
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
from agentik.server.a2a._wire import (
    INPUT_REQUIRED,
    TERMINAL,
    A2AError,
    Decision,
    RpcCall,
    SendParams,
    TaskView,
    agent_card,
    context_of,
    history_length,
    invalid_params,
    is_finished,
    is_notification,
    parse_call,
    parse_decisions,
    parse_elicitation_answer,
    parse_send,
    request_id_of,
    retried_decisions,
    rpc_error,
    rpc_result,
    task_id_param,
    task_not_found,
    valid_context_id,
    view_from_turn,
)
from agentik.server.http import (
    BaseRoute,
    EventStream,
    HttpError,
    Request,
    Response,
    Route,
    json_response,
    parse_json,
    read_body,
    sse_frame,
)


def a2a_routes(ctx: ServerContext) -> list[BaseRoute]:
    agent = ctx.agent
    store = agent.storage.message_store
    ledger = ctx.tasks
    heartbeat = ctx.config.sse_heartbeat

    ledger.turn_runs = lambda key: agent.turn_in_progress(*key)
    ledger.turn_resumes = lambda stored, seq: agent.resumes_interrupted(stored, seq)
    active: dict[TaskKey, Run] = {}
    """The runs of new messages while they run: where a tool's question is told."""

    def in_progress(key: TaskKey) -> bool:
        """Whether a run of this process has the task's turn (see ``_a2a_tasks``:
        a run always ends, with its turn, so its entry never outlives it; a
        decision's run counts from its start, before the agent has it), or the
        agent runs it on after a decision made over another transport."""
        return ledger.runs(key)

    async def find_task(caller: Caller, task_id: str) -> TaskView:
        context_id = context_of(task_id)
        if context_id is None or not valid_context_id(context_id):
            raise task_not_found(task_id)
        stored = caller.internal(context_id)
        key = (stored, task_id)
        running = in_progress(key)
        seq = await store.find_idempotency_key(stored, task_id)
        if seq is None:
            if running:  # accepted, its user message not stored yet
                return TaskView(task_id, context_id, "TASK_STATE_SUBMITTED", now())
            raise task_not_found(task_id)
        turn = await read_turn(stored, seq)
        record = None
        resumes = False
        if not running and not is_finished(turn):
            record = await store.turn_record(stored, seq)  # waiting, cancelled, failed
            resumes = await will_resume(store, ledger, stored, turn, record)
            # Started while we read (a decision over another transport): what
            # we read may be the turn mid-run, not a turn that stopped.
            running = in_progress(key)
        view = view_from_turn(
            task_id,
            context_id,
            turn,
            running=running,
            cancelled=key in ledger.cancelled,
            record=record,
            resumes=resumes,
        )
        if running and (question := await asked_now(key)) is not None:
            view = attrs.evolve(view, state=INPUT_REQUIRED, question=question)
        return view

    async def read_turn(stored: str, seq: int) -> list[Message]:
        """The turn whose user message is ``seq``: it and what follows, up to
        the next user message (at most ``MAX_TURN_MESSAGES``)."""
        turn: list[Message] = []
        async for message in store.get_messages(stored, after_seq=seq - 1):
            if (turn and message.role.value == "user") or len(turn) >= MAX_TURN_MESSAGES:
                break
            turn.append(message)
        return turn

    async def asked_now(key: TaskKey) -> ElicitationRequest | None:
        """The question the task's run was told of, if it still waits."""
        run = active.get(key)
        if run is None or run.question is None:
            return None
        waiting = await agent.pending_elicitations(key[0])
        return run.question if run.question in waiting else None

    async def start_message(caller: Caller, send: SendParams) -> Run:
        """Admit a new message's turn (or refuse it now: 429, 503, 422) and run it."""
        run = Run(
            caller, (caller.internal(send.context_id), send.task_id), send.task_id, send.context_id
        )
        ledger.start(run.key)
        try:
            events, stack = await open_stream(
                agent, "a2a", caller, send.context_id, send.text, send.task_id
            )
        except HttpError:
            ledger.finish(run.key)
            raise

        def asked(question: ElicitationRequest) -> None:
            run.question = question
            ledger.publish(
                run.key, status_update(view_of_question(run.task_id, run.context_id, question))
            )
            run.asked.set()

        async def turn() -> TurnResult:
            active[run.key] = run
            try:
                async with stack:
                    return await consume(events, asked)
            finally:
                del active[run.key]

        await launch(ctx, find_task, run, turn)
        return run

    async def answer_question(
        caller: Caller, send: SendParams, question: ElicitationRequest
    ) -> Run | None:
        """Answer the question holding the task's turn; its run (if this process
        has it) goes on and is returned."""
        reply = parse_elicitation_answer(send, question)
        key = (caller.internal(send.context_id), send.task_id)
        run = active.get(key)
        if run is not None:
            run.asked = trio.Event()  # the next question sets a new one
        try:
            await agent.answer_elicitation(
                key[0], reply.elicitation_id, action=reply.action, content=reply.content
            )
        except ElicitationError as exc:
            if run is not None:
                run.asked.set()  # still asked
            raise invalid_params(str(exc)) from exc
        ledger.publish(key, status_update(working(send.task_id, send.context_id)))
        return run

    async def waiting_task(
        caller: Caller, send: SendParams
    ) -> tuple[TaskView, list[Decision] | None]:
        """The task a follow-up names, which must wait for input; or, if it no
        longer does, the decisions the follow-up repeats: the last decision
        sent again (its answer was lost: a crash, a dropped connection), taken
        the same way. Answered as the first one was: the task as that decision
        left it, once it settles (a turn a crash interrupted resumes first)."""
        view = await find_task(caller, send.task_id)
        if view.state != INPUT_REQUIRED:
            repeated = await repeated_decisions(caller, send)
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

    async def repeated_decisions(caller: Caller, send: SendParams) -> list[Decision] | None:
        """The decisions ``send`` repeats (``retried_decisions``), None if none."""
        stored = caller.internal(send.context_id)
        seq = await store.find_idempotency_key(stored, send.task_id)
        if seq is None:
            return None
        turn = await read_turn(stored, seq)
        return retried_decisions(send, turn, await store.turn_record(stored, seq))

    async def answer_repeated(
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
        run = await start_decisions(caller, send, repeated)
        try:
            return await answer(run, limit)
        except A2AError:  # it ended otherwise (failed, cancelled): the task says how
            shown = await find_task(caller, send.task_id)
            return {"task": shown.to_json(history_length=limit)}

    async def start_decisions(caller: Caller, send: SendParams, decisions: list[Decision]) -> Run:
        """Run the paused task on with ``decisions``, each tied to the task's turn."""
        stored = caller.internal(send.context_id)
        run = Run(caller, (stored, send.task_id), send.task_id, send.context_id)
        ledger.start(run.key)

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
                    result = await agent.decide(
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

        await launch(ctx, find_task, run, turn)
        return run

    async def answer(run: Run, limit: int | None) -> JsonObject:
        """A blocking SendMessage's answer once its run is done (the run has
        logged the turn), or once a tool of its turn asks a question."""
        await run.settled()
        if not run.done.is_set():
            return {
                "task": (await find_task(run.caller, run.task_id)).to_json(history_length=limit)
            }
        try:
            view = await outcome_view(find_task, run)
        except ApprovalError as exc:  # decided meanwhile by someone else
            raise invalid_params(str(exc)) from exc
        except (AgentikError, ValueError) as exc:  # overloaded, closing: as everywhere
            raise to_http_error(exc, run.caller, run.context_id) from exc
        return {"task": view.to_json(history_length=limit)}

    async def send_message(caller: Caller, call: RpcCall) -> JsonObject:
        send = parse_send(call.params)
        limit = history_length(call.params)  # bad params refuse before anything runs
        if send.follow_up:
            view, repeated = await waiting_task(caller, send)
            if repeated is not None:
                return await answer_repeated(caller, send, view, repeated, limit)
            if view.question is not None:
                asked = await answer_question(caller, send, view.question)
                if asked is None or send.return_immediately:
                    shown = await find_task(caller, send.task_id)
                    return {"task": shown.to_json(history_length=limit)}
                return await answer(asked, limit)
            run = await start_decisions(caller, send, parse_decisions(send, view.waiting))
            if send.return_immediately:
                shown = working(send.task_id, send.context_id)
                return {"task": shown.to_json(history_length=limit)}
            return await answer(run, limit)
        run = await start_message(caller, send)
        if send.return_immediately:
            # Admitted; the turn runs on in the server, GetTask and ListTasks
            # follow it, and shutdown drains it like any in-flight turn.
            submitted = TaskView(send.task_id, send.context_id, "TASK_STATE_SUBMITTED", now())
            return {"task": submitted.to_json(history_length=limit)}
        return await answer(run, limit)

    async def stream_message(caller: Caller, call: RpcCall) -> EventStream:
        send = parse_send(call.params)
        key = (caller.internal(send.context_id), send.task_id)
        with contextlib.ExitStack() as watching:
            updates = watching.enter_context(ledger.watch(key))  # before the run starts
            if send.follow_up:
                view, repeated = await waiting_task(caller, send)
                first: JsonObject = {"task": view.to_json()}
                if repeated is not None:
                    if view.state in TERMINAL:  # as it ended: nothing follows
                        return sse_stream(call, relay(first, None), watching.pop_all(), heartbeat)
                    await start_decisions(caller, send, repeated)
                elif view.question is not None:
                    await answer_question(caller, send, view.question)
                else:
                    await start_decisions(caller, send, parse_decisions(send, view.waiting))
            else:
                submitted = TaskView(send.task_id, send.context_id, "TASK_STATE_SUBMITTED", now())
                first = {"task": submitted.to_json()}
                await start_message(caller, send)
            return sse_stream(call, relay(first, updates), watching.pop_all(), heartbeat)

    async def subscribe(caller: Caller, call: RpcCall) -> EventStream:
        task_id = task_id_param(call.params)
        view = await find_task(caller, task_id)
        if view.state in TERMINAL:
            raise A2AError(
                -32004,
                f"This operation is not supported: task {task_id!r} is {view.state};"
                " a finished task has no updates to subscribe to (GetTask reads it)",
            )
        key = (caller.internal(view.context_id), task_id)
        with contextlib.ExitStack() as watching:
            updates = watching.enter_context(ledger.watch(key))
            view = await find_task(caller, task_id)  # now: no update can be missed
            current: JsonObject = {"task": view.to_json()}
            # Ended meanwhile: the task as it ended is all there is to send.
            follow = None if view.state in TERMINAL else updates
            # A task no run has may still change (see IDLE_RECHECK_SECONDS).
            recheck = Recheck(
                read=lambda: find_task(caller, task_id),
                idle=lambda: key not in ledger.running and not ledger.draining,
                state=view.state,
                waiting=tuple(call.id for call in view.waiting),
            )
            return sse_stream(call, relay(current, follow, recheck), watching.pop_all(), heartbeat)

    async def get_task(caller: Caller, call: RpcCall) -> JsonObject:
        view = await find_task(caller, task_id_param(call.params))
        return view.to_json(history_length=history_length(call.params))

    async def cancel_task(caller: Caller, call: RpcCall) -> JsonObject:
        task_id = task_id_param(call.params)
        view = await find_task(caller, task_id)
        if view.state in TERMINAL:
            raise A2AError(-32002, f"Task cannot be canceled: {task_id!r} is {view.state}")
        stored = caller.internal(view.context_id)
        key = (stored, task_id)
        ledger.mark_cancelled(key)
        canceled = TaskView(
            task_id, view.context_id, "TASK_STATE_CANCELED", now(), error="the task was canceled"
        )
        if view.state == INPUT_REQUIRED and view.question is None:  # paused for approval
            try:
                await agent.cancel_paused(stored, idempotency_key=task_id)
            except ApprovalError:  # no longer waits: a decision runs it on now
                await agent.cancel(stored, idempotency_key=task_id)
            except (AgentikError, ValueError) as exc:
                raise to_http_error(exc, caller, view.context_id) from exc
            else:
                ledger.publish(key, status_update(canceled))  # no run tells the watchers
        else:
            # This task's turn only (its id is the turn's key), running or queued:
            # the conversation's running turn may be another task's. A turn a
            # tool's question holds runs (in the call): cancelled like any.
            await agent.cancel(stored, idempotency_key=task_id)
        return canceled.to_json()

    async def list_tasks(caller: Caller, call: RpcCall) -> JsonObject:
        query = parse_query(call.params)
        # A seed store lists no keys (``full_storage``): what this process remembers.
        if query.context is not None and not agent.storage.degraded:
            page = await context_page(store, store, ledger, caller, query)
        else:
            page = await ledger_page(ledger, find_task, caller, query)
        return page_json(query, page)

    handlers = {
        "SendMessage": send_message,
        "GetTask": get_task,
        "CancelTask": cancel_task,
        "ListTasks": list_tasks,
    }
    streams = {"SendStreamingMessage": stream_message, "SubscribeToTask": subscribe}

    async def rpc(request: Request) -> Response | EventStream:
        caller = caller_of(request)
        body = await read_body(request, ctx.config.limits.max_body_bytes)
        try:
            payload = parse_json(body)
        except HttpError as exc:
            return json_response(
                rpc_error(None, A2AError(-32700, f"Invalid JSON payload: {exc.message}"))
            )
        notification = is_notification(payload)
        try:
            call = parse_call(payload, request.headers.get("a2a-version"))
            if notification:
                return Response(status_code=204)  # JSON-RPC 2.0 §4.1: nothing runs, no reply
            if call.method in streams:
                try:
                    return await streams[call.method](caller, call)
                except A2AError as exc:
                    # A stream was asked for: its error is the stream's one event,
                    # as the A2A reference servers answer (SDK clients read either).
                    return error_stream(call, exc)
            result = await handlers[call.method](caller, call)
        except A2AError as exc:
            if notification and exc.code != -32600:
                return Response(status_code=204)
            return json_response(rpc_error(request_id_of(payload), exc))
        return json_response(rpc_result(call.id, result))

    async def card(request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        skills = [(c.name, c.description) for c in agent.contributions]
        return json_response(
            agent_card(
                url=f"{base}/a2a",
                name="agentik",
                description="An agentik agent: conversations with tools and toolsets.",
                version=__version__,
                skills=skills,
                bearer_auth=ctx.config.requires_auth,
            )
        )

    return [
        Route("/.well-known/agent-card.json", card, methods=["GET"]),
        Route("/a2a", rpc, methods=["POST"]),
    ]


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
