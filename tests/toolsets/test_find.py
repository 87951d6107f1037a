"""find_tools' answer and enable_toolset with ``tools``: exact texts, clear errors."""

from __future__ import annotations

import pytest

from agentik._errors import ToolError
from agentik._json import JsonObject
from agentik.toolsets import (
    NamedTool,
    ToolCosts,
    ToolsetActivation,
    ToolsetContribution,
    ToolsetIndex,
    enable_answer,
    find_answer,
)


async def _ok(arguments: JsonObject) -> str:
    return "ok"


def _tool(name: str, description: str) -> NamedTool:
    return NamedTool(name, description, {"type": "object"}, _ok)


GITHUB = ToolsetContribution(
    "github",
    "Issues, pull requests and code search",
    [
        _tool("github_create_issue", "Create a new issue in a repository."),
        _tool("github_list_pulls", "List the pull requests of a repository."),
        _tool("github_search_code", "Search code across repositories."),
    ],
)
FILES = ToolsetContribution(
    "files",
    "Read and write local files",
    [
        _tool("files_read", "Read a file from disk."),
        _tool("files_write", "Write a file to disk.\nSecond line is not shown."),
    ],
)
INDEX = ToolsetIndex([GITHUB, FILES], ToolCosts(lambda text: 1_234))


def test_matches_best_first_with_toolset_and_cost() -> None:
    assert find_answer(INDEX, {"query": "open an issue", "limit": 1}) == (
        "Tools matching 'open an issue', best first. Enable the ones you need:"
        ' enable_toolset({"name": X, "tools": [...]}).\n'
        "github_create_issue (toolset github, ~1,200 tokens) — Create a new issue in a repository."
    )
    rows = find_answer(INDEX, {"query": "write files"}).split("\n")[1:]
    assert rows[0].startswith("files_write (toolset files, ~1,200 tokens) — Write a file to disk.")
    assert rows[0].endswith("disk.")
    assert {r.split(" ")[0] for r in rows} == {"files_write", "files_read"}


def test_no_match_says_so_and_lists_the_toolsets() -> None:
    assert find_answer(INDEX, {"query": "weather"}) == (
        "No tool matches 'weather'; try other words. The toolsets are: github, files."
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, 'query is missing; call find_tools({"query": "words describing the task"})'),
        (
            {"query": " "},
            'query must be a non-empty string, got a string " "; call find_tools('
            '{"query": "words describing the task"})',
        ),
        ({"query": "x", "limit": 0}, "limit must be an integer from 1 to 20, got a number 0"),
        (
            {"query": "x", "limit": True},
            "limit must be an integer from 1 to 20, got a boolean true",
        ),
    ],
)
def test_bad_queries_are_errors(arguments: JsonObject, message: str) -> None:
    with pytest.raises(ToolError) as caught:
        find_answer(INDEX, arguments)
    assert str(caught.value) == message


def test_enable_some_tools_of_a_toolset() -> None:
    activation = ToolsetActivation(clock=lambda: 0.0)
    asked: JsonObject = {"name": "github", "tools": ["github_search_code", "github_create_issue"]}
    assert enable_answer(INDEX, activation, asked) == (
        "Toolset 'github' activated (2 of its 3 tools)."
    )
    assert activation.tools_of("github") == {"github_search_code", "github_create_issue"}
    assert enable_answer(INDEX, activation, asked) == "Toolset 'github' is already active."
    # Fewer asked: nothing taken away.
    fewer: JsonObject = {"name": "github", "tools": ["github_search_code"]}
    assert enable_answer(INDEX, activation, fewer) == "Toolset 'github' is already active."
    assert activation.tools_of("github") == {"github_search_code", "github_create_issue"}
    # All its tools is the whole toolset; no tools is the whole toolset too.
    every: JsonObject = {"name": "github", "tools": [t.name for t in GITHUB.tools]}
    assert enable_answer(INDEX, activation, every) == "Toolset 'github' activated."
    assert activation.tools_of("github") is None
    assert enable_answer(INDEX, activation, {"name": "github"}) == (
        "Toolset 'github' is already active."
    )


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([], "tools must be a non-empty list of tool names of toolset 'github', got an array []"),
        (
            ["files_read"],
            "toolset 'github' has no tool 'files_read'; its tools are: github_create_issue,"
            " github_list_pulls, github_search_code",
        ),
    ],
)
def test_bad_tools_are_errors_that_change_nothing(tools: list[str], message: str) -> None:
    activation = ToolsetActivation(clock=lambda: 0.0)
    with pytest.raises(ToolError) as caught:
        enable_answer(INDEX, activation, {"name": "github", "tools": list(tools)})
    assert str(caught.value) == message
    assert activation.active_names() == frozenset()


def test_over_budget_whole_suggests_some_tools() -> None:
    activation = ToolsetActivation(clock=lambda: 0.0)
    with pytest.raises(ToolError) as caught:
        enable_answer(INDEX, activation, {"name": "github"}, 3_000)
    assert str(caught.value) == (
        "toolset 'github' needs 3,702 tokens of tool schemas, more than the tools budget of"
        ' 3,000 tokens; enable only the tools you need: enable_toolset({"name": "github",'
        ' "tools": [...]})'
    )
    assert enable_answer(
        INDEX, activation, {"name": "github", "tools": ["github_list_pulls"]}, 3_000
    ) == ("Toolset 'github' activated (1 of its 3 tools).")
