"""Server configuration: ``agentik.toml``, then environment variables, then CLI flags.

Each setting is declared once in ``SETTINGS`` (its TOML section and key, its
environment variable, its kind and default), so the three layers cannot drift
apart; ``_config_sources`` holds that table and reads the file and the
environment. Layers are merged into one flat mapping, later layers winning, and only
then validated into a frozen ``ServerConfig`` (``_settings`` holds the values);
every error names the setting (``[limits] max_queued_turns``) and what was
expected. Secrets (the model API
key, the bearer token) come from the environment or the file, never from a
flag, and are kept out of ``repr`` and out of every error message.

``[[server.clients]]`` (or ``AGENTIK_CLIENTS``) maps bearer tokens to owners;
``_clients`` reads it. ``[server] auth_token`` stays the token of the default
owner, whose conversation ids are stored as sent (as before owners existed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from agentik._errors import ConfigError
from agentik._input import InputError, decimal_int, shown
from agentik.models import ModelLimits
from agentik.server._clients import _TOKEN_RULE, TOKEN, Client, read_clients
from agentik.server._config_sources import (
    BY_NAME,
    Raw,
    check_kind,
    read_a2a_agents,
    read_env,
    read_file,
    read_mcp_servers,
)
from agentik.server._settings import (
    DEFAULT_READERS,
    DEFAULT_SSE_HEARTBEAT,
    Limits,
    ModelSettings,
    ServerConfig,
    is_loopback,
)
from agentik.storage import DEFAULT_SHARDS, MAX_SHARDS

if TYPE_CHECKING:
    from agentik.a2a_client import A2AAgentConfig
    from agentik.mcp import McpServerConfig

DEFAULT_API_KEY_ENV = "AGENTIK_API_KEY"


_MIN_CONTEXT_TOKENS = 256
"""Below this a system prompt and one short turn hardly fit."""


def parse_bind(value: str, *, name: str = "[server] bind") -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6)."""
    host, sep, port_text = value.rpartition(":")
    try:  # ASCII digits only: "²".isdigit() is true, and int("²") raises
        port: int | None = decimal_int(port_text, "the port")
    except InputError:
        port = None
    if not sep or not host or port is None:
        raise ConfigError(f"{name} must be 'host:port', got {shown(value)}")
    if port > 65535:
        raise ConfigError(f"{name} port must be 0..65535, got {port}")
    return host.removeprefix("[").removesuffix("]"), port


def load_config(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[tuple[str, str], object] | None = None,
) -> ServerConfig:
    """Merge file < environment < ``overrides`` (CLI flags) and validate.

    ``path`` None reads ``./agentik.toml`` if it exists; an explicit path
    that does not exist is an error.
    """
    env = os.environ if env is None else env
    if path is None:
        default = Path("agentik.toml")
        path = default if default.is_file() else None
    merged: dict[tuple[str, str], Raw] = {}
    mcp_servers: tuple[McpServerConfig, ...] = ()
    a2a_agents: tuple[A2AAgentConfig, ...] = ()
    if path is not None:
        merged.update(read_file(path))
        mcp_servers = read_mcp_servers(path)
        a2a_agents = read_a2a_agents(path, env)
    merged.update(read_env(env))
    for (section, key), value in (overrides or {}).items():
        setting = BY_NAME.get((section, key))
        if setting is None:
            raise ConfigError(f"unknown setting [{section}] {key}")
        merged[(section, key)] = check_kind(setting, value, origin="command line")
    config = _build(merged, env, read_clients(path, env), mcp_servers)
    return attrs.evolve(config, a2a_agents=a2a_agents) if a2a_agents else config


