"""The server's settings, validated: what ``agentik serve`` runs with.

``ServerConfig`` and the values it holds (``ModelSettings``, ``Limits``, the
clients' tokens) are plain frozen values: a program may build one directly,
and ``load_config`` (``agentik.server._config``) builds one from
``agentik.toml``, the environment and the command line. Secrets (the model API
key, the bearer tokens) are kept out of ``repr``.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

from agentik._errors import ConfigError
from agentik.models import ModelLimits
from agentik.server._clients import Client, ClientConfigError, check_distinct
from agentik.server._config_sources import EXPECTED, as_count, as_positive, shown_value
from agentik.storage import DEFAULT_SHARDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from agentik.a2a_client import A2AAgentConfig
    from agentik.agent import ToolsetSource
    from agentik.mcp import McpServerConfig
    from agentik.toolsets import NamedTool, ToolsetContribution

ToolEntry: TypeAlias = "str | NamedTool | Iterable[NamedTool] | Callable[[], object]"
"""A ``[agent] tools`` entry: ``"module:attribute"`` naming what the other kinds
are, or (from a program that builds its ``ServerConfig``) a ``NamedTool``, an
iterable of them, or a callable returning either."""
ToolsetEntry: TypeAlias = (
    "str | ToolsetContribution | ToolsetSource | Iterable[ToolsetContribution | ToolsetSource]"
    " | Callable[[], object]"
)
"""A ``[agent] toolsets`` entry: ``"module:attribute"``, or the object it would name."""

DEFAULT_READERS = 4
"""``[storage] readers``: the backends' own default."""
DEFAULT_SSE_HEARTBEAT = 15.0
"""Seconds of silence before an event stream carries a ``: keep-alive`` comment:
under the 30-60 s after which proxies and load balancers drop an idle connection."""


def _refuse(instance: object, attribute: attrs.Attribute[Any], value: object, kind: str) -> None:
    raise ConfigError(
        f"{type(instance).__name__}.{attribute.name} must be {EXPECTED[kind]},"
        f" got {shown_value(value)}"
    )


def _positive_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """The rule of an ``int`` setting in ``agentik.toml`` (``as_count``)."""
    if as_count(value, low=1) is None:
        _refuse(instance, attribute, value, "int")


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """The rule of a ``count`` setting: 0 too."""
    if as_count(value, low=0) is None:
        _refuse(instance, attribute, value, "count")


def _positive_number(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """The rule of a ``float`` setting (``as_positive``): finite, > 0."""
    if as_positive(value) is None:
        _refuse(instance, attribute, value, "float")


def _peer_reserve(max_connections: object) -> int:
    """``Limits.peer_connections``' default; 16 when ``max_connections`` is
    wrong, which its validator then refuses."""
    connections = as_count(max_connections, low=1)
    return 16 if connections is None else max(16, connections // 4)


def _to_float(value: float) -> float:
    """Whole seconds stored as a float, as ``agentik.toml``'s ``30`` is; a value
    that is no number passes on to the validator, which refuses it."""
    number = as_positive(value)
    return value if number is None else number


@attrs.frozen(kw_only=True)
class ModelSettings:
    """An OpenAI-compatible backend. Absent means the scripted demo model."""

    base_url: str
    model: str
    api_key: str | None = attrs.field(default=None, repr=False)
    max_connections: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_positive_int)
    )
    """Model calls on the wire at once (``OpenAICompatibleModel(max_connections=)``);
    more wait in agentik's queue. None: the model's default."""
    timeout: float | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(_to_float),
        validator=attrs.validators.optional(_positive_number),
    )
    """Seconds one model call may take in total, retries and waits included
    (``OpenAICompatibleModel(timeout=)``). None: the model's default, 600 s."""
    connect_timeout: float | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(_to_float),
        validator=attrs.validators.optional(_positive_number),
    )
    """Seconds to open one connection to the backend
    (``OpenAICompatibleModel(connect_timeout=)``); a connection not open by
    then is a failed attempt, retried. None: only ``timeout`` bounds it."""
    max_retries: int | None = attrs.field(default=None, validator=attrs.validators.optional(_count))
    """Retries after a failed attempt (``RetryPolicy(max_retries=)``); 0: none.
    None: the model's default, 2."""
    structured_output: Literal["response_format", "tool"] | None = None
    """How a typed turn asks the backend for its answer
    (``OpenAICompatibleModel(structured_output=)``): ``tool`` for a backend
    that cannot take ``response_format``. None: the model's default."""
    accepts_parts: tuple[Literal["image", "file"], ...] | None = None
    """The kinds of content part the model takes (``OpenAICompatibleModel(
    accepts_parts=)``): ``[]`` for a text-only model, whose turns with an
    image or a file then get 415 (``unsupported_content``). None: the
    model's default, images and files."""


