"""The demo clock is offered exactly when a newcomer runs the demo model with
nothing of their own: no model, no toolsets, no MCP servers configured."""

from __future__ import annotations

import pytest

from agentik.mcp import McpServerConfig, StdioServer
from agentik.server import ModelSettings, ServerConfig
from agentik.server._demo import CLOCK, demo_toolsets

MODEL = ModelSettings(base_url="http://127.0.0.1:1/v1", model="m")
MCP = McpServerConfig(name="files", transport=StdioServer(command="true"))


@pytest.mark.parametrize("model", [None, MODEL])
@pytest.mark.parametrize("toolsets", [(), ("tests.server.sample_toolsets:clock",)])
@pytest.mark.parametrize("mcp", [(), (MCP,)])
def test_only_a_bare_demo_gets_the_clock(
    model: ModelSettings | None, toolsets: tuple[str, ...], mcp: tuple[McpServerConfig, ...]
) -> None:
    config = ServerConfig(model=model, toolsets=toolsets, mcp_servers=mcp)
    bare = model is None and not toolsets and not mcp
    assert demo_toolsets(config) == ((CLOCK,) if bare else ())