def _build(
    merged: Mapping[tuple[str, str], Raw],
    env: Mapping[str, str],
    clients: tuple[Client, ...],
    mcp_servers: tuple[McpServerConfig, ...],
) -> ServerConfig:
    def get(section: str, key: str) -> Raw | None:
        return merged.get((section, key))

    host, port = "127.0.0.1", 8080
    bind = get("server", "bind")
    if isinstance(bind, str):
        host, port = parse_bind(bind)
    token = get("server", "auth_token")
    auth_token = token if isinstance(token, str) and token else None
    if auth_token is not None and not TOKEN.match(auth_token):
        # the rule of [[server.clients]] tokens: a short token is guessable
        raise ConfigError(f"[server] auth_token must be {_TOKEN_RULE} (the value is not shown)")
    if not is_loopback(host) and auth_token is None and not clients:
        raise ConfigError(
            f"[server] auth_token is required when binding to the non-loopback address {host!r}"
            " (set AGENTIK_AUTH_TOKEN, or give clients tokens in [[server.clients]])"
        )

    def number(key: str, default: float) -> float:
        value = get("limits", key)
        return value if isinstance(value, int | float) else default

    base = Limits()
    peers = get("limits", "peer_connections")
    limits = Limits(
        **({"peer_connections": peers} if isinstance(peers, int) else {}),
        max_body_bytes=int(number("max_body_bytes", base.max_body_bytes)),
        max_part_bytes=int(number("max_part_bytes", base.max_part_bytes)),
        max_queued_turns=int(number("max_queued_turns", base.max_queued_turns)),
        max_conversations=int(number("max_conversations", base.max_conversations)),
        max_tool_rounds=int(number("max_tool_rounds", base.max_tool_rounds)),
        tool_timeout=number("tool_timeout", base.tool_timeout),
        graceful_timeout=number("graceful_timeout", base.graceful_timeout),
        header_timeout=number("header_timeout", base.header_timeout),
        body_timeout=number("body_timeout", base.body_timeout),
        body_min_rate=number("body_min_rate", base.body_min_rate),
        max_connections=int(number("max_connections", base.max_connections)),
        keepalive_timeout=number("keepalive_timeout", base.keepalive_timeout),
        max_skill_name=int(number("max_skill_name", base.max_skill_name)),
        max_skill_description=int(number("max_skill_description", base.max_skill_description)),
        max_skill_body=int(number("max_skill_body", base.max_skill_body)),
        max_note=int(number("max_note", base.max_note)),
        skills_prompt_tokens=int(number("skills_prompt_tokens", base.skills_prompt_tokens)),
        notes_prompt_tokens=int(number("notes_prompt_tokens", base.notes_prompt_tokens)),
    )
    database = get("storage", "database")
    retention = get("storage", "retention_days")
    url = get("storage", "url")
    if isinstance(url, str):
        if isinstance(database, str):
            raise ConfigError("set one of [storage] database and [storage] url, not both")
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(
                "[storage] url must start with postgresql:// (the value is not shown)"
            )
        database = url
    prompt = get("agent", "system_prompt")
    context_tokens = get("model", "context_tokens")
    if context_tokens is not None and (
        not isinstance(context_tokens, int) or context_tokens < _MIN_CONTEXT_TOKENS
    ):
        raise ConfigError(
            f"[model] context_tokens must be an integer >= {_MIN_CONTEXT_TOKENS},"
            f" got {context_tokens!r}"
        )
    toolsets = get("agent", "toolsets")
    tools = get("agent", "tools")
    return ServerConfig(
        host=host,
        port=port,
        database=database if isinstance(database, str) else "./agentik.db",
        model=_model(merged, env),
        system_prompt=prompt if isinstance(prompt, str) else None,
        toolsets=tuple(check_entry_point(t) for t in toolsets)
        if isinstance(toolsets, list)
        else (),
        tools=tuple(check_entry_point(t, "tools") for t in tools)
        if isinstance(tools, list)
        else (),
        auth_token=auth_token,
        clients=clients,
        limits=limits,
        mcp_servers=mcp_servers,
        context_tokens=context_tokens if isinstance(context_tokens, int) else None,
        gc_freeze=get("server", "gc_freeze") is True,
        retention_days=_retention_days(retention),
        advertise_url=_advertise_url(get("server", "advertise_url")),
        lease_seconds=_lease_seconds(get("storage", "lease_seconds")),
        forward=get("cluster", "forward") is not False,
        takeover_wait=_takeover_wait(get("cluster", "takeover_wait")),
        readers=_readers(get("storage", "readers")),
        shards=_shards(get("storage", "shards")),
        sse_heartbeat=_sse_heartbeat(get("server", "sse_heartbeat")),
        model_limits=_model_limits(merged),
    )


MAX_RETENTION_DAYS = 36_500.0
"""A century. Far longer overflowed when the retention task first ran (a
cutoff before the year 1: ``OverflowError``, the server stopped); to keep
conversations for ever, leave ``retention_days`` unset."""


def _retention_days(value: Raw | None) -> float | None:
    if not isinstance(value, float):
        return None
    if value > MAX_RETENTION_DAYS:
        raise ConfigError(
            f"[storage] retention_days must be at most {MAX_RETENTION_DAYS:g} (a century;"
            f" unset keeps conversations for ever), got {value!r}"
        )
    return value


def _advertise_url(value: Raw | None) -> str | None:
    if not isinstance(value, str):
        return None
    if not value.startswith(("http://", "https://")):
        raise ConfigError(
            f"[server] advertise_url must start with http:// or https://, got {value!r}"
        )
    return value.rstrip("/")


def _lease_seconds(value: Raw | None) -> float:
    if not isinstance(value, int | float):
        return 20.0
    if not 1 <= value <= 3600:
        raise ConfigError(f"[storage] lease_seconds must be between 1 and 3600, got {value!r}")
    return float(value)


MAX_TAKEOVER_WAIT = 3600.0
"""Seconds: a request held longer than the longest lease is held for nothing."""


