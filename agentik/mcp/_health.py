"""What ``/health`` shows of one MCP server: where its manager task is, and why."""

from __future__ import annotations

import enum

import attrs


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
