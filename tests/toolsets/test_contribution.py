"""A contribution is validated once, at construction, with messages naming the value."""

from __future__ import annotations

import pytest

from agentik.toolsets import ToolsetContribution
from tests.toolsets.helpers import make_tool


class TestValid:
    def test_fields_and_tools_become_a_tuple(self) -> None:
        """Name, description and tools are kept; the tool list becomes a tuple."""
        tools = [make_tool("files"), make_tool("files_read"), make_tool("files_write-all")]
        contribution = ToolsetContribution("files", "read and write files", tools)
        assert contribution.name == "files"
        assert contribution.description == "read and write files"
        assert contribution.tools == tuple(tools)

    def test_hyphens_and_64_characters_are_allowed(self) -> None:
        """Toolset names may use '-' and up to 64 characters."""
        name = "a-" * 31 + "zz"
        assert len(name) == 64
        assert ToolsetContribution(name, "d", [make_tool(name)]).name == name


class TestInvalidNames:
    @pytest.mark.parametrize("name", ["", "my_tools", "a b", "ü", "x" * 65, "a.b"])
    def test_bad_toolset_name(self, name: str) -> None:
        """A toolset name outside [A-Za-z0-9-]{1,64} is refused, naming it."""
        with pytest.raises(ValueError, match=r"^toolset name .* is invalid; expected 1-64"):
            ToolsetContribution(name, "d", [make_tool("x")])

    @pytest.mark.parametrize("tool_name", ["pingx", "pin", "pong_ping", "ping_", "Ping"])
    def test_tool_outside_the_prefix(self, tool_name: str) -> None:
        """Every tool is named like the toolset or toolset_<verb>."""
        with pytest.raises(
            ValueError,
            match=rf"^tool '{tool_name}' does not belong in toolset 'ping'; "
            r"expected 'ping' or 'ping_<verb>'$",
        ):
            ToolsetContribution("ping", "d", [make_tool(tool_name)])

    @pytest.mark.parametrize("tool_name", ["ping_a.b", "ping_é", "ping_" + "x" * 60, "ping_a b"])
    def test_tool_name_outside_the_openai_pattern(self, tool_name: str) -> None:
        """Tool names must match ^[A-Za-z0-9_-]{1,64}$."""
        with pytest.raises(ValueError, match=r"^tool name .* in toolset 'ping' is invalid"):
            ToolsetContribution("ping", "d", [make_tool(tool_name)])

    def test_duplicate_tool(self) -> None:
        """Two tools of one name are refused."""
        with pytest.raises(ValueError, match=r"^toolset 'ping' has two tools named 'ping_a'$"):
            ToolsetContribution("ping", "d", [make_tool("ping_a"), make_tool("ping_a")])

    def test_not_a_tool(self) -> None:
        """Anything but a NamedTool is refused."""
        with pytest.raises(ValueError, match=r"^toolset 'ping' got 'ping'; expected a NamedTool$"):
            ToolsetContribution("ping", "d", ["ping"])  # type: ignore[list-item]


class TestInvalidShape:
    def test_no_tools(self) -> None:
        """An empty toolset would be an empty promise in the catalog."""
        with pytest.raises(ValueError, match=r"^toolset 'ping' has no tools; expected at least"):
            ToolsetContribution("ping", "d", [])

    @pytest.mark.parametrize("description", ["", "   "])
    def test_empty_description(self, description: str) -> None:
        """The catalog row needs a description."""
        with pytest.raises(ValueError, match=r"^toolset 'ping' needs a non-empty description"):
            ToolsetContribution("ping", description, [make_tool("ping")])

    @pytest.mark.parametrize("description", ["two\nlines", "cr\rhere"])
    def test_multi_line_description(self, description: str) -> None:
        """A description is one catalog row, so one line."""
        with pytest.raises(ValueError, match=r"^toolset 'ping' description must be one line"):
            ToolsetContribution("ping", description, [make_tool("ping")])
