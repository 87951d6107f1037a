"""The tools budget on random catalogs and activation sequences (issue 35):
the budget always holds, eviction is least recently used first (down to half
the budget), the offered order is stable (the tools array only grows at its
end unless something is switched off), and an enabled toolset's tools are
exactly those asked for."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik._errors import ToolError
from agentik._json import JsonObject
from agentik.toolsets import (
    NamedTool,
    ToolCosts,
    ToolsetActivation,
    ToolsetContribution,
    ToolsetIndex,
    activate_for_call,
    disable_answer,
    enable_answer,
)
from agentik.toolsets._budget import OverBudget, switch_on

_COST = re.compile(r"cost=(\d+)")


def _count(text: str) -> int:
    """A tool's cost is written in its description, so tests choose it."""
    return sum(int(n) for n in _COST.findall(text))


async def _ok(arguments: JsonObject) -> str:
    return "ok"


@st.composite
def catalogs(draw: st.DrawFn) -> ToolsetIndex:
    sizes = draw(st.lists(st.lists(st.integers(1, 60), min_size=1, max_size=5), max_size=6))
    toolsets = [
        ToolsetContribution(
            f"t{i}",
            f"toolset {i}",
            [
                NamedTool(f"t{i}_v{j}", f"cost={c}", {"type": "object"}, _ok)
                for j, c in enumerate(costs)
            ],
        )
        for i, costs in enumerate(sizes, start=1)
    ]
    return ToolsetIndex(toolsets, ToolCosts(_count))


def _ops(index: ToolsetIndex) -> st.SearchStrategy[list[tuple[str, str, frozenset[str] | None]]]:
    names = [c.name for c in index] or ["t1"]
    tool_names = [t.name for c in index for t in c.tools] or ["t1_v0"]
    whole = st.tuples(st.just("enable"), st.sampled_from(names), st.none())
    part = st.sampled_from(names).flatmap(
        lambda n: st.tuples(
            st.just("enable"),
            st.just(n),
            st.frozensets(st.sampled_from([t for t in tool_names if t.startswith(n + "_")])),
        )
    )
    off = st.tuples(st.just("disable"), st.sampled_from(names), st.none())
    use = st.tuples(st.just("call"), st.sampled_from(tool_names), st.none())
    wait = st.tuples(st.just("wait"), st.sampled_from(["1", "300", "700"]), st.none())
    return st.lists(st.one_of(whole, part, off, use, wait), max_size=30)


def _selection_cost(index: ToolsetIndex, activation: ToolsetActivation) -> int:
    return sum(index.cost_of(n, t) for n, t in activation.selection())


def _array(index: ToolsetIndex, activation: ToolsetActivation) -> list[str]:
    """The toolsets' part of the tools array a request would carry now."""
    return [t.name for t in index.tools_of(activation.offer_order())]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), budget=st.integers(1, 200))
def test_budget_lru_order_and_exact_tools(data: st.DataObject, budget: int) -> None:
    index = data.draw(catalogs())
    if not len(index):
        return
    now = [0.0]
    activation = ToolsetActivation(600.0, clock=lambda: now[0])
    first_on: dict[str, float] = {}  # when each active toolset was switched on
    for op, name, tools in data.draw(_ops(index)):
        now[0] += 1.0  # every step is later: recency is strict
        before = activation.selection()
        array_before = _array(index, activation)
        for n in list(first_on):  # switched off or expired since
            if n not in activation.active_names():
                del first_on[n]
        recency = {n: -i for i, n in enumerate(reversed(activation.least_recently_used()))}
        if op == "wait":
            now[0] += float(name)
            continue
        if op == "disable":
            activation.disable(name)
            assert name not in activation.active_names()
            continue
        if op == "call":
            toolset = name.split("_")[0]
            activate_for_call(index, activation, toolset, name, budget)
            chosen = activation.tools_of(toolset)
            fits_alone = index.cost_of(toolset, frozenset({name})) <= budget
            if fits_alone:  # the called tool is offered from now on
                assert activation.is_active(toolset)
                assert chosen is None or name in chosen
        else:
            needed = index.cost_of(name, tools)
            if needed > budget:
                with pytest.raises(OverBudget) as caught:
                    switch_on(index, activation, name, tools, budget)
                assert caught.value.needed == needed
                assert activation.selection() == before  # a refusal changes nothing
                continue
            evicted = switch_on(index, activation, name, tools, budget)
            # Exactly the tools asked for (all of them without ``tools``).
            assert activation.tools_of(name) == tools
            offered = _array(index, activation)
            expected = [t.name for t in index.get(name).tools if tools is None or t.name in tools]
            # (tools it gained later come after, so compare them as a set)
            assert sorted(t for t in offered if t.split("_")[0] == name) == sorted(expected)
            # Least recently used first: every evicted toolset was used
            # before every other one that stayed.
            kept = [n for n, _ in activation.selection() if n != name]
            for gone in evicted:
                assert gone not in activation.active_names()
                assert all(recency[gone] < recency[k] for k in kept)
            assert list(evicted) == sorted(evicted, key=recency.__getitem__)
            # Down to half the budget in one go, and not one more than that.
            if evicted:
                low = budget // 2  # LOW_WATER, written out so the test can fail
                assert _selection_cost(index, activation) <= low or not kept
                cost_before_last = _selection_cost(index, activation) + index.cost_of(
                    evicted[-1], dict(before)[evicted[-1]]
                )
                assert cost_before_last > low
        # The budget always holds.
        assert _selection_cost(index, activation) <= budget
        # Stable order: the toolsets that stayed keep their relative order,
        # and one switched on now comes last.
        after = [n for n, _ in activation.selection()]
        for n in list(first_on):
            if n not in after:
                del first_on[n]
        for n in after:
            first_on.setdefault(n, now[0])
        assert after == sorted(after, key=first_on.__getitem__)
        offered_sets = [t.name.split("_")[0] for t in index.tools_of(activation.selection())]
        assert list(dict.fromkeys(offered_sets)) == [
            n for n, t in activation.selection() if t is None or t
        ]
        kept_before = [n for n, _ in before if n in after]
        assert after[: len(kept_before)] == kept_before
        # The array offers exactly the selection's tools; those that stay
        # keep their order, and with nothing switched off (no eviction,
        # disable, expiry or narrowed selection) it only grows at its end.
        array = _array(index, activation)
        assert sorted(array) == sorted(t.name for t in index.tools_of(activation.selection()))
        assert len(set(array)) == len(array)
        stayed = [t for t in array_before if t in array]
        assert [t for t in array if t in array_before] == stayed
        if len(stayed) == len(array_before):
            assert array[: len(array_before)] == array_before


