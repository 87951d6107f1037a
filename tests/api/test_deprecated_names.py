"""Names that moved out of ``agentik`` still import from there for one
release, each with a ``DeprecationWarning`` that names its new home; our own
code, tests, docs and benchmarks use the new homes."""

from __future__ import annotations

import ast
import importlib
import pickle
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import agentik

# What ``agentik.__all__`` held in 0.1.0 and is not in the core any more, with
# its new home. Written out here, not read from agentik: this is the promise.
MOVED = {
    "AgentStats": "agentik.agent",
    "ContentLimits": "agentik.agent",
    "ElicitationAsked": "agentik.agent",
    "ElicitationError": "agentik.agent",
    "ElicitationRequest": "agentik.agent",
    "SystemPromptContributor": "agentik.agent",
    "TooLargeError": "agentik.agent",
    "ToolCallFinished": "agentik.agent",
    "ToolCallStarted": "agentik.agent",
    "ToolsetSource": "agentik.agent",
    "ToolsetStatus": "agentik.agent",
    "TurnEvent": "agentik.agent",
    "TurnFailed": "agentik.agent",
    "TurnFinished": "agentik.agent",
    "ModelStreamEvent": "agentik.models",
    "RetryPolicy": "agentik.models",
    "StreamingChatModel": "agentik.models",
    "TextDelta": "agentik.models",
    "ToolCallDelta": "agentik.models",
    "Approval": "agentik.storage",
    "ArchiveRecord": "agentik.storage",
    "ArchivedApproval": "agentik.storage",
    "ArchivedFailure": "agentik.storage",
    "ArchivedMessage": "agentik.storage",
    "ArchivedNote": "agentik.storage",
    "ArchivedReflection": "agentik.storage",
    "ArchivedSummary": "agentik.storage",
    "ConversationSnapshot": "agentik.storage",
    "DuplicateKeyError": "agentik.storage",
    "KeyedTurn": "agentik.storage",
    "NotOwnedError": "agentik.storage",
    "Pending": "agentik.storage",
    "SchemaVersionError": "agentik.storage",
    "SecretStore": "agentik.storage",
    "StoreClosedError": "agentik.storage",
    "Summary": "agentik.storage",
    "TurnRecord": "agentik.storage",
    "WriterStats": "agentik.storage",
    "writer_stats": "agentik.storage",
    "DISABLE_TOOLSET": "agentik.toolsets",
    "ENABLE_TOOLSET": "agentik.toolsets",
    "ToolHandler": "agentik.toolsets",
    "ToolsetIndex": "agentik.toolsets",
    "parse_arguments": "agentik.toolsets",
    "toolset_control_tools": "agentik.toolsets",
    "Client": "agentik.server",
    "ConfigError": "agentik.server",
    "Limits": "agentik.server",
    "ModelSettings": "agentik.server",
    "ProtocolViolation": "agentik.server",
    "ServerConfig": "agentik.server",
    "load_config": "agentik.server",
    "serve_agentik": "agentik.server",
    "HttpServer": "agentik.mcp",
    "McpConfigError": "agentik.mcp",
    "McpHealth": "agentik.mcp",
    "McpServerConfig": "agentik.mcp",
    "McpState": "agentik.mcp",
    "McpToolset": "agentik.mcp",
    "StdioServer": "agentik.mcp",
    "open_mcp_toolsets": "agentik.mcp",
    "parse_mcp_servers": "agentik.mcp",
}

# ``agentik.__all__`` of 0.1.0, to show nothing was dropped on the way.
OLD_ALL_SIZE = 106
ADDED = frozenset(
    {"agent_tool", "FilePart", "ImagePart", "TextPart", "A2AAgentConfig", "open_a2a_toolsets"}
)
"""Names added to the core since 0.1.0 (an issue said "exported from agentik")."""


