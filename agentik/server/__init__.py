"""The HTTP server: native API, AG-UI and A2A on Starlette, served over HTTP/1.1 by
agentik's own small server on trio and llhttp (``agentik.server.http``)."""

from agentik._errors import ConfigError as ConfigError
from agentik._errors import ProtocolViolation as ProtocolViolation
from agentik._public import publish as _publish
from agentik.server._app import build_app as build_app
from agentik.server._clients import Client as Client
from agentik.server._config import load_config as load_config
from agentik.server._context import ServerContext as ServerContext
from agentik.server._demo import CLOCK as CLOCK
from agentik.server._demo import demo_toolsets as demo_toolsets
from agentik.server._serve import content_limits as content_limits
from agentik.server._serve import context_policy as context_policy
from agentik.server._serve import load_tools as load_tools
from agentik.server._serve import load_toolsets as load_toolsets
from agentik.server._serve import open_configured_model as open_configured_model
from agentik.server._serve import serve_agentik as serve_agentik
from agentik.server._settings import Limits as Limits
from agentik.server._settings import ModelSettings as ModelSettings
from agentik.server._settings import ServerConfig as ServerConfig

__all__ = [
    "CLOCK",
    "Client",
    "ConfigError",
    "Limits",
    "ModelSettings",
    "ProtocolViolation",
    "ServerConfig",
    "ServerContext",
    "build_app",
    "content_limits",
    "context_policy",
    "demo_toolsets",
    "load_config",
    "load_tools",
    "load_toolsets",
    "open_configured_model",
    "serve_agentik",
]

_publish(globals(), __all__, __name__)
