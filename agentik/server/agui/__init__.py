"""AG-UI 1.0 at ``POST /agui``: ``RunAgentInput`` in (``_input``), the run's
events out as SSE (``_events``).

Its door is ``routes(ctx)``: the routes the app mounts, served by an
``AguiEndpoint`` whose dependencies are attributes set from the
``ServerContext``. It stands on the HTTP engine's door
(``agentik.server.http``) and the shared turn helpers
(``agentik.server._turns``, ``_owners``), never on another protocol.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from agentik._public import publish as _publish
from agentik.server._context import ServerContext
from agentik.server.agui._routes import AguiEndpoint


def routes(ctx: ServerContext) -> list[BaseRoute]:
    """The AG-UI route for ``ctx``'s agent."""
    return AguiEndpoint(ctx).routes()


__all__ = ["routes"]

_publish(globals(), __all__, __name__)
