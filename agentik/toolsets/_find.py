"""``find_tools``: search every toolset's tools by words, without enabling any.

Offered when the catalog's schemas together exceed the tools budget (or when
the context policy asks for it): the model finds the few tools a task needs
among thousands, then enables just those (``enable_toolset`` with ``tools``)
or calls one by name. The answer lists each match with its toolset and
cost, best first (``ToolsetIndex.find_tools``: BM25, offline).
"""

from __future__ import annotations

from agentik._errors import ToolError
from agentik._json import JsonObject, JsonValue
from agentik.toolsets._cost import rounded_tokens
from agentik.toolsets._dispatch import ToolsetIndex
from agentik.toolsets._failure import quoted
from agentik.toolsets._validate import describe

FIND_TOOLS = "find_tools"
FIND_TOOLS_DESCRIPTION = (
    "Search the tools of all toolsets by what they do; returns the best matches"
    " with their toolsets. Enable the ones you need with enable_toolset."
)
DEFAULT_MATCHES = 5
MAX_MATCHES = 20
_DESCRIPTION_SHOWN = 160
_QUERY_SHOWN = 80
"""The answer quotes the query to this many characters: a model that sends a
page of text as its query does not get the page back in its context."""


def find_tools_parameters() -> JsonObject:
    """The schema of ``find_tools`` (a fresh copy each call)."""
    return {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words describing the task, e.g. 'create a github issue'.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_MATCHES,
                "description": f"How many tools to return, {DEFAULT_MATCHES} by default.",
            },
        },
        "additionalProperties": False,
    }


FIND_TOOLS_PARAMETERS: JsonObject = find_tools_parameters()
"""The schema of ``find_tools``; treat as read-only."""


def _short(description: str) -> str:
    line = description.strip().split("\n", 1)[0].strip()
    if len(line) > _DESCRIPTION_SHOWN:
        line = line[: _DESCRIPTION_SHOWN - 1].rstrip() + "…"
    return line


def find_answer(index: ToolsetIndex, arguments: JsonObject) -> str:
    """The tools matching ``arguments["query"]``, one row each, best first."""
    query: JsonValue = arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        problem = (
            "is missing" if query is None else f"must be a non-empty string, got {describe(query)}"
        )
        raise ToolError(
            f'query {problem}; call {FIND_TOOLS}({{"query": "words describing the task"}})'
        )
    limit: JsonValue = arguments.get("limit", DEFAULT_MATCHES)
    if isinstance(limit, float) and limit.is_integer():
        limit = int(limit)  # JSON Schema's integer: the arguments check let 5.0 through
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_MATCHES:
        raise ToolError(f"limit must be an integer from 1 to {MAX_MATCHES}, got {describe(limit)}")
    matches = index.find_tools(query, limit)
    said = quoted(query.strip(), _QUERY_SHOWN)
    if not matches:
        return (
            f"No tool matches {said}; try other words. The toolsets are:"
            f" {', '.join(index.names) or '(none)'}."
        )
    rows = [
        f"{tool.name} (toolset {toolset}, ~{rounded_tokens(index.costs.of(tool)):,} tokens)"
        f" — {_short(tool.description)}"
        for toolset, tool in matches
    ]
    return "\n".join(
        (
            f"Tools matching {said}, best first. Enable the ones you need:"
            ' enable_toolset({"name": X, "tools": [...]}).',
            *rows,
        )
    )
