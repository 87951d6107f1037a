"""Property tests over random contributions, active sets and calls, and an activation model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentik import ToolCall
from agentik.toolsets import (
    Error,
    NamedTool,
    Run,
    ToolsetActivation,
    ToolsetContribution,
    ToolsetIndex,
    dispatch,
    render_toolset_section,
)
from tests.toolsets.helpers import make_tool

# Tiny alphabets so names collide often: shared prefixes, near misses, core overlaps.
toolset_names = st.text("ab-", min_size=1, max_size=3)
verbs = st.text("xy_", min_size=1, max_size=2)


@st.composite
def contribution_lists(draw: st.DrawFn) -> list[ToolsetContribution]:
    names = draw(st.lists(toolset_names, unique=True, max_size=5))
    contributions = []
    for name in names:
        tool_names = draw(
            st.lists(
                st.sampled_from([name]) | st.builds("{}_{}".format, st.just(name), verbs),
                unique=True,
                min_size=1,
                max_size=4,
            )
        )
        description = draw(st.text("abc d", min_size=1, max_size=8).filter(str.strip))
        contributions.append(
            ToolsetContribution(name, description, [make_tool(t) for t in tool_names])
        )
    return contributions


call_names = toolset_names | st.builds(lambda a, b: f"{a}_{b}", toolset_names, verbs)
cores = st.dictionaries(call_names, st.builds(make_tool, call_names), max_size=3)


def reference(
    active: frozenset[str],
    contributions: Sequence[ToolsetContribution],
    name: str,
    core: Mapping[str, NamedTool],
) -> Run | Error:
    """The dispatch order, written as the plainest possible linear scan."""
    if name in core:
        return Run(core[name])
    for contribution in contributions:
        for named in contribution.tools:
            if named.name == name:
                activates = None if contribution.name in active else contribution.name
                return Run(named, activates, contribution.name)
    return Error(f"tool {name!r} not found")


@settings(max_examples=150, deadline=None)
@given(
    contributions=contribution_lists(),
    active=st.frozensets(toolset_names, max_size=4),
    name=call_names,
    core=cores,
    arguments=st.text(max_size=5),
)
def test_dispatch_matches_the_reference_and_its_invariants(
    contributions: list[ToolsetContribution],
    active: frozenset[str],
    name: str,
    core: dict[str, NamedTool],
    arguments: str,
) -> None:
    """Deterministic; never activates a toolset lacking the tool; never runs an unknown tool."""
    call = ToolCall("c", name, arguments)
    outcome = dispatch(active, tuple(contributions), call, core)
    assert outcome == dispatch(active, ToolsetIndex(contributions), call, core)
    assert outcome == dispatch(active, list(contributions), call, core)
    expected = reference(active, contributions, name, core)
    assert outcome == expected
    if isinstance(outcome, Run) and isinstance(expected, Run):
        # toolset takes no part in equality (DESIGN.md: Run(tool, activates)), so check it here.
        assert outcome.toolset == expected.toolset
    by_name = {c.name: c for c in contributions}
    if isinstance(outcome, Run):
        known = core.get(name) is outcome.tool or any(
            outcome.tool is t and t.name == name for c in contributions for t in c.tools
        )
        assert known
        if outcome.activates is not None:
            assert outcome.activates not in active
            assert name not in core
            assert outcome.tool in by_name[outcome.activates].tools
    else:
        assert name not in core
        assert all(t.name != name for c in contributions for t in c.tools)
        assert outcome.message == f"tool {name!r} not found"


@settings(max_examples=100, deadline=None)
@given(contributions=contribution_lists(), active=st.frozensets(toolset_names, max_size=4))
def test_rendering_lists_every_contribution_exactly_once(
    contributions: list[ToolsetContribution], active: frozenset[str]
) -> None:
    """Each toolset is one row, in its group, in contribution order."""
    text = render_toolset_section(contributions, active)
    if not contributions:
        assert text is None
        return
    assert text is not None
    lines = text.split("\n")
    split = lines.index('INACTIVE call enable_toolset({"name": X}) to add')
    active_rows, inactive_rows = lines[lines.index("ACTIVE") + 1 : split - 1], lines[split + 1 :]
    expect_active = [f"{c.name} — {c.description}" for c in contributions if c.name in active]
    expect_inactive = [f"{c.name} — {c.description}" for c in contributions if c.name not in active]
    assert active_rows == (expect_active or ["(none)"])
    assert inactive_rows == (expect_inactive or ["(none)"])
    for contribution in contributions:
        row = f"{contribution.name} — {contribution.description}"
        assert lines.count(row) == 1


NAMES = ("a", "b", "c")


class ActivationMachine(RuleBasedStateMachine):
    """ToolsetActivation against a plain dict of last-use times under a mock clock."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = trio.testing.MockClock()
        self.timeout = 10.0
        self.activation = ToolsetActivation(timeout=self.timeout, clock=self.clock.current_time)
        self.last_use: dict[str, float] = {}

    def live(self) -> set[str]:
        now = self.clock.current_time()
        return {n for n, t in self.last_use.items() if now - t < self.timeout}

    @rule(name=st.sampled_from(NAMES))
    def enable(self, name: str) -> None:
        was = name in self.live()
        assert self.activation.enable(name) is (not was)
        self.last_use[name] = self.clock.current_time()

    @rule(name=st.sampled_from(NAMES))
    def disable(self, name: str) -> None:
        assert self.activation.disable(name) is (name in self.live())
        self.last_use.pop(name, None)

    @rule(name=st.sampled_from(NAMES))
    def touch(self, name: str) -> None:
        if name in self.live():
            self.last_use[name] = self.clock.current_time()
        self.activation.touch(name)

    # Exact binary fractions: no rounding at the expiry edge.
    @rule(seconds=st.sampled_from([0.5, 3.0, 9.75, 10.0, 25.0]))
    def wait(self, seconds: float) -> None:
        self.clock.jump(seconds)

    @precondition(lambda self: bool(self.last_use))
    @rule()
    def check_expiry(self) -> None:
        for name in NAMES:
            expected = (
                self.last_use[name] + self.timeout - self.clock.current_time()
                if name in self.live()
                else None
            )
            got = self.activation.expires_in(name)
            assert (got is None) == (expected is None)
            if got is not None and expected is not None:
                assert abs(got - expected) < 1e-9

    @invariant()
    def same_active_set(self) -> None:
        assert self.activation.active_names() == self.live()


TestActivationMachine = ActivationMachine.TestCase
TestActivationMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
