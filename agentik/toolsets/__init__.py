"""Tools and toolsets: named groups of tools the model switches on and off.

``dispatch``, ``render_toolset_section``, ``ToolsetIndex`` and argument
validation are pure (no trio, no clock); ``ToolsetActivation`` is the one piece
of per-conversation state, and ``toolset_control_tools`` binds the
enable/disable tools to it.
"""

from agentik._public import publish as _publish
from agentik.toolsets._activation import ToolsetActivation as ToolsetActivation
from agentik.toolsets._arguments import parse_arguments as parse_arguments
from agentik.toolsets._arguments import validator_for as validator_for
from agentik.toolsets._budget import activate_for_call as activate_for_call
from agentik.toolsets._contribution import ToolsetContribution as ToolsetContribution
from agentik.toolsets._control import DISABLE_TOOLSET as DISABLE_TOOLSET
from agentik.toolsets._control import DISABLE_TOOLSET_DESCRIPTION as DISABLE_TOOLSET_DESCRIPTION
from agentik.toolsets._control import ENABLE_TOOLSET as ENABLE_TOOLSET
from agentik.toolsets._control import ENABLE_TOOLSET_DESCRIPTION as ENABLE_TOOLSET_DESCRIPTION
from agentik.toolsets._control import ENABLE_TOOLSET_PARAMETERS as ENABLE_TOOLSET_PARAMETERS
from agentik.toolsets._control import TOOLSET_NAME_PARAMETERS as TOOLSET_NAME_PARAMETERS
from agentik.toolsets._control import disable_answer as disable_answer
from agentik.toolsets._control import enable_answer as enable_answer
from agentik.toolsets._control import toolset_control_tools as toolset_control_tools
from agentik.toolsets._cost import ToolCosts as ToolCosts
from agentik.toolsets._dispatch import Error as Error
from agentik.toolsets._dispatch import Run as Run
from agentik.toolsets._dispatch import ToolsetIndex as ToolsetIndex
from agentik.toolsets._dispatch import dispatch as dispatch
from agentik.toolsets._find import FIND_TOOLS as FIND_TOOLS
from agentik.toolsets._find import FIND_TOOLS_DESCRIPTION as FIND_TOOLS_DESCRIPTION
from agentik.toolsets._find import FIND_TOOLS_PARAMETERS as FIND_TOOLS_PARAMETERS
from agentik.toolsets._find import find_answer as find_answer
from agentik.toolsets._named_tool import NamedTool as NamedTool
from agentik.toolsets._named_tool import ToolHandler as ToolHandler
from agentik.toolsets._prompt import render_toolset_section as render_toolset_section
from agentik.toolsets._tool import tool as tool
from agentik.toolsets._types import schema_for_type as schema_for_type
from agentik.toolsets._validate import compile_schema as compile_schema

__all__ = [
    "DISABLE_TOOLSET",
    "DISABLE_TOOLSET_DESCRIPTION",
    "ENABLE_TOOLSET",
    "ENABLE_TOOLSET_DESCRIPTION",
    "ENABLE_TOOLSET_PARAMETERS",
    "FIND_TOOLS",
    "FIND_TOOLS_DESCRIPTION",
    "FIND_TOOLS_PARAMETERS",
    "TOOLSET_NAME_PARAMETERS",
    "Error",
    "NamedTool",
    "Run",
    "ToolCosts",
    "ToolHandler",
    "ToolsetActivation",
    "ToolsetContribution",
    "ToolsetIndex",
    "activate_for_call",
    "compile_schema",
    "disable_answer",
    "dispatch",
    "enable_answer",
    "find_answer",
    "parse_arguments",
    "render_toolset_section",
    "schema_for_type",
    "tool",
    "toolset_control_tools",
]

_publish(globals(), __all__, __name__)
