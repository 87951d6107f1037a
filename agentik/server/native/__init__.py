"""The native API under ``/agentik``: turns (JSON or SSE), decisions, history,
memory, toolsets, reflections, skills, and a conversation's lifecycle (usage,
export, cancel, delete).

Its door is ``routes(ctx)``: the routes the app mounts. Handlers are methods
of ``NativeApi`` and ``LifecycleApi`` (their dependencies are attributes set
from the ``ServerContext``) and the hot turn route is the plain-ASGI
``TurnEndpoint``; the wire translation is ``_wire``. It stands on the HTTP
engine's door (``agentik.server.http``) and the shared turn helpers
(``agentik.server._turns``, ``_decisions``, ``_owners``), never on another
protocol.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from agentik._public import publish as _publish
from agentik.server._context import ServerContext
from agentik.server.native._lifecycle import LifecycleApi
from agentik.server.native._routes import NativeApi


def routes(ctx: ServerContext) -> list[BaseRoute]:
    """The native API's routes for ``ctx``'s agent."""
    return [*NativeApi(ctx).routes(), *LifecycleApi(ctx).routes()]


__all__ = ["routes"]

_publish(globals(), __all__, __name__)
