"""MCP servers as toolsets: each configured server becomes one toolset source.

``parse_mcp_servers`` reads the ``[[mcp.servers]]`` array of ``agentik.toml``;
``open_mcp_toolsets`` runs a manager task per server and yields
``McpToolset`` sources to pass as ``toolsets=`` to ``open_chat_agent``.
See docs/mcp.md.
"""

from agentik._public import publish as _publish
from agentik.agent import ElicitationError as ElicitationError
from agentik.mcp._auth import LoginError as LoginError
from agentik.mcp._auth import LoginRequired as LoginRequired
from agentik.mcp._auth import login as login
from agentik.mcp._config import HttpServer as HttpServer
from agentik.mcp._config import McpConfigError as McpConfigError
from agentik.mcp._config import McpServerConfig as McpServerConfig
from agentik.mcp._config import OAuthSettings as OAuthSettings
from agentik.mcp._config import StdioServer as StdioServer
from agentik.mcp._config import parse_mcp_server as parse_mcp_server
from agentik.mcp._config import parse_mcp_servers as parse_mcp_servers
from agentik.mcp._health import McpHealth as McpHealth
from agentik.mcp._health import McpState as McpState
from agentik.mcp._open import open_mcp_toolsets as open_mcp_toolsets
from agentik.mcp._source import McpToolset as McpToolset
from agentik.mcp._tokens import McpTokenVault as McpTokenVault
from agentik.mcp._tokens import token_key as token_key

__all__ = [
    "ElicitationError",
    "HttpServer",
    "LoginError",
    "LoginRequired",
    "McpConfigError",
    "McpHealth",
    "McpServerConfig",
    "McpState",
    "McpTokenVault",
    "McpToolset",
    "OAuthSettings",
    "StdioServer",
    "login",
    "open_mcp_toolsets",
    "parse_mcp_server",
    "parse_mcp_servers",
    "token_key",
]

_publish(globals(), __all__, __name__)
