"""What a tool's schema costs in a request, in tokens. Pure.

A tool's cost is ``count`` over its rendered JSON (name, description,
parameters: what a provider is sent for it). A ``NamedTool`` is immutable, so
a tool's identity is its version: ``ToolCosts`` counts each tool once and
keeps the count while the tool lives (a weak key: an MCP source that replaces
its tools drops their counts with them), never once per request.

The catalog shows a toolset's cost rounded (``rounded_tokens``) so that a
small change to one schema does not change the catalog's text, and with it
the prompt cache's prefix.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable

from agentik._tokens import estimate_tokens
from agentik.toolsets._named_tool import NamedTool


def rendered_schema(tool: NamedTool) -> str:
    """The tool as the request carries it: compact JSON of its name,
    description and parameters schema, keys in a fixed order."""
    return json.dumps(
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        ensure_ascii=False,
        separators=(",", ":"),
        sort_keys=True,
    )


class ToolCosts:
    """Tokens of each tool's schema under one ``count``, counted once per tool.

    Shared by every conversation of an agent; ``count`` is the context
    policy's (``estimate_tokens`` without one).
    """

    __slots__ = ("_costs", "_count")

    def __init__(self, count: Callable[[str], int] = estimate_tokens) -> None:
        self._count = count
        self._costs: weakref.WeakKeyDictionary[NamedTool, int] = weakref.WeakKeyDictionary()

    @property
    def count(self) -> Callable[[str], int]:
        """The token counter the costs are measured with."""
        return self._count

    def of(self, tool: NamedTool) -> int:
        """Tokens of ``tool``'s rendered schema (counted on first use)."""
        cost = self._costs.get(tool)
        if cost is None:
            cost = self._count(rendered_schema(tool))
            if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
                raise ValueError(f"count_tokens must return a non-negative integer, got {cost!r}")
            self._costs[tool] = cost
        return cost

    def total(self, tools: Iterable[NamedTool]) -> int:
        """Tokens of all of ``tools``' schemas."""
        of = self.of
        return sum(of(tool) for tool in tools)

    def __repr__(self) -> str:
        return f"ToolCosts(count={self._count!r}, known={len(self._costs)})"


def rounded_tokens(tokens: int) -> int:
    """``tokens`` to two significant digits (``3187`` -> ``3200``, ``47`` stays):
    close enough for the model to weigh a toolset, and stable under small
    edits of a schema."""
    if tokens < 100:
        return tokens
    step: int = pow(10, len(str(tokens)) - 2)
    return (tokens + step // 2) // step * step