def test_every_old_name_is_in_the_core_or_moved() -> None:
    assert set(agentik.__all__) >= ADDED
    assert len(agentik.__all__) - len(ADDED) + len(MOVED) == OLD_ALL_SIZE
    assert not set(agentik.__all__) & set(MOVED)


def expected_warning(name: str, home: str) -> str:
    return rf"^agentik\.{name} is deprecated; import it from {re.escape(home)}$"


@pytest.mark.parametrize(("name", "home"), sorted(MOVED.items()))
def test_a_moved_name_still_resolves_and_warns(name: str, home: str) -> None:
    """``agentik.X`` returns the very object of its new home and says where that is."""
    module = importlib.import_module(home)
    assert name in module.__all__, f"{home} does not export {name}"
    with pytest.warns(DeprecationWarning, match=expected_warning(name, home)) as caught:
        value = getattr(agentik, name)
    assert value is getattr(module, name)
    assert len(caught) == 1
    assert caught[0].filename == __file__  # blamed on the caller, not on agentik
    assert name not in dir(agentik)


@pytest.mark.parametrize(("name", "home"), sorted(MOVED.items()))
def test_from_import_of_a_moved_name_warns_each_time(name: str, home: str) -> None:
    for _ in range(2):  # resolved afresh each time: never cached as a plain attribute
        with pytest.warns(DeprecationWarning, match=expected_warning(name, home)):
            exec(f"from agentik import {name}", {})


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'agentik' has no attribute 'Nope'$"):
        agentik.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_a_value_pickled_under_the_old_path_loads() -> None:
    """A pickle written by 0.1.0 names ``agentik.TextDelta``; it still loads."""
    from agentik.models import TextDelta

    delta = TextDelta("hi")
    new = pickle.dumps(delta, protocol=2)  # GLOBAL names the class as "module\nname"
    assert b"cagentik.models\nTextDelta\n" in new
    old = new.replace(b"cagentik.models\n", b"cagentik\n")
    with pytest.warns(DeprecationWarning, match=expected_warning("TextDelta", "agentik.models")):
        assert pickle.loads(old) == delta


def test_importing_agentik_still_loads_neither_the_server_nor_the_mcp_sdk() -> None:
    """The deprecated MCP and server names load their packages on use only."""
    code = (
        "import sys, warnings, agentik; "
        "heavy = [m for m in ('starlette', 'mcp', 'agentik.server', 'agentik.mcp') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


ROOT = Path(__file__).parents[2]


def _python_sources() -> list[tuple[str, str]]:
    """Every Python file and Python code sample of the repository (not vendored kits)."""
    sources = []
    for folder in ("agentik", "tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "kits" not in path.relative_to(ROOT).parts:
                sources.append((str(path.relative_to(ROOT)), path.read_text()))
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S)):
            sources.append((f"{path.relative_to(ROOT)} sample {i + 1}", block))
    return sources


def _old_imports(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []  # a fragment of a doc sample
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "agentik" and node.level == 0:
            found += [alias.name for alias in node.names if alias.name in MOVED]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "agentik"
            and node.attr in MOVED
        ):
            found.append(node.attr)
    return found


def test_our_own_code_docs_and_benchmarks_use_the_new_homes() -> None:
    skip = {str(Path(__file__).relative_to(ROOT))}  # this file asks for old names on purpose
    old = {
        where: names
        for where, source in _python_sources()
        if where not in skip and (names := _old_imports(source))
    }
    assert not old, f"these import moved names from agentik: {old}"


def test_importing_every_agentik_module_warns_nothing_deprecated() -> None:
    """No module of ours asks ``agentik`` for a moved name, at import time included."""
    code = (
        "import importlib, pkgutil, warnings, agentik\n"
        "warnings.simplefilter('error', DeprecationWarning)\n"
        "for info in pkgutil.walk_packages(agentik.__path__, 'agentik.'):\n"
        "    if not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
    )
    with warnings.catch_warnings():
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
