"""Tools and toolsets: named groups of tools the model switches on and off.

``dispatch``, ``render_toolset_section`` and ``ToolsetIndex`` are pure (no trio,
no clock); ``ToolsetActivation`` is the one piece of per-conversation state.
"""

from agentik.toolsets._activation import ToolsetActivation as ToolsetActivation
from agentik.toolsets._contribution import ToolsetContribution as ToolsetContribution
from agentik.toolsets._dispatch import Error as Error
from agentik.toolsets._dispatch import Run as Run
from agentik.toolsets._dispatch import ToolsetIndex as ToolsetIndex
from agentik.toolsets._dispatch import dispatch as dispatch
from agentik.toolsets._named_tool import NamedTool as NamedTool
from agentik.toolsets._named_tool import ToolHandler as ToolHandler

__all__ = [
    "Error",
    "NamedTool",
    "Run",
    "ToolHandler",
    "ToolsetActivation",
    "ToolsetContribution",
    "ToolsetIndex",
    "dispatch",
]
