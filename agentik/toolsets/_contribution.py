"""``ToolsetContribution``: a named group of tools, validated once at construction.

Invariants a contribution guarantees, so nothing downstream re-checks them:

- the toolset name matches ``[A-Za-z0-9-]{1,64}`` (no underscore), so a tool
  name's toolset is the part before its first ``_``;
- every tool is named ``<toolset>`` or ``<toolset>_<verb>`` and matches
  ``^[A-Za-z0-9_-]{1,64}$``, the tool-name pattern OpenAI-compatible APIs accept;
- tool names are unique, there is at least one tool, and the description is
  one non-empty line (it is a row of the model's catalog).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import attrs

from agentik.toolsets._named_tool import NamedTool

TOOLSET_NAME_PATTERN = re.compile(r"[A-Za-z0-9-]{1,64}")
"""A toolset name: letters, digits and ``-``; never ``_``, which separates the verb."""

TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A tool name as OpenAI-compatible APIs accept it."""


def _tools(value: Iterable[NamedTool]) -> tuple[NamedTool, ...]:
    return tuple(value)


@attrs.frozen(eq=False)
class ToolsetContribution:
    """A named group of tools the model switches on and off per conversation.

    Compared by identity, like ``NamedTool``. Raises ``ValueError`` naming the
    offending value when a name, prefix or description breaks the rules above.
    """

    name: str
    """The toolset's name, shown in the catalog and passed to ``enable_toolset``."""
    description: str
    """One line telling the model when the toolset is useful."""
    tools: tuple[NamedTool, ...] = attrs.field(converter=_tools)
    """The tools, each named ``<name>`` or ``<name>_<verb>``."""
    requires_approval: bool = attrs.field(default=False, kw_only=True)
    """A person must approve each call of any of its tools before it runs."""

    def __attrs_post_init__(self) -> None:
        _check_toolset(self.name, self.description)
        if not self.tools:
            raise ValueError(f"toolset {self.name!r} has no tools; expected at least one")
        seen: set[str] = set()
        for tool in self.tools:
            _check_tool_name(self.name, tool)
            if tool.name in seen:
                raise ValueError(f"toolset {self.name!r} has two tools named {tool.name!r}")
            seen.add(tool.name)


def _check_toolset(name: object, description: object) -> None:
    if not isinstance(name, str) or TOOLSET_NAME_PATTERN.fullmatch(name) is None:
        raise ValueError(
            f"toolset name {name!r} is invalid; expected 1-64 letters, digits or '-' (no '_')"
        )
    if not isinstance(description, str) or not description.strip():
        raise ValueError(f"toolset {name!r} needs a non-empty description, got {description!r}")
    if "\n" in description or "\r" in description:
        raise ValueError(
            f"toolset {name!r} description must be one line (it is a catalog row), "
            f"got {description!r}"
        )


def _check_tool_name(toolset: str, tool: object) -> None:
    if not isinstance(tool, NamedTool):
        raise ValueError(f"toolset {toolset!r} got {tool!r}; expected a NamedTool")
    name = tool.name
    if not isinstance(name, str) or TOOL_NAME_PATTERN.fullmatch(name) is None:
        raise ValueError(
            f"tool name {name!r} in toolset {toolset!r} is invalid; "
            "expected 1-64 letters, digits, '_' or '-'"
        )
    if name != toolset and not (name.startswith(toolset + "_") and len(name) > len(toolset) + 1):
        raise ValueError(
            f"tool {name!r} does not belong in toolset {toolset!r}; "
            f"expected {toolset!r} or {toolset + '_<verb>'!r}"
        )
