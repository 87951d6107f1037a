"""agentik.toolsets exports exactly what the agent and users rely on."""

from __future__ import annotations

import agentik.toolsets as toolsets

EXPECTED = {
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
    "compile_schema",
    "activate_for_call",
    "disable_answer",
    "dispatch",
    "enable_answer",
    "find_answer",
    "parse_arguments",
    "render_toolset_section",
    "schema_for_type",
    "tool",
    "toolset_control_tools",
}


def test_public_names() -> None:
    """__all__ is the contract; every name in it is importable and documented."""
    assert set(toolsets.__all__) == EXPECTED
    for name in toolsets.__all__:
        value = getattr(toolsets, name)
        if callable(value) and name != "ToolHandler":
            assert (value.__doc__ or "").strip(), name


def test_control_tool_names() -> None:
    """The switch names are the ones the prompt section tells the model to call."""
    assert (toolsets.ENABLE_TOOLSET, toolsets.DISABLE_TOOLSET) == (
        "enable_toolset",
        "disable_toolset",
    )
