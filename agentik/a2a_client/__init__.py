"""Remote A2A agents as toolsets: each configured agent becomes one toolset source
with one tool, ``<name>_send``.

``parse_a2a_agents`` reads the ``[[a2a.agents]]`` array of ``agentik.toml``;
``open_a2a_toolsets`` reads each agent's card and yields ``A2AToolset``
sources to pass as ``toolsets=`` to ``open_chat_agent``. See docs/toolsets.md,
"Remote A2A agents".
"""

from agentik._public import publish as _publish
from agentik.a2a_client._config import A2AAgentConfig as A2AAgentConfig
from agentik.a2a_client._config import A2AConfigError as A2AConfigError
from agentik.a2a_client._config import parse_a2a_agent as parse_a2a_agent
from agentik.a2a_client._config import parse_a2a_agents as parse_a2a_agents
from agentik.a2a_client._health import A2AHealth as A2AHealth
from agentik.a2a_client._health import A2AState as A2AState
from agentik.a2a_client._open import open_a2a_toolsets as open_a2a_toolsets
from agentik.a2a_client._source import A2AToolset as A2AToolset

__all__ = [
    "A2AAgentConfig",
    "A2AConfigError",
    "A2AHealth",
    "A2AState",
    "A2AToolset",
    "open_a2a_toolsets",
    "parse_a2a_agent",
    "parse_a2a_agents",
]

_publish(globals(), __all__, __name__)
