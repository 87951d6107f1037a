"""Tools and toolsets: named groups of tools the model switches on and off."""

from agentik.toolsets._named_tool import NamedTool as NamedTool
from agentik.toolsets._named_tool import ToolHandler as ToolHandler

__all__ = ["NamedTool", "ToolHandler"]
