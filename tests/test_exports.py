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
    """Running the server from Python needs no import from a private module:
    ``agentik.server`` exports what it takes."""
    import agentik.server

    value = getattr(agentik.server, name)
    assert name in agentik.server.__all__
    assert inspect.getdoc(value), f"{name} has no docstring"


def test_importing_agentik_loads_neither_the_server_nor_the_mcp_sdk() -> None:
    """An embedded agent pays for Starlette, the HTTP parser and the MCP SDK only on use."""
    code = (
        "import sys, agentik; "
        "heavy = [m for m in ('starlette', 'httptools', 'hypercorn', 'mcp', 'agentik.server') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def public_objects() -> list[str]:
    """Exported classes and functions (constants and type aliases have no module)."""
    return [
        name
        for name in agentik.__all__
        if inspect.isclass(getattr(agentik, name)) or inspect.isfunction(getattr(agentik, name))
    ]


@pytest.mark.parametrize("name", public_objects())
def test_public_names_report_the_public_module(name: str) -> None:
    """``agentik.Message``, not ``agentik._messages.Message``: in reprs of the
    class, tracebacks, pickles and generated docs (as trio and httpx do)."""
    value = getattr(agentik, name)
    assert value.__module__ == "agentik"
    assert getattr(agentik, value.__qualname__) is value  # where pickle looks it up


def test_the_public_module_shows_in_tracebacks_and_class_reprs() -> None:
    import traceback

    assert repr(agentik.Message) == "<class 'agentik.Message'>"
    shown = traceback.format_exception_only(agentik.StoreError("disk full"))
    assert shown == ["agentik.StoreError: disk full\n"]


VALUES = [
    agentik.Message(
        agentik.Role.ASSISTANT,
        "hi",
        tool_calls=(agentik.ToolCall("c1", "clock_now", "{}"),),
        usage=agentik.TokenUsage(prompt_tokens=3, completion_tokens=4),
    ),
    agentik.Role.TOOL,
    agentik.TokenStats(prompt_tokens=1, completion_tokens=2),
    agentik.SkillSummary(name="greet", description="how to greet"),
    agentik.StoreError("disk full"),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_values_still_pickle_and_repr(value: object) -> None:
    import pickle

    copy = pickle.loads(pickle.dumps(value))
    assert type(copy) is type(value)
    assert repr(copy) == repr(value)
    assert not repr(value).startswith("agentik._")


def test_the_converter_still_structures_public_values() -> None:
    """cattrs resolves string annotations through the class's module: they
    were resolved before ``__module__`` changed, so it still can."""
    import typing

    from agentik._serde import converter

    message = VALUES[0]
    data = converter.unstructure(message)
    assert converter.structure(data, agentik.Message) == message
    for name in public_objects():
        value = getattr(agentik, name)
        if not (inspect.isclass(value) and hasattr(value, "__attrs_attrs__")):
            continue
        unresolved: str | None = None
        try:
            typing.get_type_hints(value)
        except NameError as error:  # only names the module imports for type checkers alone
            unresolved = error.name
        assert unresolved not in agentik.__all__, (name, unresolved)


@pytest.mark.parametrize("name", public_objects())
def test_docs_still_render(name: str) -> None:
    import pydoc

    text = pydoc.render_doc(getattr(agentik, name), renderer=pydoc.plaintext)
    assert name in text
