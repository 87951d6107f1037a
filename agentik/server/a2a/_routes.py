"""A2A 1.0 over JSON-RPC at ``POST /a2a``, and the agent card at
``/.well-known/agent-card.json``.

contextId is the conversation id, in the caller's owner scope (``_owners``):
tasks are found only through the caller's own conversations, and the ledger
keys them by the stored (owner-scoped) context id. A task is one turn: its id is the
idempotency key of the turn's user message (see ``_rpc``), so GetTask
rebuilds status and answer from stored history and the turn's record, also
after a restart; the ledger (``_ledger``) only adds what history
cannot show (running now, cancelled here) and the ids ListTasks lists.

A task whose turn waits for a person's approval is INPUT_REQUIRED; the
client's next message on it (``message.taskId``) decides, through
``agent.decide`` tied to the task's key, and the task goes on. A task whose
running turn a tool's question holds (MCP elicitation) is INPUT_REQUIRED too,
with the question; the next message answers it (``agent.answer_elicitation``)
and the same run goes on. Turns run in
the server's nursery (``_tasks``): a blocking SendMessage waits for its
run, a streamed one and SubscribeToTask relay what the run publishes.
Protocol errors are JSON-RPC errors with HTTP 200; an overloaded
conversation is HTTP 429 like every other transport.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentik._json import JsonObject
from agentik._version import __version__
from agentik.server._content import input_modes
from agentik.server._context import ServerContext
from agentik.server._owners import Caller, caller_of
from agentik.server.a2a._ledger import TaskLedger
from agentik.server.a2a._lookup import TaskLookup
from agentik.server.a2a._methods import A2aMethods, error_stream
from agentik.server.a2a._rpc import (
    A2AError,
    RpcCall,
    is_notification,
    parse_call,
    request_id_of,
    rpc_error,
    rpc_result,
)
from agentik.server.a2a._views import (
    agent_card,
)
from agentik.server.http import (
    EventStream,
    HttpError,
    json_response,
    parse_json,
    read_body,
)


class A2aEndpoint:
    """``POST /a2a`` (JSON-RPC) and the agent card: parses each call and hands
    it to ``A2aMethods``. Built once per app; the ledger it builds is given
    the agent's view of turns in its constructor (``turn_runs``,
    ``turn_resumes``): a decision over another transport runs a task on, a
    turn a crash interrupted is resumed."""

    def __init__(self, ctx: ServerContext) -> None:
        agent = ctx.agent
        self.ledger = TaskLedger(
            turn_runs=lambda key: agent.turn_in_progress(*key),
            turn_resumes=lambda stored, seq: agent.resumes_interrupted(stored, seq),
        )
        self.methods = methods = A2aMethods(ctx, self.ledger, TaskLookup(agent, self.ledger))
        self.agent = agent
        self.limit = ctx.config.limits.max_body_bytes
        self.bearer_auth = ctx.config.requires_auth
        self.handlers: dict[str, Callable[[Caller, RpcCall], Awaitable[JsonObject]]] = {
            "SendMessage": methods.send_message,
            "GetTask": methods.get_task,
            "CancelTask": methods.cancel_task,
            "ListTasks": methods.list_tasks,
        }
        self.streams: dict[str, Callable[[Caller, RpcCall], Awaitable[EventStream]]] = {
            "SendStreamingMessage": methods.stream_message,
            "SubscribeToTask": methods.subscribe,
        }

    async def rpc(self, request: Request) -> Response | EventStream:
        caller = caller_of(request)
        body = await read_body(request, self.limit)
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
            if call.method in self.streams:
                try:
                    return await self.streams[call.method](caller, call)
                except A2AError as exc:
                    # A stream was asked for: its error is the stream's one event,
                    # as the A2A reference servers answer (SDK clients read either).
                    return error_stream(call, exc)
            result = await self.handlers[call.method](caller, call)
        except A2AError as exc:
            if notification and exc.code != -32600:
                return Response(status_code=204)
            return json_response(rpc_error(request_id_of(payload), exc))
        return json_response(rpc_result(call.id, result))

    async def card(self, request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        skills = [(c.name, c.description) for c in self.agent.contributions]
        return json_response(
            agent_card(
                url=f"{base}/a2a",
                name="agentik",
                description="An agentik agent: conversations with tools and toolsets.",
                version=__version__,
                skills=skills,
                bearer_auth=self.bearer_auth,
                input_modes=input_modes(self.agent.accepts_parts),
            )
        )

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/.well-known/agent-card.json", self.card, methods=["GET"]),
            Route("/a2a", self.rpc, methods=["POST"]),
        ]

    def stop_idle_watchers(self) -> None:
        """Shutting down: streams watching a task that nothing runs (a
        subscription to a task waiting for input) end now rather than hold
        the drain for ``graceful_timeout`` (``TaskLedger.stop_idle_watchers``)."""
        self.ledger.stop_idle_watchers()
