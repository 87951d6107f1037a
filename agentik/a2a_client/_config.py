"""Remote A2A agent configuration: the attrs value, and its parsing from TOML.

One ``A2AAgentConfig`` per remote agent. ``parse_a2a_agents`` turns the
``[[a2a.agents]]`` array of ``agentik.toml`` (already parsed by ``tomllib``)
into configs; every problem raises ``A2AConfigError`` naming the exact key
(``a2a.agents[1].url``) and what was expected. Unknown keys are errors too,
so a typo never silently drops a setting.

Invariants: a name obeys the toolset-name rule (``[A-Za-z0-9-]+``, at most
32 characters), so ``<name>_send`` is a valid tool name; a url is an absolute
``http``/``https`` URL with a host; a token is never in ``repr`` and never in
an error message (the file names the variable that holds it, ``token_env``);
every timeout is a positive finite number of seconds.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from urllib.parse import urlsplit

import attrs

from agentik._errors import AgentikError

NAME_PATTERN = re.compile(r"[A-Za-z0-9-]{1,32}")
"""The toolset-name rule (DESIGN.md), short enough that ``<name>_send`` fits."""

_KEYS = frozenset(
    {
        "name",
        "url",
        "token_env",
        "description",
        "streaming",
        "connect_timeout",
        "elicitation_timeout",
    }
)


class A2AConfigError(AgentikError):
    """A remote A2A agent's configuration is invalid; the message names the key."""


def _check_name(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise A2AConfigError(
            f"a2a agent name must be 1..32 of A-Z a-z 0-9 '-' (no '_'), got {value!r:.60}"
        )


def _check_url(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    problem = url_problem(value)
    if problem is not None:
        raise A2AConfigError(f"a2a agent url {problem}")


def _check_seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise A2AConfigError(
            f"a2a agent {attribute.name} must be a positive number of seconds, got {value!r}"
        )


def url_problem(value: object) -> str | None:
    """What is wrong with ``value`` as an agent URL, or None."""
    if not isinstance(value, str):
        return f"must be a string, got {type(value).__name__}"
    if any(c.isspace() or ord(c) < 0x20 for c in value):
        return f"must not contain spaces or control characters, got {value!r:.80}"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError:
        return f"must be an http(s) URL, got {value!r:.80}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http:// or https:// URL with a host, got {value!r:.80}"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (give the token with token_env)"
    return None


@attrs.frozen(kw_only=True)
class A2AAgentConfig:
    """One remote A2A agent, served to the model as the toolset ``name`` with the
    tool ``<name>_send``."""

    name: str = attrs.field(validator=_check_name)
    """The toolset name; the model calls ``<name>_send``."""
    url: str = attrs.field(validator=_check_url)
    """The agent's base URL (its card is ``<url>/.well-known/agent-card.json``), or
    the URL of its card itself (ending in ``.json``)."""
    token: str | None = attrs.field(default=None, repr=False)
    """Sent as ``Authorization: Bearer <token>``; never logged or shown."""
    description: str | None = None
    """The toolset's catalog line; by default the card's description and skills."""
    streaming: bool = True
    """Stream (SendStreamingMessage, SubscribeToTask) where the card allows; False
    sends with ``returnImmediately`` and polls GetTask (a proxy that buffers
    event streams)."""
    connect_timeout: float = attrs.field(default=10.0, validator=_check_seconds)
    """How long one HTTP exchange may wait for the agent to connect and answer
    a non-streamed call (a streamed call's events may be as far apart as the
    tool's own timeout allows)."""
    elicitation_timeout: float = attrs.field(default=600.0, validator=_check_seconds)
    """How long the remote agent's question (``INPUT_REQUIRED``) waits for a person."""

    @property
    def card_url(self) -> str:
        if self.url.endswith(".json"):
            return self.url
        return self.url.rstrip("/") + "/.well-known/agent-card.json"


def parse_a2a_agents(
    value: object, *, where: str = "a2a.agents", env: Mapping[str, str] | None = None
) -> tuple[A2AAgentConfig, ...]:
    """Build configs from the ``[[a2a.agents]]`` array of a parsed TOML document.

    ``env`` (default ``os.environ``) holds the tokens ``token_env`` names.

    Raises:
        A2AConfigError: naming the offending key, for instance ``a2a.agents[0].url``.
    """
    if not isinstance(value, list):
        raise A2AConfigError(f"{where} must be an array of tables, got {type(value).__name__}")
    env = os.environ if env is None else env
    configs = tuple(
        parse_a2a_agent(item, where=f"{where}[{i}]", env=env) for i, item in enumerate(value)
    )
    seen: set[str] = set()
    for i, config in enumerate(configs):
        if config.name in seen:
            raise A2AConfigError(f"{where}[{i}].name {config.name!r} is used by two agents")
        seen.add(config.name)
    return configs


def parse_a2a_agent(
    table: object, *, where: str, env: Mapping[str, str] | None = None
) -> A2AAgentConfig:
    """Build one config from one ``[[a2a.agents]]`` table."""
    if not isinstance(table, dict):
        raise A2AConfigError(f"{where} must be a table, got {type(table).__name__}")
    for key in table:
        if key not in _KEYS:
            raise A2AConfigError(
                f"{where}.{key} is not a known key; expected one of {sorted(_KEYS)}"
            )
    for key in ("name", "url"):
        if key not in table:
            raise A2AConfigError(f"{where}.{key} is missing")
    name, url = table["name"], table["url"]
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise A2AConfigError(
            f"{where}.name must be 1..32 of A-Z a-z 0-9 '-' (no '_'), got {name!r:.60}"
        )
    if (problem := url_problem(url)) is not None:
        raise A2AConfigError(f"{where}.url {problem}")
    token: str | None = None
    if "token_env" in table:
        variable = table["token_env"]
        if not isinstance(variable, str) or not variable:
            raise A2AConfigError(f"{where}.token_env must be the name of an environment variable")
        token = (os.environ if env is None else env).get(variable)
        if not token:
            raise A2AConfigError(
                f"{where}.token_env names {variable!r}, which is not set (or empty)"
            )
    description = table.get("description")
    if description is not None and (not isinstance(description, str) or not description.strip()):
        raise A2AConfigError(f"{where}.description must be a non-empty string")
    streaming = table.get("streaming", True)
    if not isinstance(streaming, bool):
        raise A2AConfigError(f"{where}.streaming must be true or false, got {streaming!r}")
    timeouts: dict[str, float] = {}
    for key in ("connect_timeout", "elicitation_timeout"):
        if key in table:
            seconds = table[key]
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or not math.isfinite(seconds)
                or seconds <= 0
            ):
                raise A2AConfigError(
                    f"{where}.{key} must be a positive number of seconds, got {seconds!r}"
                )
            timeouts[key] = float(seconds)
    return A2AAgentConfig(
        name=name,
        url=url,
        token=token,
        description=description,
        streaming=streaming,
        **timeouts,
    )
