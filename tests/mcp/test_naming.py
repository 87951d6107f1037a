"""Names: MCP names made to fit the toolset and tool-name rules, collisions resolved."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from agentik.mcp._naming import one_line, tool_names, toolset_name

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class TestToolsetName:
    def test_invalid_characters_become_single_dashes(self) -> None:
        """Spaces, dots and underscores are not allowed in a toolset name."""
        assert toolset_name("My Server.v2") == "My-Server-v2"
        assert toolset_name("__mcp_time__") == "mcp-time"

    def test_long_names_are_cut_and_empty_ones_fall_back(self) -> None:
        """At most 32 characters, never ending in a dash; nothing usable gives the fallback."""
        assert toolset_name("a" * 31 + "-b-c") == "a" * 31
        assert toolset_name("___", fallback="srv") == "srv"


class TestToolNames:
    def test_names_are_prefixed_and_sanitised(self) -> None:
        """``fs`` + ``read.file`` gives ``fs_read_file``; the MCP name is kept for the call."""
        names = tool_names("fs", ["read.file", "list dir", "ok-name"])
        assert names.by_tool_name == {
            "fs_list_dir": "list dir",
            "fs_ok-name": "ok-name",
            "fs_read_file": "read.file",
        }
        assert names.reports == ()

    def test_collisions_get_numbered_deterministically_and_are_reported(self) -> None:
        """The MCP-name order decides who keeps the plain name, whatever the listing order."""
        first = tool_names("fs", ["read file", "read.file", "read_file"])
        again = tool_names("fs", ["read_file", "read file", "read.file"])
        assert first == again
        assert first.by_tool_name == {
            "fs_read_file": "read file",
            "fs_read_file-2": "read.file",
            "fs_read_file-3": "read_file",
        }
        assert first.reports == (
            "mcp tool 'read.file' is named 'fs_read_file-2': 'fs_read_file' already names "
            "mcp tool 'read file'",
            "mcp tool 'read_file' is named 'fs_read_file-3': 'fs_read_file' already names "
            "mcp tool 'read file'",
        )

    def test_duplicates_in_a_listing_are_kept_once_and_reported(self) -> None:
        """A server listing one name twice gets one tool."""
        names = tool_names("x", ["a", "a"])
        assert names.by_tool_name == {"x_a": "a"}
        assert names.reports == ("mcp tool 'a' is listed twice; kept the first",)

    def test_long_names_are_cut_to_64_characters_even_when_numbered(self) -> None:
        """Truncation can create collisions; numbering keeps within the limit."""
        names = tool_names("srv", ["v" * 70 + "1", "v" * 70 + "2"])
        assert list(names.by_tool_name) == ["srv_" + "v" * 60, "srv_" + "v" * 58 + "-2"]

    @given(st.lists(st.text(max_size=80)), st.from_regex(r"[A-Za-z0-9-]{1,32}", fullmatch=True))
    def test_every_name_is_valid_unique_and_in_its_toolset(
        self, raw: list[str], toolset: str
    ) -> None:
        """Whatever the server sends, every tool name fits the pattern and the prefix rule."""
        names = tool_names(toolset, raw)
        assert set(names.by_tool_name.values()) == set(raw)
        for name in names.by_tool_name:
            assert TOOL_NAME.fullmatch(name), name
            assert name.startswith(toolset + "_")


def test_one_line_collapses_whitespace_and_cuts() -> None:
    """A description becomes one catalog row."""
    assert one_line("  Tools\n for  files.\r\n") == "Tools for files."
    assert one_line("x" * 300, limit=10) == "x" * 9 + "…"
    assert one_line(None) == ""
