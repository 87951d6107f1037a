"""The demo model's toolset: what a first ``agentik serve`` or ``agentik chat``
offers with nothing configured.

With no model configured the server answers with the scripted demo model,
which calls a tool when the user names it (``call enable_toolset {"name":
"clock"}``). That example only works when a toolset exists, so with no model,
no toolsets and no MCP servers configured, the demo clock is offered: a
newcomer's first tool call works as the docs show. Configuring any toolset (or
a real model) takes it away; it never mixes with a user's own toolsets.
"""

from __future__ import annotations

from agentik.server._settings import ServerConfig
from agentik.toolsets import ToolsetContribution, tool


@tool
async def clock_now(tz: str = "UTC") -> str:
    """The current time.

    Args:
        tz: Time zone name.
    """
    return f"12:00 {tz} (a demo clock)"


CLOCK = ToolsetContribution(name="clock", description="Tells the time.", tools=(clock_now,))
"""The demo clock: ``clock_now`` answers a fixed time, so the demo is the same on every run."""


def demo_toolsets(config: ServerConfig) -> tuple[ToolsetContribution, ...]:
    """The demo clock when ``config`` runs the demo model and configures no
    toolset of its own (nor an MCP server); otherwise nothing."""
    if config.model is None and not config.toolsets and not config.mcp_servers:
        return (CLOCK,)
    return ()