def _takeover_wait(value: Raw | None) -> float | None:
    if not isinstance(value, float):
        return None  # the lease plus 5 s (ServerConfig.takeover_seconds)
    if value > MAX_TAKEOVER_WAIT:
        raise ConfigError(
            f"[cluster] takeover_wait must be 0 or 'off' (no wait) or at most"
            f" {MAX_TAKEOVER_WAIT:g} seconds, got {value!r}"
        )
    return value


MAX_READERS = 64
"""Reads run in trio's worker threads, 40 at once by default: past that a
reader only waits for a thread, and holds a connection (and, on PostgreSQL, a
server process) for nothing."""


def _readers(value: Raw | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        return DEFAULT_READERS
    if value > MAX_READERS:
        raise ConfigError(f"[storage] readers must be between 1 and {MAX_READERS}, got {value!r}")
    return value


def _shards(value: Raw | None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        return DEFAULT_SHARDS
    if not 1 <= value <= MAX_SHARDS:
        raise ConfigError(f"[storage] shards must be between 1 and {MAX_SHARDS}, got {value!r}")
    return value


MIN_SSE_HEARTBEAT = 1.0
"""Seconds: a shorter heartbeat only costs bytes (proxies drop a connection
after tens of seconds of silence)."""


def _sse_heartbeat(value: Raw | None) -> float | None:
    if not isinstance(value, float):
        return DEFAULT_SSE_HEARTBEAT
    if value == 0:
        return None
    if value < MIN_SSE_HEARTBEAT:
        raise ConfigError(
            f"[server] sse_heartbeat must be 0 or 'off' (no heartbeat) or at least"
            f" {MIN_SSE_HEARTBEAT:g} second, got {value!r}"
        )
    return value


def _model(merged: Mapping[tuple[str, str], Raw], env: Mapping[str, str]) -> ModelSettings | None:
    base_url = merged.get(("model", "base_url"))
    model = merged.get(("model", "model"))
    if base_url is None and model is None:
        return None
    if not isinstance(base_url, str) or not base_url:
        raise ConfigError("[model] base_url is required when [model] model is set")
    if not isinstance(model, str) or not model:
        raise ConfigError("[model] model is required when [model] base_url is set")
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"[model] base_url must start with http:// or https://, got {base_url!r}")
    key_env = merged.get(("model", "api_key_env"), DEFAULT_API_KEY_ENV)
    api_key = env.get(key_env) if isinstance(key_env, str) else None
    connections = merged.get(("model", "max_connections"))
    if connections is not None and (not isinstance(connections, int) or connections < 1):
        raise ConfigError(f"[model] max_connections must be an integer >= 1, got {connections!r}")
    timeout = merged.get(("model", "timeout"))
    connect_timeout = merged.get(("model", "connect_timeout"))
    retries = merged.get(("model", "max_retries"))
    structured = merged.get(("model", "structured_output"))
    if structured is not None and structured not in ("response_format", "tool"):
        raise ConfigError(
            f"[model] structured_output must be 'response_format' or 'tool', got {structured!r}"
        )
    accepts = merged.get(("model", "accepts_parts"))
    if accepts is not None and (
        not isinstance(accepts, list) or not set(accepts) <= {"image", "file"}
    ):
        raise ConfigError(
            f"[model] accepts_parts must be a list of 'image' and 'file', got {accepts!r}"
        )
    return ModelSettings(
        base_url=base_url,
        model=model,
        accepts_parts=None
        if accepts is None
        else tuple("image" if kind == "image" else "file" for kind in accepts),
        api_key=api_key or None,
        max_connections=connections,
        # each checked by its kind already (check_kind)
        timeout=timeout if isinstance(timeout, float) else None,
        connect_timeout=connect_timeout if isinstance(connect_timeout, float) else None,
        max_retries=retries if isinstance(retries, int) and not isinstance(retries, bool) else None,
        structured_output=(
            None if structured is None else "tool" if structured == "tool" else "response_format"
        ),
    )


_LIMIT_KEYS = ("requests_per_minute", "tokens_per_minute", "max_concurrent", "max_queue_wait")


def _model_limits(merged: Mapping[tuple[str, str], Raw]) -> ModelLimits | None:
    """``ModelLimits`` from the ``[model]`` settings of its fields; None if none is set."""
    given = {key: merged[("model", key)] for key in _LIMIT_KEYS if ("model", key) in merged}
    if not given:
        return None
    try:
        return ModelLimits(**given)  # type: ignore[arg-type]
    except ValueError as error:  # the kinds were checked; this is a range
        raise ConfigError(f"[model] {error}") from None


def check_entry_point(spec: str, key: str = "toolsets") -> str:
    module, sep, attribute = spec.partition(":")
    if not sep or not module or not attribute:
        raise ConfigError(f"[agent] {key} entry {spec!r} must be 'module:attribute'")
    return spec
