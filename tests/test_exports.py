"""The public API: every name DESIGN.md promises is importable from ``agentik``,
listed in ``__all__`` and documented."""

from __future__ import annotations

import inspect

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
