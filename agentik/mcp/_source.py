"""``McpToolset``: one MCP server as a toolset source, and the task that keeps it connected.

The manager task (``run``) owns the connection: it launches or connects,
initializes, lists the tools, publishes them as one ``ToolsetContribution``,
then waits for a change (``tools/list_changed``), a lost connection or a
suspected hang, and restarts with exponential backoff after any fault. A
fault is contained here: it is logged, shown in ``health``, and turned into
error results for the model; it never propagates to the agent.

Invariants:
- ``contribution`` is always a valid contribution and the same object until
  the listing changes (the agent compares by identity); before any listing it
  holds one tool named after the toolset that explains why nothing is there.
- The toolset name never changes once chosen, across restarts and refreshes.
- A tool handler never waits on a server that is down: it answers with an
  error at once. The only wait is a lazy server's first launch, bounded by
  ``connect_timeout``; a call itself is bounded by ``call_timeout``, which
  stands still while a person answers a question the call raised (a
  server's elicitation, or agentik's own step-up authorization), itself
  bounded by ``elicitation_timeout``.
- Tasks: only ``run`` and, during a connection, its listener child. Callers'
  tasks only send requests over the live session; a step-up authorization
  receives its redirect in a child of the request's own task, gone when the
  question ends.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import json
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import NoReturn, final
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx2
import mcp.types as mt
import trio
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.auth import AuthorizationCodeResult
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentik._errors import AgentikError, ToolError
from agentik._groups import innermost
from agentik._json import JsonObject
from agentik.agent import (
    ElicitationAction,
    ElicitationError,
    ElicitationRequest,
    current_tool_call,
    form_answer,
)
from agentik.mcp._auth import (
    LoginError,
    LoginRequired,
    StepUpRefused,
    oauth_provider,
    receive_redirect,
)
from agentik.mcp._config import HttpServer, McpServerConfig
from agentik.mcp._credentials import McpCredentials
from agentik.mcp._naming import one_line, tool_names, toolset_name
from agentik.mcp._render import render_result
from agentik.mcp._tokens import McpTokenVault, token_key
from agentik.mcp._transport import CLIENT_INFO, HttpTrace, StderrTail, open_transport
from agentik.storage import in_memory_storage
from agentik.toolsets import NamedTool, ToolsetContribution, validator_for

logger = logging.getLogger("agentik.mcp")

_MAX_PAGES = 100
"""A tools/list pagination that never ends is a faulty server, not a long listing."""
_PROBE_TIMEOUT = 10.0
"""How long a suspected-hung server gets to answer tools/list before it is restarted
(less when ``call_timeout`` is shorter, but at least 2 s: a live server answers at once)."""


class McpState(enum.Enum):
    """Where a server's manager task is."""

    IDLE = "idle"
    """Lazy server, not running; tools known from the start-up listing."""
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    """The last attempt failed; waiting out the backoff before the next one."""
    RESTARTING = "restarting"
    STOPPED = "stopped"


@attrs.frozen(kw_only=True)
class McpHealth:
    """A snapshot of one server for ``/health``."""

    name: str
    state: McpState
    last_error: str | None
    """Why the last connection or attempt ended, or the last unreadable message."""
    restarts: int
    tools: int
    protocol_version: str | None
    reports: tuple[str, ...]
    """Tool renames caused by name collisions in the current listing, and tools that
    cannot be called because their input schema is unusable."""


@attrs.frozen
class _Era:
    """How the last good connection settled the protocol, to reconnect the same way.

    ``auto`` costs a ``server/discover`` probe, a wasted round trip against a
    server of the current stable version (2025-11-25), which answers it with
    an error before the ``initialize`` handshake. The SDK has no other way
    to learn the era, so the first connection probes and later ones reuse
    the answer: the handshake (``legacy``), or the modern version with its
    discover result (``prior_discover``). It is forgotten when a connection
    made with it fails before its tools are listed (the server changed).
    """

    mode: str
    discover: mt.DiscoverResult | None


