"""The tools budget on random catalogs and activation sequences (issue 35):
the budget always holds, eviction is least recently used first (down to a
quarter of the budget), the offered order is stable (the tools array only grows at its
end unless something is switched off), and an enabled toolset's tools are
exactly the union of those asked for since it was switched on."""

from __future__ import annotations

import re

import attrs
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


@attrs.define
class _On:
    """The reference model's record of one active toolset."""

    used: float
    tools: frozenset[str] | None
    """The union of the tools asked of it since it was switched on; None: whole."""


@attrs.define
class _Reference:
    """What the issue asks, written out plainly: the active toolsets, their
    tools (the union of those asked for), and the tools array, which only
    grows at its end unless something is switched off, then loses those
    tools in place. Independent of the implementation's pieces."""

    index: ToolsetIndex
    budget: int
    timeout: float
    on: dict[str, _On] = attrs.Factory(dict)
    array: list[str] = attrs.Factory(list)

    def cost(self, name: str, tools: frozenset[str] | None) -> int:
        return self.index.cost_of(name, tools)

    def switch_off(self, name: str) -> None:
        del self.on[name]
        self.array = [t for t in self.array if t.split("_")[0] != name]

    def expire(self, now: float) -> None:
        for name, rec in list(self.on.items()):
            if now - rec.used >= self.timeout:
                self.switch_off(name)

    def whole(self, name: str, tools: frozenset[str] | None) -> frozenset[str] | None:
        every = frozenset(t.name for t in self.index.get(name).tools)  # type: ignore[union-attr]
        return None if tools is None or tools == every else tools

    def enable(
        self, name: str, asked: frozenset[str] | None, now: float
    ) -> tuple[str, ...] | OverBudget:
        """The toolsets switched off to make room, or the refusal (nothing changes)."""
        rec = self.on.get(name)
        if rec is None or asked is None or rec.tools is None:
            union = None if rec is not None and rec.tools is None else asked
        else:
            union = rec.tools | asked
        union = self.whole(name, union)
        evicted: list[str] = []
        if self.cost(name, union) > self.budget:
            if rec is None or self.whole(name, asked) == union:
                return OverBudget(name, self.cost(name, union), self.budget)
            if self.cost(name, asked) > self.budget:  # not even without its earlier tools
                return OverBudget(name, self.cost(name, asked), self.budget)
            evicted.append(name)  # its tools enabled before go: with them it cannot fit
            union = self.whole(name, asked)
            self.array = [t for t in self.array if t.split("_")[0] != name or t in asked]
            self.on[name].tools = asked
        others = [(n, r) for n, r in self.on.items() if n != name]
        total = self.cost(name, union) + sum(self.cost(n, r.tools) for n, r in others)
        if total > self.budget:
            for n, r in sorted(others, key=lambda item: item[1].used):
                if total <= self.budget // 4:  # LOW_WATER, written out
                    break
                total -= self.cost(n, r.tools)
                evicted.append(n)
        for n in evicted:
            if n != name:
                self.switch_off(n)
        self.on[name] = _On(now, union)
        for tool in self.index.get(name).tools:  # type: ignore[union-attr]
            if (union is None or tool.name in union) and tool.name not in self.array:
                self.array.append(tool.name)
        return tuple(evicted)

    def call(self, tool: str, now: float) -> None:
        name = tool.split("_")[0]
        rec = self.on.get(name)
        if rec is not None and (rec.tools is None or tool in rec.tools):
            rec.used = now
            return
        for asked in (frozenset({tool}),) if rec is not None else (None, frozenset({tool})):
            if not isinstance(self.enable(name, asked, now), OverBudget):
                return
        if rec is not None:
            rec.used = now


