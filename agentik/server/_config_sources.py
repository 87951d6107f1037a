"""The settings table and the two sources read before the command line:
``agentik.toml`` and the environment.

Each setting is declared once in ``SETTINGS`` (its TOML section and key, its
environment variable, its kind), and every value a source gives is checked
for its kind here (``check_kind``), whatever the source, so the layers
cannot drift apart. Apart from ``_config``, which merges the layers and
validates the result into a ``ServerConfig``: this module knows where values
come from and what shape each has, not what they mean together.
"""

from __future__ import annotations

import contextlib
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias

import attrs

from agentik._errors import ConfigError
from agentik._input import InputError, decimal_float, decimal_int, shown

if TYPE_CHECKING:
    from agentik.a2a_client import A2AAgentConfig
    from agentik.mcp import McpServerConfig

Kind: TypeAlias = Literal["str", "int", "count", "float", "interval", "list", "bind", "bool"]
"""``int`` is positive, ``count`` may be 0 too; ``float`` is positive seconds,
``interval`` may be 0 too, or ``"off"`` (read as 0: the thing it times is off)."""
Raw: TypeAlias = "str | int | float | bool | list[str]"


@attrs.frozen
class Setting:
    """One configurable value and where it may come from."""

    section: str
    key: str
    kind: Kind
    env: str | None
    """Environment variable that overrides the file, if any."""
    secret: bool = False
    """Errors about it never show its value."""

    @property
    def name(self) -> str:
        return f"[{self.section}] {self.key}"


SETTINGS: tuple[Setting, ...] = (
    Setting("server", "bind", "bind", "AGENTIK_BIND"),
    Setting("server", "auth_token", "str", "AGENTIK_AUTH_TOKEN", secret=True),
    Setting("server", "gc_freeze", "bool", "AGENTIK_GC_FREEZE"),
    Setting("server", "advertise_url", "str", "AGENTIK_ADVERTISE_URL"),
    Setting("server", "sse_heartbeat", "interval", "AGENTIK_SSE_HEARTBEAT"),
    Setting("storage", "database", "str", "AGENTIK_DATABASE"),
    Setting("storage", "retention_days", "float", "AGENTIK_RETENTION_DAYS"),
    Setting("storage", "url", "str", "AGENTIK_STORAGE_URL", secret=True),
    Setting("storage", "lease_seconds", "float", "AGENTIK_LEASE_SECONDS"),
    Setting("storage", "readers", "int", "AGENTIK_STORAGE_READERS"),
    Setting("cluster", "forward", "bool", "AGENTIK_FORWARD"),
    Setting("cluster", "takeover_wait", "interval", "AGENTIK_TAKEOVER_WAIT"),
    Setting("storage", "shards", "int", "AGENTIK_STORAGE_SHARDS"),
    Setting("model", "base_url", "str", "AGENTIK_MODEL_BASE_URL"),
    Setting("model", "model", "str", "AGENTIK_MODEL"),
    Setting("model", "api_key_env", "str", None),
    Setting("model", "context_tokens", "int", "AGENTIK_CONTEXT_TOKENS"),
    Setting("model", "max_connections", "int", "AGENTIK_MODEL_MAX_CONNECTIONS"),
    Setting("model", "timeout", "float", "AGENTIK_MODEL_TIMEOUT"),
    Setting("model", "connect_timeout", "float", "AGENTIK_MODEL_CONNECT_TIMEOUT"),
    Setting("model", "max_retries", "count", "AGENTIK_MODEL_MAX_RETRIES"),
    Setting("model", "structured_output", "str", "AGENTIK_MODEL_STRUCTURED_OUTPUT"),
    Setting("model", "accepts_parts", "list", "AGENTIK_MODEL_ACCEPTS_PARTS"),
    Setting("model", "requests_per_minute", "int", "AGENTIK_MODEL_REQUESTS_PER_MINUTE"),
    Setting("model", "tokens_per_minute", "int", "AGENTIK_MODEL_TOKENS_PER_MINUTE"),
    Setting("model", "max_concurrent", "int", "AGENTIK_MODEL_MAX_CONCURRENT"),
    Setting("model", "max_queue_wait", "float", "AGENTIK_MODEL_MAX_QUEUE_WAIT"),
    Setting("agent", "system_prompt", "str", "AGENTIK_SYSTEM_PROMPT"),
    Setting("agent", "toolsets", "list", "AGENTIK_TOOLSETS"),
    Setting("agent", "tools", "list", "AGENTIK_TOOLS"),
    Setting("limits", "max_body_bytes", "int", "AGENTIK_MAX_BODY_BYTES"),
    Setting("limits", "max_part_bytes", "int", "AGENTIK_MAX_PART_BYTES"),
    Setting("limits", "max_queued_turns", "int", "AGENTIK_MAX_QUEUED_TURNS"),
    Setting("limits", "max_conversations", "int", "AGENTIK_MAX_CONVERSATIONS"),
    Setting("limits", "max_tool_rounds", "int", "AGENTIK_MAX_TOOL_ROUNDS"),
    Setting("limits", "tool_timeout", "float", "AGENTIK_TOOL_TIMEOUT"),
    Setting("limits", "graceful_timeout", "float", "AGENTIK_GRACEFUL_TIMEOUT"),
    Setting("limits", "header_timeout", "float", "AGENTIK_HEADER_TIMEOUT"),
    Setting("limits", "body_timeout", "float", "AGENTIK_BODY_TIMEOUT"),
    Setting("limits", "body_min_rate", "float", "AGENTIK_BODY_MIN_RATE"),
    Setting("limits", "max_connections", "int", "AGENTIK_MAX_CONNECTIONS"),
    Setting("limits", "peer_connections", "count", "AGENTIK_PEER_CONNECTIONS"),
    Setting("limits", "keepalive_timeout", "float", "AGENTIK_KEEPALIVE_TIMEOUT"),
    Setting("limits", "max_skill_name", "int", "AGENTIK_MAX_SKILL_NAME"),
    Setting("limits", "max_skill_description", "int", "AGENTIK_MAX_SKILL_DESCRIPTION"),
    Setting("limits", "max_skill_body", "int", "AGENTIK_MAX_SKILL_BODY"),
    Setting("limits", "max_note", "int", "AGENTIK_MAX_NOTE"),
    Setting("limits", "skills_prompt_tokens", "int", "AGENTIK_SKILLS_PROMPT_TOKENS"),
    Setting("limits", "notes_prompt_tokens", "int", "AGENTIK_NOTES_PROMPT_TOKENS"),
)
BY_NAME = {(s.section, s.key): s for s in SETTINGS}

