"""``serve_agentik``: storage, model, toolsets, agent and the HTTP server, nested so
they shut down in the right order.

Lifetimes, outermost first: storage (its writer task) > agent (conversation
tasks) > HTTP server (connections). On shutdown the agent stops taking turns
(a request then gets 503 with ``Retry-After``) and the server stops
accepting; turns under way (and queued ones whose client is still there) get
``[limits] graceful_timeout`` seconds, then are interrupted: each answers its
open calls ``interrupted: …`` and is resumed at the next start, its client
gets 503. Connections get a second more to send those answers. Then the agent's
tasks exit, and only then the writer commits what is left and closes: the
storage outlives every turn's clean-up. ``interrupt_trigger`` (a second
signal) interrupts the turns at once. Runs in the caller's nursery:
``await nursery.start(serve_agentik, config)`` returns the bound base URL
(port 0 picks a free one).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx2
import trio

from agentik._errors import ConfigError
from agentik.agent import (
    DEFAULT_SYSTEM_PROMPT,
    ContentLimits,
    ContextPolicy,
    ToolsetSource,
    open_chat_agent,
)
from agentik.models import (
    ChatModel,
    OpenAICompatibleModel,
    RetryPolicy,
    ScriptedModel,
    demo_responder,
)
from agentik.server._app import mount
from agentik.server._config import check_entry_point
from agentik.server._context import ServerContext
from agentik.server._demo import demo_toolsets
from agentik.server._forward import CONNECT_TIMEOUT, FORWARDED
from agentik.server._peers import PeerClient
from agentik.server._retention import run_retention
from agentik.server._settings import ModelSettings, ServerConfig, ToolEntry, ToolsetEntry
from agentik.server.http import ConnectionLimits, HttpSettings, PeerReserve
from agentik.server.http import serve as http_serve
from agentik.storage import (
    DatabaseLock,
    StorageBundle,
    describe_location,
    hold_sqlite_database,
    is_postgres_url,
    open_storage,
    writer_stats,
)
from agentik.toolsets import NamedTool, ToolsetContribution

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from agentik.a2a_client import A2AToolset
    from agentik.mcp import McpToolset

log = logging.getLogger("agentik.server")

ANSWER_SECONDS = 1.0
"""Seconds connections get past the turns' grace, to send the answers of the
turns interrupted then (503) before they are closed."""

DEMO_WARNING = (
    "NO MODEL CONFIGURED: answering with the built-in scripted demo model."
    " Set [model] base_url and model in agentik.toml (or AGENTIK_MODEL_BASE_URL and"
    " AGENTIK_MODEL) to use a real one."
)

Toolset = ToolsetContribution | ToolsetSource


def _import(spec: str, key: str) -> object:
    """The object an entry point ``module:attribute`` names (``[agent] <key>``)."""
    module_name, _, attribute = spec.partition(":")
    try:
        target: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"[agent] {key} entry {spec!r} cannot be loaded: {error}") from error
    return target


def _describe(entry: object) -> str:
    """An entry object as an error message names it: a function by its
    qualified name, a tool or toolset by its name, anything else by a short repr."""
    qualname = getattr(entry, "__qualname__", None)
    if isinstance(qualname, str):
        return f"{getattr(entry, '__module__', '?')}.{qualname}"
    name = getattr(entry, "name", None)
    if isinstance(name, str):
        return f"{type(entry).__name__} {name!r}"
    text = repr(entry)
    return text if len(text) <= 60 else text[:60] + "…"


def _entry(entry: object, key: str) -> tuple[str, object]:
    """What an ``[agent] <key>`` entry gives, and how errors name it: an entry
    point is imported; an object (from a program's ``ServerConfig``) is itself,
    named by its ``repr``. A callable is called for what it gives, except an
    async function: that is a tool's body, which ``@tool`` makes a tool of."""
    if isinstance(entry, str):
        check_entry_point(entry, key)
        name, target = repr(entry), _import(entry, key)
    else:
        name, target = _describe(entry), entry
    if inspect.iscoroutinefunction(target):
        raise ConfigError(
            f"[agent] {key} entry {name} is an async function, not a tool:"
            " decorate it with @tool (agentik.tool) to make it a NamedTool"
        )
    return name, target


def load_tools(entries: Iterable[ToolEntry]) -> list[NamedTool]:
    """Each entry is a ``NamedTool`` (``@tool`` makes one), an iterable of them,
    or a callable returning either; or an entry point ``module:attribute``
    naming one of those."""
    found: list[NamedTool] = []
    for entry in entries:
        name, target = _entry(entry, "tools")
        if callable(target) and not isinstance(target, NamedTool):
            target = target()
        items = [target] if isinstance(target, NamedTool) else target
        if not isinstance(items, Iterable) or isinstance(items, str | bytes):
            raise ConfigError(
                f"[agent] tools entry {name} must give tools (NamedTool),"
                f" got {type(target).__name__}"
            )
        for item in items:
            if not isinstance(item, NamedTool):
                raise ConfigError(
                    f"[agent] tools entry {name} gave {type(item).__name__}, expected a NamedTool"
                )
            found.append(item)
    return found


def load_toolsets(entries: Iterable[ToolsetEntry]) -> list[Toolset]:
    """Each entry is a contribution, a source (has ``.contribution``), an
    iterable of those, or a callable returning them; or an entry point
    ``module:attribute`` naming one of those."""
    found: list[Toolset] = []
    for entry in entries:
        name, target = _entry(entry, "toolsets")
        if callable(target) and not _is_toolset(target):
            target = target()
        items = [target] if _is_toolset(target) else target
        if not isinstance(items, Iterable) or isinstance(items, str | bytes):
            raise ConfigError(
                f"[agent] toolsets entry {name} must give toolset contributions,"
                f" got {type(target).__name__}"
            )
        for item in items:
            if not _is_toolset(item):
                raise ConfigError(
                    f"[agent] toolsets entry {name} gave {type(item).__name__},"
                    " expected a ToolsetContribution"
                )
            found.append(item)
    return found


def _is_toolset(value: object) -> bool:
    return isinstance(value, ToolsetContribution) or (
        not isinstance(value, type) and hasattr(value, "contribution")
    )


def peer_client(config: ServerConfig) -> PeerClient:
    """The client that forwards requests to the other nodes (``_forward``):
    kept-alive HTTP/1.1 connections to each, as many as requests need (each
    is one this node's own connection limit already admitted). An idle one is
    dropped before the peer's keep-alive would close it (the nodes share their
    configuration), so a request is not sent on a connection being closed;
    answers are read without a deadline (a turn takes what it takes; the
    client's leaving ends it), connecting takes at most ``CONNECT_TIMEOUT``.
    No proxy: the nodes talk directly."""
    return PeerClient(
        connect_timeout=CONNECT_TIMEOUT,
        idle_timeout=config.limits.keepalive_timeout / 2,
        max_idle=config.limits.max_connections,
    )


def peer_reserve(config: ServerConfig) -> PeerReserve:
    """A node that forwards keeps ``[limits] peer_connections`` connections
    past ``max_connections`` for the requests the other nodes forward to it
    (they carry ``FORWARDED``): its own connections may all be waiting on
    requests it forwarded to them, theirs on requests they forwarded here,
    and without a reserve neither set would ever be accepted. A node that
    does not forward waits on no one, so needs none."""
    return PeerReserve(header=FORWARDED.encode(), connections=config.limits.peer_connections)


def context_policy(config: ServerConfig) -> ContextPolicy | None:
    """The agent's context policy: ``[model] context_tokens``, if set."""
    if config.context_tokens is None:
        return None
    return ContextPolicy(max_tokens=config.context_tokens)


def content_limits(config: ServerConfig) -> ContentLimits:
    """The agent's limits on skills and notes: the ``[limits]`` of the same names."""
    limits = config.limits
    return ContentLimits(
        max_skill_name=limits.max_skill_name,
        max_skill_description=limits.max_skill_description,
        max_skill_body=limits.max_skill_body,
        max_note=limits.max_note,
        skills_prompt_tokens=limits.skills_prompt_tokens,
        notes_prompt_tokens=limits.notes_prompt_tokens,
    )


def model_timeouts(settings: ModelSettings) -> dict[str, Any]:
    """``OpenAICompatibleModel`` keywords for the ``[model]`` timeouts and retries
    that are set; the model's defaults stand for the others."""
    given: dict[str, Any] = {}
    if settings.timeout is not None:
        given["timeout"] = settings.timeout
    if settings.connect_timeout is not None:
        given["connect_timeout"] = settings.connect_timeout
    if settings.max_retries is not None:
        given["retry"] = RetryPolicy(max_retries=settings.max_retries)
    if settings.structured_output is not None:
        given["structured_output"] = settings.structured_output
    if settings.accepts_parts is not None:
        given["accepts_parts"] = settings.accepts_parts
    return given


@asynccontextmanager
async def open_configured_model(config: ServerConfig) -> AsyncIterator[tuple[ChatModel, str]]:
    if config.model is None:
        log.warning(DEMO_WARNING)
        yield ScriptedModel(demo_responder), "scripted demo model"
        return
    settings = config.model
    async with OpenAICompatibleModel(
        settings.base_url,
        settings.model,
        api_key=settings.api_key,
        max_connections=settings.max_connections,
        **model_timeouts(settings),
    ) as model:
        shown = httpx2.URL(settings.base_url).copy_with(userinfo=b"")  # no password in /health
        yield model, f"{settings.model} at {shown}"


async def serve_agentik(
    config: ServerConfig,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    interrupt_trigger: Callable[[], Awaitable[None]] | None = None,
    storage: StorageBundle | None = None,
    model: ChatModel | None = None,
    tracer_provider: TracerProvider | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until ``shutdown_trigger`` returns (or the caller cancels), then drain
    for at most ``[limits] graceful_timeout`` seconds (the module docstring);
    when ``interrupt_trigger`` returns, the turns under way are interrupted
    at once (a second signal).

    ``storage`` and ``model`` override the configured ones (embedding, tests);
    ``tracer_provider`` is the agent's (``open_chat_agent``)."""
    toolsets: list[ToolsetContribution | ToolsetSource] = list(load_toolsets(config.toolsets))
    tools = load_tools(config.tools)
    async with AsyncExitStack() as stack:
        database: str | None = None
        lock: DatabaseLock | None = None
        if storage is None:
            if not is_postgres_url(config.database):
                # Held until the database is closed: `agentik delete`/`import`
                # refuse meanwhile (the node leases say so on PostgreSQL).
                lock = stack.enter_context(hold_sqlite_database(config.database, "serve"))
            storage = await stack.enter_async_context(
                open_storage(
                    config.database,
                    lease_seconds=config.lease_seconds,
                    readers=config.readers,
                    shards=config.shards,
                )
            )
            storage_label = describe_location(config.database)
            # A SQLite file keeps the MCP token key beside it; on PostgreSQL the
            # nodes share AGENTIK_MCP_TOKEN_KEY (docs/mcp.md), no file.
            database = None if is_postgres_url(config.database) else config.database
        else:
            storage_label = type(storage.message_store).__name__
        mcp: tuple[McpToolset, ...] = ()
        if config.mcp_servers:
            from agentik.mcp import McpTokenVault, open_mcp_toolsets, token_key

            # OAuth tokens (from `agentik mcp login`, or refreshed) live in the bundle.
            tokens = McpTokenVault(storage, token_key(database))
            mcp = await stack.enter_async_context(
                open_mcp_toolsets(config.mcp_servers, tokens=tokens)
            )
            toolsets.extend(mcp)
        a2a: tuple[A2AToolset, ...] = ()
        if config.a2a_agents:
            from agentik.a2a_client import open_a2a_toolsets

            # The bundle keeps each running call's remote task: a turn resumed
            # after a restart follows it rather than sending again.
            a2a = await stack.enter_async_context(
                open_a2a_toolsets(config.a2a_agents, storage=storage)
            )
            toolsets.extend(a2a)
        chat_model: ChatModel
        if model is None:
            chat_model, model_label = await stack.enter_async_context(open_configured_model(config))
            demo = config.model is None
            for offered in demo_toolsets(config):
                log.info("no toolsets configured: offering the demo toolset %r", offered.name)
                toolsets.append(offered)
        else:
            chat_model, model_label, demo = model, type(model).__name__, False
        limits = config.limits
        # Watches for ``interrupt_trigger`` until the agent has closed (so a
        # second signal still counts while the agent drains): entered before
        # the agent, told to stop right after it (the stack unwinds in reverse).
        watchers = await stack.enter_async_context(trio.open_nursery())
        watching = trio.CancelScope()
        stack.callback(watching.cancel)
        interrupted = trio.Event()
        agent = await stack.enter_async_context(
            open_chat_agent(
                model=chat_model,
                storage=storage,
                tools=tools,
                toolsets=toolsets,
                max_tool_rounds=limits.max_tool_rounds,
                tool_timeout=limits.tool_timeout,
                max_queued_turns=limits.max_queued_turns,
                max_conversations=limits.max_conversations,
                system_prompt=config.system_prompt or DEFAULT_SYSTEM_PROMPT,
                context=context_policy(config),
                content_limits=content_limits(config),
                tracer_provider=tracer_provider,
                model_limits=config.model_limits,
                close_grace=limits.graceful_timeout,
            )
        )
        if interrupt_trigger is not None:
            trigger = interrupt_trigger

            async def interrupt_when_told() -> None:
                with watching:
                    await trigger()
                    log.info("interrupting the turns under way now")
                    agent.close(grace=0)
                    await trio.sleep(ANSWER_SECONDS)  # their clients get the answer
                    interrupted.set()

            watchers.start_soon(interrupt_when_told)
        bundle = storage
        forwarding = bundle.ownership is not None and config.forward
        settings = HttpSettings(
            keep_alive_timeout=limits.keepalive_timeout,
            limits=ConnectionLimits(
                header_timeout=limits.header_timeout,
                body_timeout=limits.body_timeout,
                body_min_rate=limits.body_min_rate,
                max_connections=limits.max_connections,
            ),
            peers=peer_reserve(config) if forwarding else None,
        )
        reserve = settings.peers

        peers = None
        if forwarding:
            peers = await stack.enter_async_context(peer_client(config))

        async with trio.open_nursery() as nursery:
            ctx = ServerContext(
                agent=agent,
                config=config,
                model_label=model_label,
                demo_model=demo,
                mcp=mcp,
                a2a=a2a,
                storage_label=storage_label,
                writer_gauges=lambda: writer_stats(bundle),
                background=nursery,
                peers=peers,
                reserve_counts=None if reserve is None else reserve.counts,
            )
            app = mount(ctx)
            retention = trio.CancelScope()

            async def shutdown() -> None:
                await (shutdown_trigger or trio.sleep_forever)()
                # No new turns from now on (503); those under way get the grace.
                agent.close(grace=limits.graceful_timeout)
                # Streams watching a task that nothing runs (a subscription to a
                # task waiting for input) would hold the drain for graceful_timeout.
                app.drain()

            async def serving(task_status: trio.TaskStatus[list[str]]) -> None:
                try:
                    await http_serve(
                        app,
                        host=config.host,
                        port=config.port,
                        settings=settings,
                        graceful_timeout=limits.graceful_timeout + ANSWER_SECONDS,
                        # a burst of clients connecting at once must not hit SYN retries
                        backlog=2048,
                        shutdown_trigger=shutdown,
                        interrupt_trigger=interrupted.wait,
                        relay=app.relay,
                        task_status=task_status,
                    )
                finally:
                    retention.cancel()  # no deletes once the server stops serving

            binds: list[str] = await nursery.start(serving)
            if config.retention_days is not None and agent.storage.degraded:
                log.warning("retention_days is set but this storage cannot delete conversations")
            elif config.retention_days is not None:
                days = config.retention_days

                async def retain() -> None:
                    with retention:
                        await run_retention(agent, days)

                nursery.start_soon(retain)
            ctx.base_url = binds[0]
            if lock is not None:
                lock.announce(binds[0])
            if bundle.ownership is not None:  # other nodes redirect its conversations here
                await bundle.ownership.advertise(config.advertise_url or binds[0])
            log.info(
                "serving url=%s storage=%s model=%r auth=%s",
                binds[0],
                storage_label,
                model_label,
                f"bearer owners={len({c.owner for c in config.clients})}"
                if config.requires_auth
                else "none",
            )
            task_status.started(binds[0])
        log.info("stopped accepting requests; closing the agent, then storage")
