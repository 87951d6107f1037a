"""The toolset section is the plan's text, exactly, in contribution order."""

from __future__ import annotations

from agentik.toolsets import ToolsetIndex
from agentik.toolsets._prompt import render_toolset_section
from tests.toolsets.helpers import make_toolset

INTRO = (
    "## Toolsets\n"
    'Named groups of tools. One set per conversation. Use enable_toolset({"name": X})\n'
    'to add a toolset; disable_toolset({"name": X}) to remove. Both are idempotent.\n'
)

FILES = make_toolset("files", "read", description="read and write local files")
WEB = make_toolset("web", "fetch", description="fetch pages from the web")
GIT = make_toolset("git", "status", description="inspect a git repository")


def test_no_contributions_no_section() -> None:
    """Full invisibility when there are no toolsets, whatever is marked active."""
    assert render_toolset_section((), frozenset()) is None
    assert render_toolset_section([], frozenset({"files"})) is None


def test_both_groups_render_rows_identically() -> None:
    """ACTIVE and INACTIVE rows share the 'name — description' format."""
    text = render_toolset_section((FILES, WEB, GIT), frozenset({"web"}))
    assert text == INTRO + (
        "\n"
        "ACTIVE\n"
        "web — fetch pages from the web\n"
        "\n"
        'INACTIVE call enable_toolset({"name": X}) to add\n'
        "files — read and write local files\n"
        "git — inspect a git repository"
    )


def test_nothing_active_shows_none() -> None:
    """An empty ACTIVE group says (none)."""
    text = render_toolset_section((FILES,), frozenset())
    assert text == INTRO + (
        '\nACTIVE\n(none)\n\nINACTIVE call enable_toolset({"name": X}) to add\n'
        "files — read and write local files"
    )


def test_everything_active_shows_none_inactive() -> None:
    """An empty INACTIVE group says (none); order follows the contributions."""
    text = render_toolset_section(ToolsetIndex([GIT, FILES]), {"files", "git"})
    assert text == INTRO + (
        "\nACTIVE\ngit — inspect a git repository\nfiles — read and write local files\n"
        '\nINACTIVE call enable_toolset({"name": X}) to add\n(none)'
    )


def test_unknown_active_names_are_not_listed() -> None:
    """The catalog lists what exists, nothing else."""
    text = render_toolset_section((FILES,), frozenset({"ghost"}))
    assert text is not None
    assert "ghost" not in text
    assert "ACTIVE\n(none)" in text


def test_index_renders_the_same_text_and_remembers_it() -> None:
    """ToolsetIndex.render_section equals the function, built once per active set."""
    index = ToolsetIndex([FILES, WEB, GIT])
    for active in (frozenset(), frozenset({"git"}), frozenset({"web", "files"})):
        first = index.render_section(active)
        assert first == render_toolset_section((FILES, WEB, GIT), active, index.toolset_costs)
        assert index.render_section(frozenset(active)) is first
    assert ToolsetIndex([]).render_section(frozenset()) is None


def test_index_section_cache_is_bounded() -> None:
    """Many distinct active sets do not grow the cache without limit."""
    index = ToolsetIndex([FILES])
    for n in range(100):
        assert index.render_section(frozenset({f"x{n}"})) == render_toolset_section(
            (FILES,), frozenset(), index.toolset_costs
        )
    assert len(index._sections) <= 32
