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

import logging
import math
from typing import final

import httpx2
import mcp.types as mt
import trio
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentik._errors import ToolError
from agentik._json import JsonObject
from agentik.agent import (
    ElicitationAction,
    ElicitationRequest,
    current_tool_call,
)
from agentik.mcp._asking import Asking, InFlight, current_call
from agentik.mcp._auth import oauth_provider
from agentik.mcp._config import HttpServer, McpServerConfig
from agentik.mcp._connection import Connection, Era, close, era_of
from agentik.mcp._credentials import McpCredentials
from agentik.mcp._faults import Fault, call_failure, describe, find_login_required, with_stderr
from agentik.mcp._health import McpHealth, McpState
from agentik.mcp._listing import ListingKey, all_tools, listing_key, read_listing
from agentik.mcp._naming import config_label, one_line, toolset_name
from agentik.mcp._render import render_result
from agentik.mcp._tokens import McpTokenVault, token_key
from agentik.mcp._transport import CLIENT_INFO, HttpTrace, StderrTail, open_transport
from agentik.storage import in_memory_storage
from agentik.toolsets import NamedTool, ToolsetContribution

logger = logging.getLogger("agentik.mcp")

_PROBE_TIMEOUT = 10.0
"""How long a suspected-hung server gets to answer tools/list before it is restarted
(less when ``call_timeout`` is shorter, but at least 2 s: a live server answers at once)."""


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
        self._conn = Connection()
        self._mcp_names: dict[str, str] = {}
        self._contribution: ToolsetContribution | None = None
        self._listing: ListingKey = ()
        self._fallback: ToolsetContribution | None = None
        self._launched = False
        self._era: Era | None = None
        self._asking = Asking(lambda: self.name, self._credentials, config.elicitation_timeout)
        """The questions its running calls put to people (elicitations, step-ups)."""

    # -- what the agent and /health read ------------------------------------

    @property
    def name(self) -> str:
        """The toolset name: configured, else the server's own, else from the command or URL."""
        if self._name is None:
            self._name = self._claim(toolset_name(config_label(self.config)))
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
            except Fault as fault:
                self._fail(str(fault))
            self._settled.set()
            await self._wanted.wait()
        while True:
            self._launched = True
            self._set_state(McpState.RESTARTING if self._restarts else McpState.STARTING)
            started = trio.current_time()
            try:
                await self._attempt(probe=False)
            except Fault as fault:
                self._fail(str(fault))
            if trio.current_time() - started >= self.config.backoff_max:
                attempt = 0  # it ran a good while: this is a fresh failure, not a crash loop
            delay = min(self.config.backoff_max, self.config.backoff * 2**attempt)
            attempt += 1
            await trio.sleep(delay)
            self._restarts += 1

    async def _attempt(self, *, probe: bool) -> None:
        """One connection, from launch to its end; raises ``Fault`` saying why it ended
        (a successful probe returns)."""
        conn = self._conn = Connection()
        stderr = StderrTail(self.config.name or config_label(self.config))
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
            if (login := find_login_required(exc)) is not None:
                raise Fault(str(login)) from exc
            if trace is not None and trace.refusal is not None:
                # The status says more than the SDK's generic error; keep both, since
                # an OAuth flow that started on a 401 can fail for its own reason.
                raise Fault(f"{trace.refusal} ({describe(exc)})") from exc
            raise Fault(with_stderr(describe(exc), stderr)) from exc
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
            raise Fault(with_stderr(why, stderr))

    async def _connection(
        self,
        conn: Connection,
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
                self.config.transport, lambda: close(conn), stderr, trace, await self._auth()
            ),
            mode=era.mode if era is not None else self.config.protocol,
            prior_discover=era.discover if era is not None else None,
            message_handler=lambda message: self._on_message(conn, message),
            elicitation_callback=self._asking.elicit,
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
                    self._era = era_of(client)
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
            ask_person=self._asking.ask_person,
            credentials=self._credentials,
        )

    async def _watch(self, client: Client, conn: Connection) -> str:
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
        conn: Connection,
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
            close(conn)
        if not started:
            task_status.started()

    async def _on_message(self, conn: Connection, message: IncomingMessage) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            conn.refresh = True
            conn.poke()
        elif isinstance(message, Exception):
            why = self._credentials.text(describe(message))
            self._last_error = f"unreadable message from the server: {why}"
            label = self._name or self.config.name or config_label(self.config)
            logger.warning("mcp server %r: %s", label, self._last_error)

    async def _list(self, client: Client) -> None:
        tools = await all_tools(client)
        mask = self._credentials.text
        if self._name is None:
            info = client.server_info
            fallback = toolset_name(config_label(self.config))
            self._name = self._claim(
                toolset_name(mask(info.name) if info else "", fallback=fallback)
            )
        if self._description is None:
            info = client.server_info
            described = client.instructions or (info.description or info.title if info else None)
            self._description = one_line(mask(described) if described else None) or None
        self._publish(tools)

    def _publish(self, tools: list[mt.Tool]) -> None:
        key = listing_key(tools)
        if key == self._listing and self._contribution is not None:
            return  # same tools: keep the same object, so the agent sees no change
        listed = read_listing(self.name, tools, self._credentials, self._call)
        for report in listed.reports:
            if report not in self._reports:
                logger.warning("mcp server %r: %s", self.name, report)
        self._reports = listed.reports
        self._listing = key
        self._mcp_names = listed.mcp_names
        self._contribution = (
            ToolsetContribution(self.name, self._catalog_description(), listed.tools)
            if listed.tools
            else None
        )

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
            call = InFlight(
                running.conversation_id if running else None,
                [scope, running.scope] if running else [scope],
                running.announce if running else None,
            )
            self._asking.in_flight.append(call)
            token = current_call.set(call)
            try:
                result = await client.call_tool(mcp_name, dict(arguments))
            # A tool's failure becomes an error result here, whatever the SDK raised.
            except Exception as exc:
                if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
                    close(self._conn)
                raise call_failure(self.name, mcp_name, exc, call.refusal) from exc
            finally:
                current_call.reset(token)
                self._asking.in_flight.remove(call)
            if result.is_error:
                raise ToolError(render_result(result))
            return render_result(result)
        self._conn.suspect = True
        self._conn.poke()
        raise ToolError(f"mcp tool {mcp_name!r} of {self.name!r} timed out after {timeout:g}s")

    # -- elicitation ---------------------------------------------------------------

    def pending_elicitations(self, conversation_id: str) -> tuple[ElicitationRequest, ...]:
        """The questions this server's running calls ask in the conversation."""
        return self._asking.open.pending(conversation_id)

    def answer_elicitation(
        self,
        conversation_id: str,
        elicitation_id: str,
        *,
        action: ElicitationAction,
        content: JsonObject | None,
    ) -> bool:
        """Answer one of this server's questions (True), or False if it is not one of them."""
        return self._asking.open.answer(
            conversation_id, elicitation_id, action=action, content=content
        )

    # -- lazy launch and state -------------------------------------------------------

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
