"""A2A 1.0 over JSON-RPC at ``POST /a2a``, and the agent card at
``/.well-known/agent-card.json``.

Its door is ``A2aEndpoint(ctx)``: ``routes()`` gives the routes the app
mounts, ``stop_idle_watchers()`` ends, at shutdown, the streams that follow a
task nothing runs. Inside: the JSON-RPC requests in (``_rpc``), tasks out
(``_views``), the task ledger (``_ledger``), finding a task (``_lookup``),
the methods (``_methods``), the turns they run in the server's nursery
(``_tasks``) and ListTasks (``_list``). It stands on the HTTP engine's door
(``agentik.server.http``) and the shared turn helpers
(``agentik.server._turns``, ``_decisions``, ``_owners``), never on another
protocol.
"""

from agentik._public import publish as _publish
from agentik.server.a2a._routes import A2aEndpoint as A2aEndpoint

__all__ = ["A2aEndpoint"]

_publish(globals(), __all__, __name__)
