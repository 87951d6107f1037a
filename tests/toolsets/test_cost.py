"""What tools cost: counted once per tool, shown rounded in the catalog."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik._json import JsonObject
from agentik._tokens import estimate_tokens
from agentik.toolsets import NamedTool, ToolCosts, ToolsetContribution, ToolsetIndex
from agentik.toolsets._cost import rendered_schema, rounded_tokens
from tests.toolsets.helpers import make_tool, make_toolset


async def _answer(arguments: JsonObject) -> str:
    return "ok"


def _sized(name: str, size: int) -> NamedTool:
    """A tool whose rendered schema is about ``size`` characters longer than a bare one's."""
    return NamedTool(name, "x" * size, {"type": "object", "properties": {}}, _answer)


def test_a_tool_is_counted_once_whatever_asks() -> None:
    """The counter runs once per tool version, not once per request or index."""
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text)

    costs = ToolCosts(count)
    web = make_toolset("web", "fetch", "search")
    for _ in range(3):
        index = ToolsetIndex([web], costs)
        assert index.cost_of("web") == sum(len(rendered_schema(t)) for t in web.tools)
        index.render_section(frozenset())
    assert len(calls) == 2
    # A new version of a tool (a new object) is counted anew.
    ToolsetIndex([make_toolset("web", "fetch")], costs).toolset_costs  # noqa: B018
    assert len(calls) == 3


def test_costs_are_forgotten_with_their_tools() -> None:
    """An MCP source replacing its tools does not leave their costs behind."""
    costs = ToolCosts()
    costs.of(make_tool("gone"))
    gc.collect()
    assert "known=0" in repr(costs)


def test_a_counter_that_answers_nonsense_is_refused() -> None:
    costs = ToolCosts(lambda text: -1)
    with pytest.raises(ValueError) as caught:
        costs.of(make_tool("x"))
    assert str(caught.value) == "count_tokens must return a non-negative integer, got -1"


def test_catalog_row_shows_the_rounded_cost_exactly() -> None:
    """``name — description (~N tokens)``, N with a thousands separator."""
    github = ToolsetContribution(
        "github",
        "Issues, pull requests and code search",
        [_sized("github_issues", 0), _sized("github_search", 0)],
    )
    costs = ToolCosts(lambda text: 1_593 if "github" in text else 0)
    text = ToolsetIndex([github], costs).render_section(frozenset())
    assert text is not None
    assert text.endswith(
        'INACTIVE call enable_toolset({"name": X}) to add\n'
        "github — Issues, pull requests and code search (~3,200 tokens)"
    )
    active = ToolsetIndex([github], costs).render_section(frozenset({"github"}))
    assert active is not None
    assert "ACTIVE\ngithub — Issues, pull requests and code search (~3,200 tokens)\n" in active


def test_the_default_counter_is_the_offline_estimate() -> None:
    web = make_toolset("web", "fetch")
    assert ToolsetIndex([web]).cost_of("web") == estimate_tokens(rendered_schema(web.tools[0]))


def test_the_cost_of_some_tools_is_theirs_alone() -> None:
    costs = ToolCosts(len)
    web = make_toolset("web", "fetch", "search", "crawl")
    index = ToolsetIndex([web], costs)
    assert index.cost_of("web", frozenset({"web_fetch", "web_crawl"})) == costs.of(
        web.tools[0]
    ) + costs.of(web.tools[2])
    assert index.cost_of("web", frozenset()) == 0
    assert index.total_cost == index.cost_of("web") == costs.total(web.tools)


@given(st.integers(min_value=0, max_value=10**9))
def test_rounding_keeps_two_significant_digits(tokens: int) -> None:
    """Within 5 % of the truth, and at most two nonzero leading digits."""
    shown = rounded_tokens(tokens)
    assert abs(shown - tokens) <= max(tokens * 0.05, 0)
    if tokens < 100:
        assert shown == tokens
    else:
        assert len(str(shown).rstrip("0")) <= 2
        # Monotone: a bigger toolset never shows a smaller cost.
        assert rounded_tokens(tokens + 1) >= shown