@settings(max_examples=400, deadline=None)
@given(data=st.data(), budget=st.integers(1, 200))
def test_budget_lru_append_only_order_and_union_of_tools(data: st.DataObject, budget: int) -> None:
    """Random catalogs and activation sequences against the reference: the
    budget always holds, eviction is least recently used first, the array
    only grows at its end between switch-offs, and an enabled toolset's
    tools are exactly the union of those asked for."""
    index = data.draw(catalogs())
    if not len(index):
        return
    now = [0.0]
    activation = ToolsetActivation(600.0, clock=lambda: now[0])
    ref = _Reference(index, budget, 600.0)
    for op, name, tools in data.draw(_ops(index)):
        now[0] += 1.0  # every step is later: recency is strict
        if op == "wait":
            now[0] += float(name)
            continue
        ref.expire(now[0])
        array_before = _array(index, activation)
        assert array_before == ref.array  # expiry too removes in place
        recency = {n: r.used for n, r in ref.on.items()}
        if op == "disable":
            activation.disable(name)
            if name in ref.on:
                ref.switch_off(name)
        elif op == "call":
            activate_for_call(index, activation, name.split("_")[0], name, budget)
            ref.call(name, now[0])
        else:
            expected = ref.enable(name, tools, now[0])
            if isinstance(expected, OverBudget):
                selection = activation.selection()
                with pytest.raises(OverBudget) as caught:
                    switch_on(index, activation, name, tools, budget)
                assert caught.value.needed == expected.needed
                assert activation.selection() == selection  # a refusal changes nothing
                continue
            evicted = switch_on(index, activation, name, tools, budget)
            assert evicted == expected
            # Least recently used first: each toolset switched off to make
            # room was used before every other one that stayed.
            kept = [n for n in ref.on if n != name]
            for gone in evicted:
                if gone != name:
                    assert all(recency[gone] < recency[k] for k in kept)
        # Exactly the reference's toolsets, tools and array.
        assert dict(activation.selection()) == {n: r.tools for n, r in ref.on.items()}
        array = _array(index, activation)
        assert array == ref.array
        # The budget always holds.
        assert _selection_cost(index, activation) <= budget
        # Append-only: the array starts with the one before unless tools
        # were switched off: what stays keeps its order, new tools come
        # after it, and what leaves is a switch-off (disable, expiry, making
        # room, or its own earlier tools making room for those asked).
        assert len(set(array)) == len(array)
        removed = {t for t in array_before if t not in array}
        stayed = [t for t in array_before if t in array]
        assert array[: len(stayed)] == stayed
        if not removed:
            assert array[: len(array_before)] == array_before
        for t in removed:
            owner = t.split("_")[0]
            assert owner not in activation.active_names() or (
                op != "disable" and owner == name.split("_")[0]
            )


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
    switched off until the active toolsets take at most a quarter of the
    budget."""
    now = [0.0]
    activation = ToolsetActivation(clock=lambda: now[0])

    def enable(name: str, budget: int) -> str:
        now[0] += 1
        return enable_answer(TWO, activation, {"name": name}, budget)

    assert enable("big", 160) == "Toolset 'big' activated."
    assert enable("x", 160) == "Toolset 'x' activated."
    # 180 > 160: down to 40 (a quarter): 'big' (80 left), then 'x'.
    assert enable("y", 160) == (
        "Toolset 'y' activated; 'big' and 'x' were switched off to make room."
    )
    assert enable("z", 160) == "Toolset 'z' activated."
    assert enable("y", 160) == "Toolset 'y' is already active."  # a use: z is now the LRU
    assert enable("big", 200) == "Toolset 'big' activated."  # 180
    # 220 > 200: down to 50 takes all three, least recently used first.
    assert enable("x", 200) == (
        "Toolset 'x' activated; 'z', 'y' and 'big' were switched off to make room."
    )
    # 140 > 120: 'x' goes; 'big' alone is more than 30, but no other is left.
    assert enable("big", 120) == "Toolset 'big' activated; 'x' was switched off to make room."
    assert activation.active_names() == {"big"}
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


BIG = ToolsetIndex(
    [
        ToolsetContribution(
            "big",
            "big",
            [
                NamedTool("big_a", "cost=50", {"type": "object"}, _ok),
                NamedTool("big_b", "cost=50", {"type": "object"}, _ok),
                NamedTool("big_c", "cost=55", {"type": "object"}, _ok),
            ],
        ),
        ToolsetContribution("x", "x", [NamedTool("x", "cost=5", {"type": "object"}, _ok)]),
        ToolsetContribution("y", "y", [NamedTool("y", "cost=5", {"type": "object"}, _ok)]),
    ],
    ToolCosts(_count),
)


def test_enabling_more_tools_adds_them_and_its_earlier_tools_go_only_when_they_cannot_fit() -> None:
    """Asking for more of an active toolset adds them (last in the array);
    when it cannot fit even alone with the tools enabled of it before, those
    not asked now are switched off (the rest stay in place), and it says so."""
    now = [0.0]
    activation = ToolsetActivation(clock=lambda: now[0])

    def enable(arguments: JsonObject, budget: int) -> str:
        now[0] += 1
        return enable_answer(BIG, activation, arguments, budget)

    assert enable({"name": "big", "tools": ["big_a"]}, 110) == (
        "Toolset 'big' activated (1 of its 3 tools)."
    )
    assert enable({"name": "x"}, 110) == "Toolset 'x' activated."
    assert enable({"name": "big", "tools": ["big_b"]}, 110) == (
        "Toolset 'big' activated (2 of its 3 tools)."
    )
    assert enable({"name": "big", "tools": ["big_a"]}, 110) == "Toolset 'big' is already active."
    assert _array(BIG, activation) == ["big_a", "x", "big_b"]
    # 155 alone: big_a goes (not asked), big_b stays in place, big_c comes last.
    assert enable({"name": "big", "tools": ["big_b", "big_c"]}, 110) == (
        "Toolset 'big' activated (2 of its 3 tools); its other tools were switched off to"
        " make room."
    )
    assert _array(BIG, activation) == ["x", "big_b", "big_c"]
    assert activation.tools_of("big") == {"big_b", "big_c"}
    assert enable({"name": "y"}, 120) == "Toolset 'y' activated."  # 115: fits 120
    # Asked whole: 155 more than 120 even alone, an error that changes nothing.
    with pytest.raises(ToolError, match=r"^toolset 'big' needs 155 tokens"):
        enable({"name": "big"}, 120)
    assert _array(BIG, activation) == ["x", "big_b", "big_c", "y"]
    now[0] += 1
    activation.touch("x")  # y is now the least recently used
    # a and b (100) with x and y pass 105: big's c goes, then y, then x
    # (making room goes down to a quarter of the budget).
    assert enable({"name": "big", "tools": ["big_a", "big_b"]}, 105) == (
        "Toolset 'big' activated (2 of its 3 tools); its other tools, 'y' and 'x' were"
        " switched off to make room."
    )
    assert _array(BIG, activation) == ["big_b", "big_a"]