@attrs.frozen(kw_only=True)
class Limits:
    """Bounds that keep one server's memory and latency in check."""

    max_body_bytes: int = attrs.field(default=1_048_576, validator=_positive_int)
    """Larger request bodies get 413 before they are parsed."""
    max_part_bytes: int = attrs.field(default=524_288, validator=_positive_int)
    """Bytes of one content part of a turn (an image's or a file's data, a
    text part's UTF-8); a request with a larger one gets 413
    (``part_too_large``) and nothing is stored. Inline data travels as base64
    (a third larger): raise ``max_body_bytes`` with it."""
    max_queued_turns: int = attrs.field(default=8, validator=_positive_int)
    """Turns waiting per conversation; past it, 429 with Retry-After."""
    max_conversations: int = attrs.field(default=100_000, validator=_positive_int)
    """Live conversations (about 12 KiB each); a turn for a new one past it gets 429."""
    max_tool_rounds: int = attrs.field(default=25, validator=_positive_int)
    tool_timeout: float = attrs.field(default=60.0, converter=_to_float, validator=_positive_number)
    graceful_timeout: float = attrs.field(
        default=30.0, converter=_to_float, validator=_positive_number
    )
    """Seconds in-flight requests get to finish after SIGINT/SIGTERM."""
    header_timeout: float = attrs.field(
        default=10.0, converter=_to_float, validator=_positive_number
    )
    """Seconds a client may take to send a request head (from its first byte); then 408."""
    body_timeout: float = attrs.field(default=20.0, converter=_to_float, validator=_positive_number)
    """Seconds a client may take to send a request body (from the end of the
    head), plus one second per ``body_min_rate`` bytes received; then 408."""
    body_min_rate: float = attrs.field(
        default=500.0, converter=_to_float, validator=_positive_number
    )
    """Bytes per second: the rate that earns a large body more time."""
    max_connections: int = attrs.field(default=1000, validator=_positive_int)
    """Open HTTP connections; past it new ones wait in the listen backlog."""
    peer_connections: int = attrs.field(
        default=attrs.Factory(lambda self: _peer_reserve(self.max_connections), takes_self=True),
        validator=_count,
    )
    """A node that forwards (several nodes, ``[cluster] forward``): connections
    accepted past ``max_connections`` for requests other nodes forward to it;
    any other request on one gets 503 with Retry-After. Without it two nodes
    at their bound wait on each other for ever (docs/scale-out.md). Default:
    a quarter of ``max_connections``, at least 16; 0: no reserve."""
    keepalive_timeout: float = attrs.field(
        default=5.0, converter=_to_float, validator=_positive_number
    )
    """Seconds an idle keep-alive connection stays open between requests. Raise
    it above a load balancer's or client pool's own idle timeout, so the client
    side closes first and never sends on a connection the server is closing."""
    max_skill_name: int = attrs.field(default=64, validator=_positive_int)
    """Characters of a skill's name (``ContentLimits``, as every one below)."""
    max_skill_description: int = attrs.field(default=500, validator=_positive_int)
    """Characters of a skill's description; longer is 413 (the model: an error result)."""
    max_skill_body: int = attrs.field(default=32_000, validator=_positive_int)
    """Characters of a skill's body."""
    max_note: int = attrs.field(default=4_000, validator=_positive_int)
    """Characters of a working-memory note."""
    skills_prompt_tokens: int = attrs.field(default=2_000, validator=_positive_int)
    """Tokens an owner's skills catalog may take in a system message (at most a
    tenth of ``[model] context_tokens`` too)."""
    notes_prompt_tokens: int = attrs.field(default=4_000, validator=_positive_int)
    """Tokens a conversation's notes may take in a system message (at most 15 %
    of ``[model] context_tokens`` too)."""


