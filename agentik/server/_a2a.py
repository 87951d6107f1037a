"""A2A 1.0 over JSON-RPC at ``POST /a2a``, and the agent card at
``/.well-known/agent-card.json``.

contextId is the conversation id, in the caller's owner scope (``_owners``):
tasks are found only through the caller's own conversations, and the ledger
keys them by the stored (owner-scoped) context id. A task is one turn: its id is the
idempotency key of the turn's user message (see ``_a2a_wire``), so GetTask
rebuilds status and answer from stored history, also after a restart; the
ledger in ``ServerContext`` only adds what history cannot show (running now,
cancelled here) and the ids ListTasks lists. Protocol errors are JSON-RPC
errors with HTTP 200; an overloaded conversation is HTTP 429 like every
other transport.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

import agentik
from agentik._errors import AgentikError, TurnError
from agentik._json import JsonObject
from agentik._messages import Message
from agentik.agent import TurnFailed, TurnFinished
from agentik.server._a2a_list import (
    MAX_TURN_MESSAGES,
    context_page,
    ledger_page,
    page_json,
    parse_query,
)
from agentik.server._a2a_wire import (
    TERMINAL,
    A2AError,
    RpcCall,
    SendParams,
    TaskView,
    agent_card,
    agent_message,
    artifact,
    context_of,
    history_length,
    is_notification,
    parse_call,
    parse_send,
    request_id_of,
    rpc_error,
    rpc_result,
    status,
    task_id_param,
    task_not_found,
    valid_context_id,
    view_from_turn,
)
from agentik.server._app import json_response
from agentik.server._context import ServerContext
from agentik.server._errors import HttpError
from agentik.server._owners import Caller, caller_of
from agentik.server._request import parse_json, read_body
from agentik.server._sse import sse_frame
from agentik.server._turns import EventStream, log_turn, open_stream, refuse
from agentik.storage import IdempotencyKeyIndex


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def a2a_routes(ctx: ServerContext) -> list[BaseRoute]:
    agent = ctx.agent
    store = agent.storage.message_store

    async def find_task(caller: Caller, task_id: str) -> TaskView:
        context_id = context_of(task_id)
        if context_id is None or not valid_context_id(context_id):
            raise task_not_found(task_id)
        stored = caller.internal(context_id)
        # The ledger says which tasks this process took; the agent says whether
        # the turn still runs (a handler cut short by a client that left never
        # cleared its ledger entry, and the turn may have ended since).
        running = (stored, task_id) in ctx.tasks.running and agent.turn_in_progress(
            stored, task_id
        )
        seq = await store.find_idempotency_key(stored, task_id)
        if seq is None:
            if running:  # accepted, its user message not stored yet
                return TaskView(task_id, context_id, "TASK_STATE_SUBMITTED", _now())
            raise task_not_found(task_id)
        turn: list[Message] = []
        async for message in store.get_messages(stored, after_seq=seq - 1):
            if (turn and message.role.value == "user") or len(turn) >= MAX_TURN_MESSAGES:
                break
            turn.append(message)
        return view_from_turn(
            task_id,
            context_id,
            turn,
            running=running,
            cancelled=(stored, task_id) in ctx.tasks.cancelled,
        )

    async def send_message(caller: Caller, call: RpcCall) -> JsonObject:
        send = parse_send(call.params)
        limit = history_length(call.params)  # bad params refuse before anything runs
        if send.return_immediately and ctx.background is not None:
            return await submit_message(caller, send, limit)
        began = time.perf_counter()
        key = (caller.internal(send.context_id), send.task_id)
        ctx.tasks.start(key)
        try:
            result = await agent.send(key[0], send.text, idempotency_key=send.task_id)
        except TurnError as exc:
            log_turn("a2a", caller, send.context_id, f"failed:{exc.code}", began)
            ctx.tasks.finish(key)
            view = await find_task(caller, send.task_id)
            return {"task": view.to_json(history_length=limit)}
        except (AgentikError, ValueError) as exc:
            ctx.tasks.finish(key)
            raise refuse("a2a", caller, send.context_id, exc, began) from exc
        ctx.tasks.finish(key)
        log_turn("a2a", caller, send.context_id, "finished", began)
        last = result.messages[-1].created_at or _now()
        view = TaskView(
            send.task_id,
            send.context_id,
            "TASK_STATE_COMPLETED",
            last,
            answer=result.text,
            history=tuple(
                m for m in result.messages if m.role.value in ("user", "assistant") and m.content
            ),
        )
        return {"task": view.to_json(history_length=limit)}

    async def submit_message(caller: Caller, send: SendParams, limit: int | None) -> JsonObject:
        """``returnImmediately``: admit the turn (or refuse it now, 429), answer
        SUBMITTED, and let the turn run on in the server's nursery; GetTask and
        ListTasks follow it, and shutdown drains it like any in-flight turn."""
        key = (caller.internal(send.context_id), send.task_id)
        ctx.tasks.start(key)
        try:
            events, stack = await open_stream(
                agent, "a2a", caller, send.context_id, send.text, send.task_id
            )
        except HttpError:
            ctx.tasks.finish(key)
            raise

        async def follow() -> None:
            try:
                async with stack:
                    async for _ in events:
                        pass
            finally:
                ctx.tasks.finish(key)

        assert ctx.background is not None
        ctx.background.start_soon(follow)
        view = TaskView(send.task_id, send.context_id, "TASK_STATE_SUBMITTED", _now())
        return {"task": view.to_json(history_length=limit)}

    async def stream_message(caller: Caller, call: RpcCall) -> EventStream:
        send = parse_send(call.params)
        task_id, context_id = send.task_id, send.context_id
        key = (caller.internal(context_id), task_id)
        ctx.tasks.start(key)
        try:
            events, stack = await open_stream(agent, "a2a", caller, context_id, send.text, task_id)
        except HttpError:
            ctx.tasks.finish(key)
            raise

        def frame(result: JsonObject) -> bytes:
            return sse_frame(rpc_result(call.id, result))

        def update(state: str, message: JsonObject | None = None) -> bytes:
            return frame(
                {
                    "statusUpdate": {
                        "taskId": task_id,
                        "contextId": context_id,
                        "status": status(state, _now(), message),
                    }
                }
            )

        async def frames() -> AsyncIterator[bytes]:
            submitted: JsonObject = {
                "id": task_id,
                "contextId": context_id,
                "status": status("TASK_STATE_SUBMITTED", _now()),
            }
            yield frame({"task": submitted})
            yield update("TASK_STATE_WORKING")
            async for event in events:
                if isinstance(event, TurnFinished):
                    ctx.tasks.finish(key)
                    yield frame(
                        {
                            "artifactUpdate": {
                                "taskId": task_id,
                                "contextId": context_id,
                                "artifact": artifact(task_id, event.result.text),
                                "lastChunk": True,
                            }
                        }
                    )
                    yield update("TASK_STATE_COMPLETED")
                elif isinstance(event, TurnFailed):
                    ctx.tasks.finish(key)
                    state = (
                        "TASK_STATE_CANCELED" if event.code == "cancelled" else "TASK_STATE_FAILED"
                    )
                    yield update(state, agent_message(event.message, context_id, task_id))

        return EventStream(frames(), stack.aclose)

    async def get_task(caller: Caller, call: RpcCall) -> JsonObject:
        view = await find_task(caller, task_id_param(call.params))
        return view.to_json(history_length=history_length(call.params))

    async def cancel_task(caller: Caller, call: RpcCall) -> JsonObject:
        task_id = task_id_param(call.params)
        view = await find_task(caller, task_id)
        if view.state in TERMINAL:
            raise A2AError(-32002, f"Task cannot be canceled: {task_id!r} is {view.state}")
        stored = caller.internal(view.context_id)
        ctx.tasks.mark_cancelled((stored, task_id))
        # This task's turn only (its id is the turn's key), running or queued:
        # the conversation's running turn may be another task's.
        agent.cancel(stored, idempotency_key=task_id)
        canceled = TaskView(
            task_id, view.context_id, "TASK_STATE_CANCELED", _now(), error="the task was canceled"
        )
        return canceled.to_json()

    async def list_tasks(caller: Caller, call: RpcCall) -> JsonObject:
        query = parse_query(call.params)
        if query.context is not None and isinstance(store, IdempotencyKeyIndex):
            page = await context_page(store, store, ctx.tasks, caller, query)
        else:
            page = await ledger_page(ctx.tasks, find_task, caller, query)
        return page_json(query, page)

    handlers = {
        "SendMessage": send_message,
        "GetTask": get_task,
        "CancelTask": cancel_task,
        "ListTasks": list_tasks,
    }

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
            if call.method == "SendStreamingMessage":
                return await stream_message(caller, call)
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
                version=agentik.__version__,
                skills=skills,
                bearer_auth=ctx.config.requires_auth,
            )
        )

    return [
        Route("/.well-known/agent-card.json", card, methods=["GET"]),
        Route("/a2a", rpc, methods=["POST"]),
    ]