_MAX_INT = 2**63 - 1
"""Largest integer setting: what SQLite and every consumer downstream can hold."""


def shown_value(value: object) -> str:
    """A setting's value for an error message, long text (or a 4,000-digit
    integer from TOML) cut short."""
    if isinstance(value, str):
        return shown(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def read_file(path: Path) -> dict[tuple[str, str], Raw]:
    """The settings a TOML file gives, keyed by (section, key)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read config file {str(path)!r}: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"config file {str(path)!r} is not valid UTF-8") from error
    try:
        document = tomllib.loads(text)
    except ValueError as error:  # TOMLDecodeError, or int()'s digit limit from inside tomllib
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {error}") from error
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ConfigError(
            f"config file {str(path)!r} is not valid TOML: nested too deeply"
        ) from None
    found: dict[tuple[str, str], Raw] = {}
    for section, table in document.items():
        if section in ("mcp", "a2a"):
            continue  # nested tables: read by read_mcp_servers, read_a2a_agents
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [{section}] must be a table, got {table!r}")
        for key, value in table.items():
            if (section, key) == ("server", "clients"):
                continue  # an array of tables: read by read_clients
            setting = BY_NAME.get((section, key))
            if setting is None:
                raise ConfigError(f"{path}: unknown setting [{section}] {key}")
            found[(section, key)] = check_kind(setting, value, origin=str(path))
    return found


def read_mcp_servers(path: Path) -> tuple[McpServerConfig, ...]:
    """The ``[[mcp.servers]]`` tables of a TOML file (checked: errors name the key)."""
    document = tomllib.loads(path.read_bytes().decode("utf-8"))
    mcp = document.get("mcp")
    if mcp is None:
        return ()
    if not isinstance(mcp, dict) or set(mcp) - {"servers"}:
        raise ConfigError(f"{path}: [mcp] may only hold the [[mcp.servers]] array")
    from agentik.mcp import McpConfigError, parse_mcp_servers  # the SDK loads only if used

    try:
        return parse_mcp_servers(mcp.get("servers", []))
    except McpConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


def read_a2a_agents(path: Path, env: Mapping[str, str] | None = None) -> tuple[A2AAgentConfig, ...]:
    """The ``[[a2a.agents]]`` tables of a TOML file (checked: errors name the key;
    ``token_env`` is read from ``env``)."""
    document = tomllib.loads(path.read_bytes().decode("utf-8"))
    a2a = document.get("a2a")
    if a2a is None:
        return ()
    if not isinstance(a2a, dict) or set(a2a) - {"agents"}:
        raise ConfigError(f"{path}: [a2a] may only hold the [[a2a.agents]] array")
    from agentik.a2a_client import A2AConfigError, parse_a2a_agents

    try:
        return parse_a2a_agents(a2a.get("agents", []), env=env)
    except A2AConfigError as error:
        raise ConfigError(f"{path}: {error}") from error


EXPECTED = {"int": "a positive integer", "count": "an integer >= 0", "float": "a positive number"}
"""What a numeric kind takes, as errors say it."""


def as_count(value: object, *, low: int) -> int | None:
    """``value`` as an ``int`` (``low`` 1) or ``count`` (``low`` 0) setting holds
    it, or None if it is not one: an integer, not a bool, ``low`` to 2**63 - 1.
    The one rule, for the sources here and for the value objects built
    directly (``_settings``)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_INT:
        return None
    return value


def as_positive(value: object) -> float | None:
    """``value`` as a ``float`` setting holds it (a float), or None if it is not
    a finite number > 0. The one rule, as ``as_count``'s."""
    value = _float(value)
    if isinstance(value, float) and 0 < value < math.inf:  # also false for nan
        return value
    return None


def _float(value: object) -> object:
    """An integer as a float, as errors show it too (``got 0.0``); any other value as is."""
    if isinstance(value, int) and not isinstance(value, bool):
        # any size, as the environment's '99999999999999999999' is read;
        # past 1.8e308 it stays an int, refused
        with contextlib.suppress(OverflowError):
            return float(value)
    return value


def check_kind(setting: Setting, value: object, *, origin: str) -> Raw:
    where = f"{origin}: {setting.name}"
    if setting.kind in ("str", "bind"):
        if not isinstance(value, str):
            shown = "a value not shown (it is secret)" if setting.secret else repr(value)
            raise ConfigError(f"{where} must be a string, got {shown}")
        return value
    if setting.kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if setting.kind in ("int", "count"):
        count = as_count(value, low=0 if setting.kind == "count" else 1)
        if count is None:
            raise ConfigError(f"{where} must be {EXPECTED[setting.kind]}, got {shown_value(value)}")
        return count
    if setting.kind in ("float", "interval"):
        number = as_positive(value)
        if number is not None:
            return number
        value = _float(value)
        if setting.kind == "float":
            raise ConfigError(f"{where} must be {EXPECTED['float']}, got {shown_value(value)}")
        if value == "off" or (isinstance(value, float) and value == 0):
            return 0.0
        raise ConfigError(
            f"{where} must be a number of seconds >= 0, or 'off', got {shown_value(value)}"
        )
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return [str(v) for v in value]


def read_env(env: Mapping[str, str]) -> dict[tuple[str, str], Raw]:
    """The settings environment variables give."""
    found: dict[tuple[str, str], Raw] = {}
    for setting in SETTINGS:
        if setting.env is None or setting.env not in env:
            continue
        text = env[setting.env]
        value: object = text
        if setting.kind == "bool":
            value = {"1": True, "true": True, "0": False, "false": False}.get(text.lower(), text)
        elif setting.kind in ("int", "count"):
            try:  # ASCII digits only: int() also reads '٣', ' 7 ' and '1_0'
                value = decimal_int(text, setting.env, minimum=-_MAX_INT, maximum=_MAX_INT)
            except InputError:
                value = text
        elif setting.kind in ("float", "interval"):
            try:  # float() also reads 'nan', 'inf', '١' and '1_0'
                value = decimal_float(text, setting.env)
            except InputError:
                value = text
        elif setting.kind == "list":
            value = [part.strip() for part in text.split(",") if part.strip()]
        found[(setting.section, setting.key)] = check_kind(setting, value, origin=setting.env)
    return found
