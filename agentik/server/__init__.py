"""The HTTP server: native API, AG-UI and A2A over hypercorn (trio) and Starlette."""

from agentik.server._app import build_app as build_app
from agentik.server._context import ServerContext as ServerContext
from agentik.server._serve import serve_agentik as serve_agentik

__all__ = ["ServerContext", "build_app", "serve_agentik"]
