"""MCP server configuration: attrs values, and their parsing from a TOML table.

One ``McpServerConfig`` per server. ``parse_mcp_servers`` turns the
``[[mcp.servers]]`` array of ``agentik.toml`` (already parsed by ``tomllib``)
into configs; every problem raises ``McpConfigError`` naming the exact key
(``mcp.servers[1].args[0]``) and what was expected. Unknown keys are errors
too, so a typo never silently drops a setting.

Invariants: a config is either stdio (``command``) or Streamable HTTP
(``url``), never both; a configured toolset name already obeys the toolset
name rule (derived names are made to fit later, at connection time); every
timeout and backoff is a positive number of seconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Literal

import attrs

from agentik._errors import AgentikError

TOOLSET_NAME_PATTERN = re.compile(r"[A-Za-z0-9-]+")
"""The toolset-name rule (DESIGN.md): no ``_``, which separates a tool's verb."""

MAX_TOOLSET_NAME = 32
"""Toolset names stay short so ``<toolset>_<tool>`` leaves room for the tool's own name."""


class McpConfigError(AgentikError):
    """The MCP server configuration is invalid; the message names the key."""


def _strs(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _pairs(value: Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted((str(k), str(v)) for k, v in items))


@attrs.frozen(kw_only=True)
class StdioServer:
    """A server launched as a subprocess, speaking MCP over its stdin and stdout."""

    command: str
    """The executable; looked up on ``PATH`` like a shell would."""
    args: tuple[str, ...] = attrs.field(default=(), converter=_strs)
    env: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    """Variables added over the SDK's safe default environment (``PATH``, ``HOME``…)."""
    cwd: str | None = None


@attrs.frozen(kw_only=True)
class HttpServer:
    """A server reached over Streamable HTTP at ``url``."""

    url: str
    headers: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    """Sent with every request (for instance ``Authorization``)."""


_NAME_RULE = f"1-{MAX_TOOLSET_NAME} letters, digits or '-' (no '_')"


def _valid_name(name: str) -> bool:
    return TOOLSET_NAME_PATTERN.fullmatch(name) is not None and len(name) <= MAX_TOOLSET_NAME


def _check_name(
    instance: object, attribute: attrs.Attribute[str | None], value: str | None
) -> None:
    if value is not None and not _valid_name(value):
        raise McpConfigError(f"mcp server name {value!r} is invalid; expected {_NAME_RULE}")


def _check_positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0 or math.isnan(value):
        raise McpConfigError(f"mcp server {attribute.name} must be > 0 seconds, got {value!r}")


@attrs.frozen(kw_only=True)
class McpServerConfig:
    """One MCP server, exposed to the model as one toolset."""

    transport: StdioServer | HttpServer
    name: str | None = attrs.field(default=None, validator=_check_name)
    """The toolset name; default: the server's own name, made to fit the toolset rule."""
    description: str | None = None
    """The catalog row; default: the server's instructions or description, on one line."""
    lazy: bool = False
    """List the tools once at start, then launch the server only when one is first called."""
    protocol: Literal["auto", "legacy"] = "auto"
    """``auto`` negotiates 2026-07-28 when the server offers it; ``legacy`` forces the handshake."""
    call_timeout: float = attrs.field(default=60.0, validator=_check_positive)
    connect_timeout: float = attrs.field(default=30.0, validator=_check_positive)
    """Bounds launching, initializing and listing tools; past it the attempt has failed."""
    backoff: float = attrs.field(default=0.5, validator=_check_positive)
    """The first restart delay; it doubles per failed attempt up to ``backoff_max``."""
    backoff_max: float = attrs.field(default=30.0, validator=_check_positive)


_COMMON_KEYS = frozenset(
    {
        "name",
        "description",
        "lazy",
        "protocol",
        "call_timeout",
        "connect_timeout",
        "backoff",
        "backoff_max",
    }
)
_STDIO_KEYS = _COMMON_KEYS | {"command", "args", "env", "cwd"}
_HTTP_KEYS = _COMMON_KEYS | {"url", "headers"}


def parse_mcp_servers(value: object, *, where: str = "mcp.servers") -> tuple[McpServerConfig, ...]:
    """Build configs from the ``[[mcp.servers]]`` array of a parsed TOML document.

    Raises:
        McpConfigError: naming the offending key, for instance ``mcp.servers[0].command``.
    """
    if not isinstance(value, list):
        raise McpConfigError(f"{where} must be an array of tables, got {_kind(value)}")
    configs = tuple(parse_mcp_server(item, where=f"{where}[{i}]") for i, item in enumerate(value))
    names = [c.name for c in configs if c.name is not None]
    for i, config in enumerate(configs):
        if config.name is not None and names.count(config.name) > 1:
            raise McpConfigError(f"{where}[{i}].name {config.name!r} is used by two servers")
    return configs


def parse_mcp_server(table: object, *, where: str) -> McpServerConfig:
    """Build one config from one ``[[mcp.servers]]`` table."""
    if not isinstance(table, dict):
        raise McpConfigError(f"{where} must be a table, got {_kind(table)}")
    if ("command" in table) == ("url" in table):
        raise McpConfigError(f"{where} needs exactly one of 'command' (stdio) or 'url' (http)")
    allowed = _STDIO_KEYS if "command" in table else _HTTP_KEYS
    for key in table:
        if key not in allowed:
            raise McpConfigError(
                f"{where}.{key} is not a known key; expected one of {sorted(allowed)}"
            )
    transport: StdioServer | HttpServer
    if "command" in table:
        transport = StdioServer(
            command=_string(table, "command", where),
            args=_strings(table.get("args", []), f"{where}.args"),
            env=_string_table(table.get("env", {}), f"{where}.env"),
            cwd=_optional_string(table, "cwd", where),
        )
    else:
        url = _string(table, "url", where)
        if not url.startswith(("http://", "https://")):
            raise McpConfigError(f"{where}.url must start with http:// or https://, got {url!r}")
        transport = HttpServer(
            url=url, headers=_string_table(table.get("headers", {}), f"{where}.headers")
        )
    protocol = table.get("protocol", "auto")
    if protocol not in ("auto", "legacy"):
        raise McpConfigError(f"{where}.protocol must be 'auto' or 'legacy', got {protocol!r}")
    lazy = table.get("lazy", False)
    if not isinstance(lazy, bool):
        raise McpConfigError(f"{where}.lazy must be true or false, got {_kind(lazy)}")
    name = _optional_string(table, "name", where)
    if name is not None and not _valid_name(name):
        raise McpConfigError(f"{where}.name {name!r} is invalid; expected {_NAME_RULE}")
    return McpServerConfig(
        transport=transport,
        name=name,
        description=_optional_string(table, "description", where),
        lazy=lazy,
        protocol=protocol,
        **{key: _seconds(table[key], f"{where}.{key}") for key in _TIMES if key in table},
    )


_TIMES = ("call_timeout", "connect_timeout", "backoff", "backoff_max")


def _kind(value: object) -> str:
    return f"{value!r} (a {type(value).__name__})"


def _string(table: Mapping[str, object], key: str, where: str) -> str:
    value = table[key]
    if not isinstance(value, str) or not value:
        raise McpConfigError(f"{where}.{key} must be a non-empty string, got {_kind(value)}")
    return value


def _optional_string(table: Mapping[str, object], key: str, where: str) -> str | None:
    return _string(table, key, where) if key in table else None


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise McpConfigError(f"{where} must be an array of strings, got {_kind(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise McpConfigError(f"{where}[{i}] must be a string, got {_kind(item)}")
    return tuple(value)


def _string_table(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise McpConfigError(f"{where} must be a table of strings, got {_kind(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise McpConfigError(f"{where}.{key} must be a string, got {_kind(item)}")
    return _pairs(value)


def _seconds(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise McpConfigError(f"{where} must be a number of seconds, got {_kind(value)}")
    if not value > 0:
        raise McpConfigError(f"{where} must be > 0 seconds, got {value!r}")
    return float(value)
