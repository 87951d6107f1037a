"""The Starlette application: routes from each transport, behind one guard.

The guard (plain ASGI, so streaming responses pass through untouched) checks
the bearer token on every path but ``/health``, refuses (400) a path or query
that is not UTF-8 once percent-decoded or a conversation id in the path
holding an encoded ``/`` (``_forward.slashed_id``), puts the request's ``Caller``
(its owner, ``_owners``) in the scope for the handlers, makes an incoming
``traceparent`` the current trace context when the agent traces
(``_tracecontext``), counts responses by status
class for ``/metrics`` and logs one line per request (method, path, status,
duration; never bodies, queries or headers). ``HttpError`` becomes a JSON
``{"error": {"code", "message"}}`` with its status. Between the guard and
the routes, with several nodes on one database, ``_forward.Forwarder`` sends
a request for a conversation another node owns on to that node (``[cluster]
forward``; docs/scale-out.md); one whose owner is known already is relayed
by the engine before the guard (``_early``, ``Guard.relay``), which logs and
counts it as the guard does.

``/health`` answers 503 ``degraded`` while the storage is failing (writes fail
for a reason of the storage and none has committed since:
``WriterStats.failing``), naming the last storage error and when it happened,
and while the storage does not answer as a turn needs it (``_health``: a
bounded read, cached for a second, and the writer's state), naming why; so a
load balancer takes the server out. It answers 200 ``degraded`` when an MCP
server is down, since turns still run without its tools.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentik._json import JsonObject, JsonValue
from agentik._version import __version__
from agentik.server._context import ServerContext
from agentik.server._early import EarlyForward
from agentik.server._forward import (
    NOT_HERE,
    Forwarder,
    came_forwarded,
    order_forward,
    order_wait,
    slashed_id,
)
from agentik.server._health import StorageProbe
from agentik.server._metrics import CONTENT_TYPE, limits_health, render_metrics
from agentik.server._owners import CALLER_KEY, DEFAULT_CALLER, Authenticator, Caller
from agentik.server._tracecontext import trace_context_hook
from agentik.server.a2a import A2aEndpoint
from agentik.server.agui import routes as agui_routes
from agentik.server.http import (
    REFUSED,
    HttpError,
    NotHere,
    Redirect,
    Relay,
    error_body,
    json_response,
    undecodable_url,
    url_text,
)
from agentik.server.native import routes as native_routes
from agentik.storage import LeaseState, StoreError

log = logging.getLogger("agentik.server")
PUBLIC_PATHS = frozenset({"/health"})


async def _store_error(_: Request, exc: Exception) -> Response:
    """A read the storage failed (a database down, frozen, gone): the server
    cannot answer now, as ``/health`` says; retry, as for a turn's ``store_error``."""
    return json_response(
        error_body("store_error", f"the storage failed: {exc}"), 503, {"Retry-After": "1"}
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    headers = exc.headers
    if isinstance(exc, NotHere):
        ordered = order_wait(request.scope)
        if ordered is not None:  # waits for the conversation's next holder (``_forward``)
            return ordered
        if came_forwarded(request.scope):  # the forwarding node waits instead
            headers = {**headers, NOT_HERE: "1"}
    if isinstance(exc, Redirect):
        ordered = order_forward(request.scope, exc.base_url)
        if ordered is not None:  # proxied to the owner instead (``_forward``)
            return ordered
        raw = request.scope.get("raw_path")  # as the client encoded it
        path = raw.decode("latin-1") if raw else request.url.path
        query = request.url.query
        headers = {**headers, "Location": exc.base_url + path + ("?" + query if query else "")}
    return json_response(error_body(exc.code, exc.message), exc.status, headers)


_CLOSE = (b"connection", b"close")
_RETRY_AFTER = (b"retry-after", b"1")


def _says_when(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(name.lower() == b"retry-after" for name, _ in headers)


def _has_body(scope: Scope) -> bool:
    """Whether the request declares a body (Content-Length above 0, or chunked)."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.strip(b"0 \t"):
            return True
        if name == b"transfer-encoding":
            return True
    return False


SLASHED_ID = (
    "a conversation id in the path cannot hold '/' (sent as %2F): the routes read it"
    " as a path separator"
)


class Guard:
    """Auth, counting and the access log around the whole app.

    A response that starts before the request body was read whole (a refusal:
    401, a bad path, 413, a bad id) carries ``Connection: close``: the server
    closes such a connection after the response, and a client told so does
    not send its next request into a closed socket."""

    def __init__(
        self, app: ASGIApp, ctx: ServerContext, *, drain: Callable[[], None] = lambda: None
    ) -> None:
        self.app = app
        self.ctx = ctx
        self.drain = drain
        """Called once the server stops taking turns: a protocol's streams that
        would wait for what cannot come now end (A2A's idle task watchers)."""
        self.auth = Authenticator.from_config(ctx.config)
        self.trace_context = trace_context_hook(ctx.agent)
        self.relay: Relay | None = None
        """For the engine (``serve(..., relay=…)``): the requests it relays
        before this guard sees them (``_early``: a known owner's)."""

    def _caller(self, scope: Scope) -> Caller | None:
        if scope["path"] in PUBLIC_PATHS:
            return DEFAULT_CALLER  # /health names no conversation
        header = next((v for n, v in scope["headers"] if n == b"authorization"), None)
        return self.auth.caller(header)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = 0
        body_unread = _has_body(scope)

        async def receive_tracked() -> Message:
            nonlocal body_unread
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_unread = False
            return message

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if status == 503 and not _says_when(message["headers"]):
                    # Every 503 says when to retry (RFC 9110 §15.6.4): a client or
                    # balancer that gets none may retry at once, and in a loop.
                    message = {**message, "headers": [*message["headers"], _RETRY_AFTER]}
                if body_unread:  # refused before the body was read: the server will
                    # close the connection (h11 cannot skip the rest), so say so
                    message = {**message, "headers": [*message["headers"], _CLOSE]}
            await send(message)

        leave = None if self.trace_context is None else self.trace_context(scope)
        try:
            caller = self._caller(scope)
            problem = undecodable_url(scope)
            if problem is None and slashed_id(scope.get("raw_path") or b""):
                problem = SLASHED_ID
            if caller is not None and problem is None:
                scope[CALLER_KEY] = caller
                await self.app(scope, receive_tracked, send_counted)
            elif caller is None:
                refusal = json_response(
                    error_body(
                        "unauthorized", "a valid 'Authorization: Bearer <token>' is required"
                    ),
                    401,
                    {"WWW-Authenticate": "Bearer"},
                )
                await refusal(scope, receive, send_counted)
            else:
                refusal = json_response(error_body("invalid_path", str(problem)), 400)
                await refusal(scope, receive, send_counted)
        finally:
            if leave is not None:
                leave()
            if not status:  # the server refused the request's body itself (400, 431, 408)
                status = scope.get(REFUSED, 0)
            self.ctx.http_requests[f"{status // 100}xx" if status else "aborted"] += 1
            log.info(
                "request method=%s path=%s status=%s ms=%.1f",
                scope["method"],
                scope["path"],
                status or "-",
                (time.perf_counter() - began) * 1000,
            )


def lease_health(lease: LeaseState) -> JsonObject:
    """``/health``'s ``lease``: what the node holds, how old its lease is, and
    the last renewal error (several nodes on PostgreSQL; docs/scale-out.md)."""
    error: JsonValue = None
    if lease.last_error is not None:
        ago = lease.last_error_seconds_ago
        error = {"message": lease.last_error, "seconds_ago": None if ago is None else round(ago, 3)}
    renewed = lease.renewed_seconds_ago
    return {
        "node_id": lease.node_id,
        "valid": lease.valid,
        "conversations": lease.conversations,
        "shards": lease.shards,
        "releasing_shards": lease.releasing,
        "total_shards": lease.total_shards,
        "lease_seconds": lease.lease_seconds,
        "renewed_seconds_ago": None if renewed is None else round(renewed, 3),
        "valid_for_seconds": round(lease.valid_for_seconds, 3),
        "live_nodes": lease.live_nodes,
        "last_renewal_error": error,
    }


def _health_routes(ctx: ServerContext) -> list[BaseRoute]:
    probe = StorageProbe(ctx.agent.storage, ctx.writer_gauges)

    async def health(_: Request) -> Response:
        status = 200
        body: JsonObject = {
            "status": "ok",
            "version": __version__,
            "storage": ctx.storage_label,
            "model": ctx.model_label,
            "demo_model": ctx.demo_model,
            "uptime_seconds": round(ctx.uptime, 3),
            "live_conversations": ctx.agent.live_conversations,
        }
        scheduler = ctx.agent.model_scheduler
        if scheduler is not None:
            body["model_limits"] = limits_health(scheduler)
        if ctx.demo_model:
            body["warning"] = (
                "no model is configured: answers come from the built-in scripted demo model"
            )
        if ctx.mcp:
            servers: list[JsonValue] = []
            for source in ctx.mcp:
                health = source.health
                servers.append(
                    {
                        "name": health.name,
                        "state": health.state.value,
                        "tools": health.tools,
                        "restarts": health.restarts,
                        "last_error": health.last_error,
                    }
                )
                if health.state.value in ("failed", "restarting"):
                    body["status"] = "degraded"
            body["mcp"] = servers
        if ctx.a2a:
            agents: list[JsonValue] = []
            for agent in ctx.a2a:
                a2a_health = agent.health
                agents.append(
                    {
                        "name": a2a_health.name,
                        "url": a2a_health.url,
                        "state": a2a_health.state.value,
                        "streaming": a2a_health.streaming,
                        "skills": a2a_health.skills,
                        "calls": a2a_health.calls,
                        "last_error": a2a_health.last_error,
                    }
                )
                if a2a_health.state.value == "unreachable":
                    body["status"] = "degraded"
            body["a2a"] = agents
        ownership = ctx.agent.storage.ownership
        if ownership is not None:
            lease = ownership.lease_state()
            body["lease"] = lease_health(lease)
            if not lease.valid:
                # Turns here would be refused (its claims lapsed): out of the
                # balancer's rotation until the node has joined again.
                body["status"] = "degraded"
                status = 503
        answer = await probe.check(ctx.background)  # first: it may find writes work again
        writer = ctx.writer_gauges()
        if writer is not None and writer.failing:
            body["status"] = "degraded"
            at = writer.last_error_at
            body["storage_error"] = {
                "message": writer.last_error,
                "at": None if at is None else at.isoformat(),
            }
            status = 503
        if answer.ok:
            body["storage_probe"] = {"ok": True, "ms": answer.ms}
        else:
            body["status"] = "degraded"
            body["storage_probe"] = {
                "ok": False,
                "error": answer.error,
                "at": answer.at.isoformat(),
            }
            status = 503
        return json_response(body, status, {"Retry-After": "1"} if status == 503 else None)

    async def metrics(_: Request) -> Response:
        text = render_metrics(
            ctx.agent.stats,
            uptime=ctx.uptime,
            http_requests=dict(ctx.http_requests),
            writer=ctx.writer_gauges(),
            scheduler=ctx.agent.model_scheduler,
            reserve=ctx.reserve_counts,
        )
        return Response(text, media_type=CONTENT_TYPE)

    return [Route("/health", health, methods=["GET"]), Route("/metrics", metrics, methods=["GET"])]


def build_app(ctx: ServerContext) -> ASGIApp:
    """The whole HTTP surface for one agent."""
    return mount(ctx)


def slash_redirect(scope: Scope, routes: Sequence[BaseRoute]) -> str | None:
    """For a path no route takes that ends in ``/``: the path as the client
    sent it (its raw bytes, its query), less the trailing ``/``, when a route
    takes that; else None. Starlette's own redirect wrote the decoded path
    back, decoding the id once more: ``a%2541/`` (the id ``a%41``) went to
    ``a%41``, the id ``aA``, another conversation."""
    raw: bytes = scope.get("raw_path") or b""
    stripped = raw.rstrip(b"/")
    if not stripped or stripped == raw:
        return None
    trimmed = {**scope, "path": url_text(stripped)}  # the guard let only UTF-8 through
    if all(route.matches(trimmed)[0] is Match.NONE for route in routes):
        return None
    query: bytes = scope.get("query_string", b"")
    return (stripped + b"?" + query if query else stripped).decode("ascii")


def mount(ctx: ServerContext) -> Guard:
    """``build_app``, with the app's ``drain`` for the server's shutdown."""

    async def not_found(request: Request, __: Exception) -> Response:
        moved = slash_redirect(request.scope, routes.router.routes)
        if moved is not None:
            return Response(status_code=307, headers={"location": moved})
        return json_response(error_body("not_found", "no such endpoint"), 404)

    async def not_allowed(request: Request, __: Exception) -> Response:
        return json_response(
            error_body("method_not_allowed", f"method {request.method} is not allowed here"), 405
        )

    a2a_endpoint = A2aEndpoint(ctx)
    routes = Starlette(
        routes=[
            *_health_routes(ctx),
            *native_routes(ctx),
            *agui_routes(ctx),
            *a2a_endpoint.routes(),
        ],
        exception_handlers={
            HttpError: _http_error,
            StoreError: _store_error,
            404: not_found,
            405: not_allowed,
        },
    )
    routes.router.redirect_slashes = False  # it decodes the id once: ``slash_redirect``
    ownership = None if ctx.peers is None else ctx.agent.storage.ownership
    if ctx.peers is None or not ctx.config.forward or ownership is None:
        return Guard(routes, ctx, drain=a2a_endpoint.stop_idle_watchers)
    body_limit = ctx.config.limits.max_body_bytes
    forwarder = Forwarder(
        routes,
        ctx.peers,
        node=ownership.lease_state().node_id,
        takeover_wait=ctx.config.takeover_seconds,
        body_limit=body_limit,
        ownership=ownership,
        own_url=lambda: ctx.config.advertise_url or ctx.base_url,
    )
    guard = Guard(forwarder, ctx, drain=a2a_endpoint.stop_idle_watchers)
    guard.relay = EarlyForward(forwarder, guard.auth, ctx.http_requests, body_limit=body_limit)
    return guard