TWO = ToolsetIndex(
    [
        ToolsetContribution("x", "x", [NamedTool("x", "cost=40", {"type": "object"}, _ok)]),
        ToolsetContribution("y", "y", [NamedTool("y", "cost=40", {"type": "object"}, _ok)]),
        ToolsetContribution("z", "z", [NamedTool("z", "cost=40", {"type": "object"}, _ok)]),
        ToolsetContribution(
            "big",
            "big",
            [
                NamedTool("big_a", "cost=50", {"type": "object"}, _ok),
                NamedTool("big_b", "cost=50", {"type": "object"}, _ok),
            ],
        ),
    ],
    ToolCosts(_count),
)


def test_the_enable_texts_name_what_was_switched_off() -> None:
    """The seed's exact text when nothing is evicted; the names otherwise,
    switched off until the active toolsets take at most half the budget."""
    now = [0.0]
    activation = ToolsetActivation(clock=lambda: now[0])

    def enable(name: str, budget: int) -> str:
        now[0] += 1
        return enable_answer(TWO, activation, {"name": name}, budget)

    assert enable("big", 160) == "Toolset 'big' activated."
    assert enable("x", 160) == "Toolset 'x' activated."
    # 180 > 160: 'big' goes, which leaves 80, half the budget: 'x' stays.
    assert enable("y", 160) == "Toolset 'y' activated; 'big' was switched off to make room."
    assert enable("z", 160) == "Toolset 'z' activated."
    assert enable("x", 160) == "Toolset 'x' is already active."  # a use: y is now the LRU
    # 220 > 200: down to 100 (half) takes all three, least recently used first.
    assert enable("big", 200) == (
        "Toolset 'big' activated; 'y', 'z' and 'x' were switched off to make room."
    )
    assert enable("x", 160) == "Toolset 'x' activated."
    # 180 > 150: 'big' goes (140 left), then 'x' (40 left, at most 75).
    assert enable("z", 150) == (
        "Toolset 'z' activated; 'big' and 'x' were switched off to make room."
    )
    assert activation.active_names() == {"z"}
    assert enable("x", None) == "Toolset 'x' activated."  # type: ignore[arg-type]


def test_a_toolset_alone_over_the_budget_is_an_error_naming_both() -> None:
    activation = ToolsetActivation(clock=lambda: 0.0)
    enable_answer(TWO, activation, {"name": "x"}, 99)
    with pytest.raises(ToolError) as caught:
        enable_answer(TWO, activation, {"name": "big"}, 99)
    assert str(caught.value).startswith(
        "toolset 'big' needs 100 tokens of tool schemas, more than the tools budget of 99 tokens"
    )
    assert activation.active_names() == {"x"}


def test_without_a_budget_nothing_is_evicted() -> None:
    activation = ToolsetActivation(clock=lambda: 0.0)
    for name in ("x", "y", "z", "big"):
        assert enable_answer(TWO, activation, {"name": name}) == f"Toolset '{name}' activated."
    assert [n for n, _ in activation.selection()] == ["x", "y", "z", "big"]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), roomy=st.booleans())
def test_the_seed_texts_are_unchanged_when_nothing_is_evicted(
    data: st.DataObject, roomy: bool
) -> None:
    """No budget, or one everything fits: every answer is the seed's, byte for byte."""
    index = data.draw(catalogs())
    if not len(index):
        return
    budget = index.total_cost if roomy else None
    activation = ToolsetActivation(clock=lambda: 0.0)
    for op, name, _ in data.draw(_ops(index)):
        if op == "enable":
            was = activation.is_active(name)
            answer = enable_answer(index, activation, {"name": name}, budget)
            seed = "is already active." if was else "activated."
            assert answer == f"Toolset '{name}' {seed}"
        elif op == "disable":
            assert disable_answer(index, activation, {"name": name}) == (
                f"Toolset '{name}' deactivated."
            )
