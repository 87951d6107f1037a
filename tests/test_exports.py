"""The public API: every name DESIGN.md promises is importable from ``agentik``,
listed in ``__all__`` and documented."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import agentik

DESIGN_NAMES = [
    "Role",
    "Message",
    "ToolCall",
    "TokenUsage",
    "TokenStats",
    "MemoryEntry",
    "Reflection",
    "Skill",
    "SkillSummary",
    "MessageStore",
    "WorkingMemoryStore",
    "ReflectionStore",
    "SkillStore",
    "StorageBundle",
    "in_memory_storage",
    "open_sqlite_storage",
    "NamedTool",
    "tool",
    "ToolsetContribution",
    "ToolsetActivation",
    "Run",
    "Error",
    "dispatch",
    "render_toolset_section",
    "ChatAgent",
    "open_chat_agent",
    "TurnResult",
    "ChatModel",
    "ModelRequest",
    "ModelResponse",
    "ScriptedModel",
    "OpenAICompatibleModel",
]


@pytest.mark.parametrize("name", DESIGN_NAMES)
def test_design_name_is_exported_and_documented(name: str) -> None:
    """Each contract name imports from the top level, is in __all__, has a docstring."""
    value = getattr(agentik, name)
    assert name in agentik.__all__
    assert inspect.getdoc(value), f"{name} has no docstring"


def test_all_names_exist_once() -> None:
    """__all__ lists only names that exist, each once (ruff keeps it sorted)."""
    assert len(set(agentik.__all__)) == len(agentik.__all__)
    for name in agentik.__all__:
        assert hasattr(agentik, name)


@pytest.mark.parametrize(
    "name", ["serve_agentik", "ServerConfig", "Client", "load_config", "ConfigError", "Limits"]
)
def test_server_names_are_public(name: str) -> None:
    """Running the server from Python needs no import from a private module."""
    value = getattr(agentik, name)
    assert name in agentik.__all__
    assert inspect.getdoc(value), f"{name} has no docstring"


def test_importing_agentik_loads_neither_the_server_nor_the_mcp_sdk() -> None:
    """An embedded agent pays for Starlette, hypercorn and the MCP SDK only on use."""
    code = (
        "import sys, agentik; "
        "heavy = [m for m in ('starlette', 'hypercorn', 'mcp', 'agentik.server') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