@attrs.define(eq=False)
class _InFlight:
    """A tool call waiting on the server: whose it is and the timeouts to stop while a
    person is asked."""

    conversation_id: str | None
    scopes: list[trio.CancelScope]
    announce: Callable[[ElicitationRequest], Awaitable[None]] | None = None
    refusal: str | None = None
    """Why a step-up authorization for this call did not happen (its error result)."""


@attrs.define(eq=False)
class _Question:
    request: ElicitationRequest
    answered: trio.Event = attrs.field(factory=trio.Event)
    result: mt.ElicitResult | None = None


_current_call: contextvars.ContextVar[_InFlight | None] = contextvars.ContextVar(
    "agentik_mcp_call", default=None
)
"""The tool call whose request this task sends: the HTTP transport sends each request
in its sender's context, so a step-up authorization knows whose call it serves."""


class _Fault(Exception):
    """A connection fault described in words for the log and ``/health``."""


@attrs.define(eq=False)
class _Connection:
    """Signals from one live connection to the manager loop; replaced on reconnect."""

    closed: bool = False
    refresh: bool = False
    suspect: bool = False
    wake: trio.Event = attrs.field(factory=trio.Event)

    def poke(self) -> None:
        self.wake.set()


@final
class McpToolset:
    """An MCP server as a ``ToolsetSource``: read ``contribution`` and ``health`` any time.

    Start its manager with ``nursery.start_soon(toolset.run)``, or use
    ``open_mcp_toolsets``, which also waits for the first listing.
    """

    def __init__(
        self,
        config: McpServerConfig,
        *,
        taken: set[str] | None = None,
        tokens: McpTokenVault | None = None,
    ) -> None:
        self.config = config
        self._tokens = tokens
        self._credentials = McpCredentials(config)
        """What agentik sends this server: masked in everything the server sends back."""
        self._taken = set() if taken is None else taken
        """Toolset names already used by sibling servers; a derived name avoids them."""
        self._name: str | None = config.name
        self._description: str | None = config.description
        self._state = McpState.IDLE if config.lazy else McpState.STARTING
        self._changed = trio.Event()
        self._settled = trio.Event()
        self._wanted = trio.Event()
        self._last_error: str | None = None
        self._restarts = 0
        self._reports: tuple[str, ...] = ()
        self._protocol_version: str | None = None
        self._client: Client | None = None
        self._conn = _Connection()
        self._mcp_names: dict[str, str] = {}
        self._contribution: ToolsetContribution | None = None
        self._listing: tuple[tuple[str, str | None, str | None, str], ...] = ()
        self._fallback: ToolsetContribution | None = None
        self._launched = False
        self._era: _Era | None = None
        self._in_flight: list[_InFlight] = []
        self._questions: dict[str, _Question] = {}

    # -- what the agent and /health read ------------------------------------

    @property
    def name(self) -> str:
        """The toolset name: configured, else the server's own, else from the command or URL."""
        if self._name is None:
            self._name = self._claim(toolset_name(_config_label(self.config)))
        return self._name

    @property
    def state(self) -> McpState:
        return self._state

    @property
    def contribution(self) -> ToolsetContribution:
        """The current tools; an explaining placeholder tool until the first listing."""
        if self._contribution is not None:
            return self._contribution
        if self._fallback is None:
            self._fallback = ToolsetContribution(
                self.name,
                self._catalog_description(),
                (
                    NamedTool(
                        self.name,
                        f"Reports why the MCP server {self.name!r} has no tools available.",
                        {"type": "object", "properties": {}},
                        self._explain_unavailable,
                    ),
                ),
            )
        return self._fallback

    @property
    def health(self) -> McpHealth:
        return McpHealth(
            name=self.name,
            state=self._state,
            last_error=self._last_error,
            restarts=self._restarts,
            tools=len(self._mcp_names),
            protocol_version=self._protocol_version,
            reports=self._reports,
        )

    async def wait_settled(self) -> None:
        """Return once the first attempt has an outcome: ready, failed or (lazy) listed."""
        await self._settled.wait()

    # -- the manager task ----------------------------------------------------

    async def run(self) -> None:
        """Keep the server connected until cancelled; every fault ends in a backoff and a retry."""
        try:
            await self._run()
        finally:
            self._set_state(McpState.STOPPED)

    async def _run(self) -> None:
        attempt = 0
        if self.config.lazy:
            try:
                await self._attempt(probe=True)
                self._set_state(McpState.IDLE)
            except _Fault as fault:
                self._fail(str(fault))
            self._settled.set()
            await self._wanted.wait()
        while True:
            self._launched = True
            self._set_state(McpState.RESTARTING if self._restarts else McpState.STARTING)
            started = trio.current_time()
            try:
                await self._attempt(probe=False)
            except _Fault as fault:
                self._fail(str(fault))
            if trio.current_time() - started >= self.config.backoff_max:
                attempt = 0  # it ran a good while: this is a fresh failure, not a crash loop
            delay = min(self.config.backoff_max, self.config.backoff * 2**attempt)
            attempt += 1
            await trio.sleep(delay)
            self._restarts += 1

    async def _attempt(self, *, probe: bool) -> None:
        """One connection, from launch to its end; raises ``_Fault`` saying why it ended
        (a successful probe returns)."""
        conn = self._conn = _Connection()
        stderr = StderrTail(self.config.name or _config_label(self.config))
        trace = (
            HttpTrace(self.config.transport.url)
            if isinstance(self.config.transport, HttpServer)
            else None
        )
        timeout = self.config.connect_timeout
        # The except sits outside the cancel scope: a fault racing the connect
        # deadline arrives grouped with Cancelled, which the scope strips first.
        try:
            with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                why = await self._connection(conn, stderr, trace, scope, probe=probe)
        # The boundary between a server and the agent: whatever the SDK raises
        # for a broken server (OSError, MCPError, ValidationError, groups of
        # them) ends this connection, never the agent. Cancelled is not caught.
        except Exception as exc:
            if (login := _find_login_required(exc)) is not None:
                raise _Fault(str(login)) from exc
            if trace is not None and trace.refusal is not None:
                # The status says more than the SDK's generic error; keep both, since
                # an OAuth flow that started on a 401 can fail for its own reason.
                raise _Fault(f"{trace.refusal} ({_describe(exc)})") from exc
            raise _Fault(_with_stderr(_describe(exc), stderr)) from exc
        except BaseExceptionGroup as group:
            # The connection broke just as this source was cancelled (the agent
            # closing): the SDK's task groups raise the fault beside Cancelled,
            # which ``except Exception`` cannot take. The cancel goes on; the
            # fault is moot, and must not escape the closing agent's nursery.
            cancelled, rest = group.split(trio.Cancelled)
            if cancelled is None or rest is None or not isinstance(rest, Exception):
                raise  # nothing cancelled, or something else that is not an Exception
            raise cancelled from None
        if scope.cancelled_caught:
            why = f"no answer to initialize and tools/list within {timeout:g}s"
        if why is not None:
            raise _Fault(_with_stderr(why, stderr))

    async def _connection(
        self,
        conn: _Connection,
        stderr: StderrTail,
        trace: HttpTrace | None,
        scope: trio.CancelScope,
        *,
        probe: bool,
    ) -> str | None:
        """Connect, list, and (unless probing) serve; return why the connection ended."""
        era, self._era = self._era, None  # kept only if this connection gets as far again
        async with Client(
            open_transport(
                self.config.transport, lambda: _close(conn), stderr, trace, await self._auth()
            ),
            mode=era.mode if era is not None else self.config.protocol,
            prior_discover=era.discover if era is not None else None,
            message_handler=lambda message: self._on_message(conn, message),
            elicitation_callback=self._elicit,
            client_info=CLIENT_INFO,
            cache=None,
        ) as client:
            self._protocol_version = client.protocol_version
            async with trio.open_nursery() as nursery:
                if not probe and client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    # Subscribe before listing, so no change can fall in between.
                    await nursery.start(self._listen, client, conn)
                await self._list(client)
                if self.config.protocol == "auto":
                    self._era = _era_of(client)
                if probe:
                    nursery.cancel_scope.cancel()
                    return None
                scope.deadline = math.inf
                self._client = client
                self._set_state(McpState.READY)
                try:
                    why = await self._watch(client, conn)
                finally:
                    self._client = None
                nursery.cancel_scope.cancel()
        return why

    async def _auth(self) -> httpx2.Auth | None:
        """A fresh OAuth provider per connection, so tokens a login stored since are read.

        A step-up authorization redirects to the URI the stored client was
        registered with (``agentik mcp login``'s), where ``_ask_person`` listens."""
        if not isinstance(self.config.transport, HttpServer) or self.config.transport.oauth is None:
            return None
        if self._tokens is None:
            # No bundle given: tokens last as long as the process (client credentials
            # need nothing more; an authorization-code server then needs a login each run).
            self._tokens = McpTokenVault(in_memory_storage(), token_key(None))
        name = self.config.name or self.config.transport.url
        redirect_uri = await self._tokens.registered_redirect_uri(name)
        return oauth_provider(
            self.config,
            self._tokens,
            redirect_uri=redirect_uri,
            ask_person=self._ask_person,
            credentials=self._credentials,
        )

    async def _watch(self, client: Client, conn: _Connection) -> str:
        """Serve change events and hang suspicions until the connection ends; say why it did."""
        while not conn.closed:
            if conn.refresh or conn.suspect:
                suspect, conn.refresh, conn.suspect = conn.suspect, False, False
                patience = min(_PROBE_TIMEOUT, max(self.config.call_timeout, 2.0))
                with trio.move_on_after(patience) as probe:
                    await self._list(client)
                if probe.cancelled_caught:
                    why = "after a call timed out" if suspect else "after tools/list_changed"
                    return f"the server stopped answering ({why}, no tools/list answer)"
                continue
            await conn.wake.wait()
            conn.wake = trio.Event()
        return "the server closed the connection"

    async def _listen(
        self,
        client: Client,
        conn: _Connection,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """On 2026-07-28 sessions change events come only through ``subscriptions/listen``."""
        started = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                task_status.started()
                started = True
                async for _ in subscription:
                    conn.refresh = True
                    conn.poke()
        except (ListenNotSupportedError, MCPError) as exc:
            why = self._credentials.text(str(exc))
            logger.info("mcp server %r offers no tool change events: %s", self.name, why)
        except SubscriptionLost:
            _close(conn)
        if not started:
            task_status.started()

    async def _on_message(self, conn: _Connection, message: IncomingMessage) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            conn.refresh = True
            conn.poke()
        elif isinstance(message, Exception):
            why = self._credentials.text(_describe(message))
            self._last_error = f"unreadable message from the server: {why}"
            label = self._name or self.config.name or _config_label(self.config)
            logger.warning("mcp server %r: %s", label, self._last_error)

    async def _list(self, client: Client) -> None:
        tools: list[mt.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        else:
            raise _Fault(f"tools/list did not end after {_MAX_PAGES} pages")
        mask = self._credentials.text
        if self._name is None:
            info = client.server_info
            fallback = toolset_name(_config_label(self.config))
            self._name = self._claim(
                toolset_name(mask(info.name) if info else "", fallback=fallback)
            )
        if self._description is None:
            info = client.server_info
            described = client.instructions or (info.description or info.title if info else None)
            self._description = one_line(mask(described) if described else None) or None
        self._publish(tools)

    def _publish(self, tools: list[mt.Tool]) -> None:
        key = tuple(
            (t.name, t.title, t.description, json.dumps(t.input_schema, sort_keys=True))
            for t in sorted(tools, key=lambda t: t.name)
        )
        if key == self._listing and self._contribution is not None:
            return  # same tools: keep the same object, so the agent sees no change
        # A name is offered to the model and stored with every call: one that shows a
        # credential (a server quoting a header as a tool name) is left out, unnamed.
        named_safely = [t for t in tools if self._credentials.text(t.name) == t.name]
        by_mcp = {tool.name: tool for tool in named_safely}
        naming = tool_names(self.name, (tool.name for tool in named_safely))
        reports = list(naming.reports)
        if hidden := len(tools) - len(named_safely):
            reports.append(f"{hidden} tool(s) left out: their names show a credential")
        named: list[NamedTool] = []
        for tool_name, mcp_name in naming.by_tool_name.items():
            tool, problem = self._named_tool(tool_name, by_mcp[mcp_name])
            named.append(tool)
            if problem is not None:
                reports.append(problem)
        for report in reports:
            if report not in self._reports:
                logger.warning("mcp server %r: %s", self.name, report)
        self._reports = tuple(reports)
        self._listing = key
        self._mcp_names = naming.by_tool_name
        self._contribution = (
            ToolsetContribution(self.name, self._catalog_description(), named) if named else None
        )

    def _named_tool(self, tool_name: str, tool: mt.Tool) -> tuple[NamedTool, str | None]:
        """The tool as the agent offers it, and the problem with its schema, if any.

        The schema is compiled here, once per listing, so a call does not pay
        for it. A schema that cannot be compiled (invalid for its dialect, a
        ``$ref`` that leads nowhere or off to a URL) makes only that tool
        fail: it is offered with an empty object schema (an invalid one could
        make the model's API refuse the whole request) and every call to it
        is an error result saying why; ``health.reports`` says so too.
        """

        async def handler(arguments: JsonObject) -> str:
            # The server's words, result or error, leave here with its credentials masked.
            try:
                return self._credentials.text(await self._call(tool_name, arguments))
            except ToolError as error:
                masked = self._credentials.tool_error(error)
                if masked is error:
                    raise
                raise masked from None  # the chained causes may show the credential too

        mask = self._credentials
        description = mask.text(tool.description or tool.title or f"The MCP tool {tool.name!r}.")
        named = NamedTool(tool_name, description, self._schema(dict(tool.input_schema)), handler)
        try:
            validator_for(named)
        except ToolError as error:
            refusal = f"{error}; mcp server {self.name!r} must fix it before the tool can be called"

            async def refuse(arguments: JsonObject) -> str:
                raise ToolError(refusal)

            stand_in = NamedTool(tool_name, description, {"type": "object"}, refuse)
            return stand_in, f"mcp tool {tool.name!r} cannot be called: {error}"
        return named, None

    # -- calls -----------------------------------------------------------------

    async def _call(self, tool_name: str, arguments: JsonObject) -> str:
        mcp_name = self._mcp_names.get(tool_name)
        if mcp_name is None:
            raise ToolError(f"tool {tool_name!r} was removed by mcp server {self.name!r}")
        if self.config.lazy and not self._wanted.is_set():
            await self._launch_on_demand()
        client = self._client
        if client is None or self._state is not McpState.READY:
            raise ToolError(self._unavailable())
        timeout = self.config.call_timeout
        running = current_tool_call.get()
        with trio.move_on_after(timeout) as scope:
            call = _InFlight(
                running.conversation_id if running else None,
                [scope, running.scope] if running else [scope],
                running.announce if running else None,
            )
            self._in_flight.append(call)
            token = _current_call.set(call)
            try:
                result = await client.call_tool(mcp_name, dict(arguments))
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED:
                    _close(self._conn)
                    raise ToolError(
                        f"mcp server {self.name!r} closed the connection during {mcp_name!r}; "
                        "it is being restarted"
                    ) from exc
                if call.refusal is not None:  # the server refused it for want of a scope
                    raise ToolError(f"{call.refusal} (calling {mcp_name!r})") from exc
                raise ToolError(f"mcp server {self.name!r} refused {mcp_name!r}: {exc}") from exc
            # A tool's failure becomes an error result here, whatever the SDK raised.
            except Exception as exc:
                if (login := _find_login_required(exc)) is not None:
                    raise ToolError(f"{login} (calling {mcp_name!r})") from exc
                if (failed := _find_login_required(exc, LoginError)) is not None:
                    raise ToolError(
                        f"mcp server {self.name!r}: the authorization for {mcp_name!r} "
                        f"failed: {failed}"
                    ) from exc
                raise ToolError(
                    f"mcp server {self.name!r} failed calling {mcp_name!r}: {_describe(exc)}"
                ) from exc
            finally:
                _current_call.reset(token)
                self._in_flight.remove(call)
            if result.is_error:
                raise ToolError(render_result(result))
            return render_result(result)
        self._conn.suspect = True
        self._conn.poke()
        raise ToolError(f"mcp tool {mcp_name!r} of {self.name!r} timed out after {timeout:g}s")

    def _schema(self, schema: JsonObject) -> JsonObject:
        masked = self._credentials.structure(schema)
        assert isinstance(masked, dict)
        return masked

    # -- elicitation ---------------------------------------------------------------

    def pending_elicitations(self, conversation_id: str) -> tuple[ElicitationRequest, ...]:
        """The questions this server's running calls ask in the conversation."""
        return tuple(
            q.request
            for q in self._questions.values()
            if q.request.conversation_id == conversation_id
        )

    def answer_elicitation(
        self,
        conversation_id: str,
        elicitation_id: str,
        *,
        action: ElicitationAction,
        content: JsonObject | None,
    ) -> bool:
        """Answer one of this server's questions (True), or False if it is not one of them."""
        question = self._questions.get(elicitation_id)
        if question is None or question.request.conversation_id != conversation_id:
            return False
        if question.answered.is_set():
            return True  # answered twice: the first answer stands
        if question.request.url is not None and action in ("accept", "decline", "cancel"):
            question.result = mt.ElicitResult(action=action)  # nothing to fill in
        elif action == "accept":
            answer = form_answer(question.request.schema, content)
            question.result = mt.ElicitResult(action="accept", content=answer)  # type: ignore[arg-type]
        elif action in ("decline", "cancel"):
            question.result = mt.ElicitResult(action=action)
        else:
            raise ElicitationError(
                f"action must be 'accept', 'decline' or 'cancel', got {action!r}", code="invalid"
            )
        question.answered.set()
        return True

    async def _elicit(
        self, context: object, params: mt.ElicitRequestParams
    ) -> mt.ElicitResult | mt.ErrorData:
        """The SDK's elicitation callback: ask the person of the conversation whose call
        this is, and wait (bounded) for the answer; the call's timeouts stand still."""
        running = current_tool_call.get()  # set when the SDK asks in the call's own task
        if running is not None:
            conversation: str | None = running.conversation_id
            mine = [c for c in self._in_flight if running.scope in c.scopes]
            scopes = mine[0].scopes if mine else [running.scope]
            announcers = [running.announce]
        else:
            # Asked from the session's reader task: only an unambiguous caller will do.
            owners = {c.conversation_id for c in self._in_flight}
            conversation = owners.pop() if len(owners) == 1 else None
            scopes = [s for c in self._in_flight for s in c.scopes]
            # One conversation runs one turn at a time: its calls share one stream.
            announcers = [c.announce for c in self._in_flight][:1]
        if conversation is None or not isinstance(params, mt.ElicitRequestFormParams):
            why = "url mode" if conversation else "no single conversation's call is running"
            logger.info("mcp server %r: an elicitation was declined (%s)", self.name, why)
            return mt.ElicitResult(action="decline")
        request = ElicitationRequest(
            conversation_id=conversation,
            id=uuid.uuid4().hex,
            source=self.name,
            message=self._credentials.text(params.message),
            schema=self._schema(dict(params.requested_schema)),
        )
        logger.info(
            "mcp server %r asks conversation %r: %s",
            self.name,
            conversation,
            one_line(request.message),
        )
        question = _Question(request)
        with trio.move_on_after(self.config.elicitation_timeout), self._asking(question, scopes):
            for announce in announcers:
                if announce is not None:  # the turn streams: tell its client
                    await announce(request)
            await question.answered.wait()
        if question.result is None:
            logger.info("mcp server %r: no answer in time, declined", self.name)
            return mt.ElicitResult(action="decline")
        return question.result

    @contextlib.contextmanager
    def _asking(self, question: _Question, scopes: list[trio.CancelScope]) -> Iterator[None]:
        """While the block runs, ``question`` is pending and the call's timeouts stand
        still: a person's pause is not the tool's slowness (the question's own
        timeout bounds the pause)."""
        self._questions[question.request.id] = question
        now = trio.current_time()
        paused = [(scope, scope.deadline - now) for scope in scopes]
        for scope, _ in paused:
            scope.deadline = math.inf
        try:
            yield
        finally:
            del self._questions[question.request.id]
            now = trio.current_time()
            for scope, left in paused:
                scope.deadline = now + left

    async def _ask_person(self, url: str) -> AuthorizationCodeResult:
        """A step-up authorization in a tool call: ask the conversation's person to open
        ``url`` (a URL-mode elicitation) and receive the browser's redirect on 127.0.0.1.

        While connecting or listing there is no call: ``LoginRequired`` fails the
        connection and says to run ``agentik mcp login``. A call with no person
        behind it (not a conversation's), or one whose person declines, cancels
        or does not answer within ``elicitation_timeout``, gets an error result
        saying so (``StepUpRefused``); the connection stays.
        """
        call = _current_call.get()
        login = f"run `agentik mcp login {self.name}`"
        if call is None:
            raise LoginRequired(f"mcp server {self.name!r} needs an authorization: {login}")
        running = current_tool_call.get()
        redirect = urlsplit(parse_qs(urlsplit(url).query).get("redirect_uri", [""])[0])
        if running is None:
            self._refuse(call, f"mcp server {self.name!r} needs an authorization: {login}")
        if redirect.scheme != "http" or redirect.hostname not in ("127.0.0.1", "localhost"):
            self._refuse(
                call,
                f"mcp server {self.name!r} needs a new authorization, and its redirect URI "
                f"is not agentik's 127.0.0.1 callback: {login}",
            )
        try:
            listeners = await trio.open_tcp_listeners(redirect.port or 80, host="127.0.0.1")
        except OSError as error:
            self._refuse(
                call,
                f"mcp server {self.name!r} needs a new authorization, but its redirect "
                f"port 127.0.0.1:{redirect.port} cannot be opened ({error.strerror})",
            )
        request = ElicitationRequest(
            conversation_id=running.conversation_id,
            id=uuid.uuid4().hex,
            source=self.name,
            message=(
                f"mcp server {self.name!r} needs a wider authorization for this call; "
                f"open this URL and approve, and the call goes on: {url}"
            ),
            schema={},
            url=url,
        )
        # The URL carries the flow's state: the log says what, not where.
        logger.info(
            "mcp server %r asks conversation %r for a wider authorization (step-up)",
            self.name,
            running.conversation_id,
        )
        question = _Question(request)
        received: list[AuthorizationCodeResult | LoginError] = []
        async with listeners[0] as listener:
            with (
                trio.move_on_after(self.config.elicitation_timeout),
                self._asking(question, call.scopes),
            ):
                async with trio.open_nursery() as nursery:

                    async def receive() -> None:
                        try:
                            received.append(await receive_redirect(listener))
                        except LoginError as error:
                            received.append(error)
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(receive)
                    if running.announce is not None:  # the turn streams: tell its client
                        await running.announce(request)
                    await question.answered.wait()
                    if question.result is None or question.result.action != "accept":
                        nursery.cancel_scope.cancel()
                    # accepted ("I opened it"): the redirect ends the wait
        if received and isinstance(received[0], AuthorizationCodeResult):
            return received[0]
        if received:
            why = f"did not complete: {received[0]}"
        elif question.result is not None and question.result.action != "accept":
            why = f"the person {question.result.action}d"
        else:
            why = f"did not come within {self.config.elicitation_timeout:g}s"
        self._refuse(call, f"mcp server {self.name!r} needs a wider authorization, which {why}")

    def _refuse(self, call: _InFlight, why: str) -> NoReturn:
        """End a step-up without a token: the call's error result will say ``why``."""
        call.refusal = why
        logger.info("%s", why)
        raise StepUpRefused(why)

    async def _launch_on_demand(self) -> None:
        """Start a lazy server and wait (bounded) for its first real attempt to end."""
        self._wanted.set()
        with trio.move_on_after(self.config.connect_timeout + 1.0):
            while not self._launched or self._state is McpState.STARTING:
                await self._changed.wait()

    async def _explain_unavailable(self, arguments: JsonObject) -> str:
        if self.config.lazy and not self._wanted.is_set():
            await self._launch_on_demand()
        if self._state is McpState.READY and self._contribution is not None:
            count = len(self._contribution.tools)
            return f"mcp server {self.name!r} is ready now with {count} tools"
        raise ToolError(self._unavailable())

    def _unavailable(self) -> str:
        why = f": {self._last_error}" if self._last_error else ""
        if self._state is McpState.READY:
            return f"mcp server {self.name!r} lists no tools"
        return (
            f"mcp server {self.name!r} is unavailable ({self._state.value}{why}); try again later"
        )

    # -- state ----------------------------------------------------------------

    def _set_state(self, state: McpState) -> None:
        if state is McpState.READY:
            logger.info("mcp server %r is ready with %d tools", self.name, len(self._mcp_names))
        self._state = state
        if state in (McpState.READY, McpState.FAILED, McpState.STOPPED):
            self._settled.set()
        self._changed.set()
        self._changed = trio.Event()

    def _fail(self, error: str) -> None:
        error = self._credentials.text(error)
        self._last_error = error
        logger.warning("mcp server %r failed: %s", self.name, error)
        self._set_state(McpState.FAILED)

    def _claim(self, preferred: str) -> str:
        """``preferred``, or ``preferred-2``, ``-3``… if a sibling server already uses it."""
        name, n = preferred, 1
        while name in self._taken:
            n += 1
            name = f"{preferred[: 32 - len(str(n)) - 1]}-{n}"
        if name != preferred:
            logger.warning(
                "mcp server named %r is exposed as toolset %r (name taken)", preferred, name
            )
        self._taken.add(name)
        return name

    def _catalog_description(self) -> str:
        return self._description or f"Tools of the MCP server {self.name!r}."


def _find_login_required(
    exc: BaseException | None, kind: type[AgentikError] = LoginRequired
) -> AgentikError | None:
    """The ``kind`` error behind ``exc``: the SDK wraps it in groups and its own errors."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, kind):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                if (found := _find_login_required(inner, kind)) is not None:
                    return found
        exc = exc.__cause__ or exc.__context__
    return None


def _era_of(client: Client) -> _Era:
    version = client.protocol_version
    if version in MODERN_PROTOCOL_VERSIONS:
        return _Era(version, client.session.discover_result)
    return _Era("legacy", None)


def _close(conn: _Connection) -> None:
    conn.closed = True
    conn.poke()


def _config_label(config: McpServerConfig) -> str:
    """A name for a server that has not told us its own: its command or host."""
    if isinstance(config.transport, HttpServer):
        return config.transport.url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    return config.transport.command.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".exe")


def _with_stderr(why: str, stderr: StderrTail) -> str:
    """The server's last words (a traceback's last line, usually) make a fault clear."""
    return f"{why}; its stderr ended with: {stderr.last}" if stderr.last else why


def _describe(exc: BaseException) -> str:
    """One line saying what went wrong, unwrapping the groups the SDK's task groups raise."""
    exc = innermost(exc)
    if isinstance(exc, _Fault):
        return str(exc)
    text = str(exc) or type(exc).__name__
    return one_line(f"{type(exc).__name__}: {text}" if str(exc) else text, limit=300)