@attrs.frozen(kw_only=True)
class ServerConfig:
    """Everything ``agentik serve`` needs, validated."""

    host: str = "127.0.0.1"
    port: int = 8080
    database: str = "./agentik.db"
    """A SQLite file path, or a ``postgresql://`` URL (``[storage] url``)."""
    model: ModelSettings | None = None
    system_prompt: str | None = None
    toolsets: tuple[ToolsetEntry, ...] = ()
    """Entry points ``module:attribute``, each giving one or more toolset
    contributions; a program may pass the contributions (or sources, or a
    callable returning them) instead."""
    tools: tuple[ToolEntry, ...] = ()
    """Core tools, offered to the model in every turn, unlike a toolset's:
    entry points ``module:attribute`` each giving one or more ``NamedTool``,
    or, from a program, the ``NamedTool`` objects themselves (``@tool`` makes
    them), iterables of them, or callables returning either."""
    auth_token: str | None = attrs.field(default=None, repr=False)
    """The default owner's token: its conversation ids are stored as sent."""
    clients: tuple[Client, ...] = ()
    """Tokens of named owners; each owner sees only its own conversations."""
    limits: Limits = Limits()
    mcp_servers: tuple[McpServerConfig, ...] = ()
    """MCP servers, each served as one toolset (the ``[[mcp.servers]]`` tables)."""
    a2a_agents: tuple[A2AAgentConfig, ...] = ()
    """Remote A2A agents, each served as one toolset with the tool ``<name>_send``
    (the ``[[a2a.agents]]`` tables)."""
    advertise_url: str | None = None
    """Where other nodes on the same PostgreSQL database send requests for
    this node's conversations; None: the address the server bound."""
    lease_seconds: float = 20.0
    """PostgreSQL: a node's lease on its conversations. A dead node's
    conversations move to other nodes this long after its last renewal."""
    forward: bool = True
    """Several nodes on one database: a request for a conversation another live
    node owns is proxied to that node, its answer returned as is (``[cluster]
    forward``); False answers 307 to the owner instead (docs/scale-out.md)."""
    takeover_wait: float | None = None
    """Seconds a forwarded request may wait for a conversation's new owner when
    its owner does not answer (it died: its lease must expire first); then 503.
    None: ``lease_seconds`` + 5 (``takeover_seconds``); 0: no wait."""
    shards: int = DEFAULT_SHARDS
    """PostgreSQL: the shards the database is split into, fixed at its first
    open (a node configured with another number refuses to start). Nodes
    lease shards, each holding about ``shards / live nodes``."""
    readers: int = DEFAULT_READERS
    """Read connections of the storage (reads that run at once). On PostgreSQL
    a node holds ``readers + 2`` connections (docs/scale-out.md)."""
    context_tokens: int | None = None
    """The context policy's budget (``ContextPolicy.max_tokens``): what each model
    request may carry; older history is summarized. None: the whole history."""
    gc_freeze: bool = False
    """Freeze the objects alive at start-up out of the garbage collector and raise
    its thresholds (``agentik serve`` only): fewer, cheaper collections under load."""
    retention_days: float | None = None
    """Delete conversations idle (no new message) for longer than this many
    days, checked hourly, in small batches; None keeps them for ever."""
    sse_heartbeat: float | None = DEFAULT_SSE_HEARTBEAT
    """Seconds an event stream may stay silent before the server sends a
    ``: keep-alive`` comment (proxies and browsers drop idle connections);
    None: never."""
    model_limits: ModelLimits | None = None
    """The model provider's budget (``[model] requests_per_minute``,
    ``tokens_per_minute``, ``max_concurrent``, ``max_queue_wait``), kept for
    every model call (``open_chat_agent(model_limits=)``); None: no limits."""

    @property
    def is_loopback(self) -> bool:
        return is_loopback(self.host)

    def __attrs_post_init__(self) -> None:
        try:
            check_distinct(self.clients, self.auth_token)
        except ClientConfigError as error:
            raise ConfigError(str(error)) from None

    @property
    def takeover_seconds(self) -> float:
        """``takeover_wait``, its default made: a dead owner's lease outlives
        its last renewal by ``lease_seconds`` at most, and 5 s more covers the
        renewal interval and the new owner's claim."""
        return self.lease_seconds + 5.0 if self.takeover_wait is None else self.takeover_wait

    @property
    def requires_auth(self) -> bool:
        """Whether every endpoint but ``/health`` needs a bearer token."""
        return self.auth_token is not None or bool(self.clients)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
