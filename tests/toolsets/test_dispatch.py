"""Dispatch: core tool, then active toolset, then auto-activation, then not found."""

from __future__ import annotations

import pytest

from agentik import ToolCall
from agentik.toolsets import (
    Error,
    Run,
    ToolsetActivation,
    ToolsetContribution,
    ToolsetIndex,
    dispatch,
)
from agentik.toolsets._dispatch import index_of
from tests.toolsets.helpers import make_tool, make_toolset, ping_toolset


def call(name: str, arguments: str = "{}") -> ToolCall:
    return ToolCall("c1", name, arguments)


class TestOrder:
    def test_core_tool_runs_without_activation(self) -> None:
        """A core tool runs as is, even when a toolset has the same prefix."""
        core = make_tool("ping_core")
        outcome = dispatch(frozenset(), (ping_toolset(),), call("ping_core"), {"ping_core": core})
        assert outcome == Run(core, None)
        assert isinstance(outcome, Run)
        assert outcome.toolset is None

    def test_core_wins_over_a_toolset_tool_of_the_same_name(self) -> None:
        """Core tools come first in the order."""
        core = make_tool("ping")
        assert dispatch(frozenset(), (ping_toolset(),), call("ping"), {"ping": core}) == Run(core)

    def test_active_toolset_tool_runs_without_activation(self) -> None:
        """A tool of an active toolset runs; the toolset is named so it can be touched."""
        ping = ping_toolset()
        outcome = dispatch(frozenset({"ping"}), (ping,), call("ping"), {})
        assert outcome == Run(ping.tools[0], None)
        assert isinstance(outcome, Run)
        assert outcome.toolset == "ping"

    def test_run_equality_is_tool_and_activates(self) -> None:
        """DESIGN.md's contract: an active toolset's tool dispatches to ``Run(tool, None)``.

        ``toolset`` (which toolset to touch) is derived data and takes no part in equality.
        """
        ping = ping_toolset()
        outcome = dispatch(frozenset({"ping"}), (ping,), call("ping"), {})
        assert outcome == Run(ping.tools[0], None)
        assert hash(outcome) == hash(Run(ping.tools[0], None))
        assert isinstance(outcome, Run)
        assert outcome.toolset == "ping"
        assert outcome != Run(ping.tools[0], "ping")

    def test_inactive_toolset_tool_activates(self) -> None:
        """A tool of an inactive toolset runs and activates its toolset."""
        files = make_toolset("files", "read", "write")
        outcome = dispatch(frozenset({"other"}), (files,), call("files_write"), {})
        assert outcome == Run(files.tools[1], "files")
        assert isinstance(outcome, Run)
        assert outcome.toolset == "files"

    def test_malformed_arguments_still_activate(self) -> None:
        """Activation depends on the name alone, never on the arguments."""
        ping = ping_toolset()
        outcome = dispatch(frozenset(), (ping,), call("ping", "{not json"), {})
        assert outcome == Run(ping.tools[0], "ping")
        assert isinstance(outcome, Run)
        assert outcome.toolset == "ping"

    def test_unknown_tool(self) -> None:
        """A name nobody has is an Error with the exact text."""
        assert dispatch(frozenset(), (ping_toolset(),), call("nope"), {}) == Error(
            "tool 'nope' not found"
        )

    def test_known_prefix_but_missing_tool_is_an_error_not_an_activation(self) -> None:
        """ping_other has ping's prefix, but ping does not contain it."""
        assert dispatch(frozenset(), (ping_toolset(),), call("ping_other"), {}) == Error(
            "tool 'ping_other' not found"
        )

    def test_no_toolset_registered(self) -> None:
        """With no contributions, a toolset-looking name is simply not found."""
        assert dispatch(frozenset(), (), call("ping"), {}) == Error("tool 'ping' not found")

    def test_active_name_that_is_not_contributed_runs_nothing(self) -> None:
        """An active-set entry without a contribution grants no tools."""
        assert dispatch(frozenset({"ping"}), (), call("ping"), {}) == Error("tool 'ping' not found")


class TestPingPolicy:
    """The plan's synthetic `ping` scenario, with the actor's part played by the test."""

    async def test_ping_without_enable_auto_activates_runs_and_answers_pong(self) -> None:
        """ping({}) without enable: auto-enabled, executed, answers "pong", then active."""
        index = ToolsetIndex([ping_toolset()])
        activation = ToolsetActivation()
        outcome = index.dispatch(activation.active_names(), call("ping"), {})
        assert isinstance(outcome, Run)
        assert outcome.activates == "ping"
        activation.enable(outcome.activates)
        assert await outcome.tool.handler({}) == "pong"
        assert activation.active_names() == {"ping"}
        again = index.dispatch(activation.active_names(), call("ping"), {})
        assert again == Run(outcome.tool, None)
        assert isinstance(again, Run)
        assert again.toolset == "ping"


class TestIndex:
    def test_lookups(self) -> None:
        """names keeps contribution order; get and toolset_of find by name."""
        a, b = make_toolset("b-set", "x"), make_toolset("a-set", "y", "z")
        index = ToolsetIndex([a, b])
        assert index.names == ("b-set", "a-set")
        assert index.get("a-set") is b
        assert index.get("c-set") is None
        assert index.toolset_of("a-set_z") == "a-set"
        assert index.toolset_of("a-set_q") is None
        assert list(index) == [a, b]
        assert len(index) == 2
        assert index[1] is b

    def test_tools_for_active_sets_in_contribution_order(self) -> None:
        """The offered tools are those of active toolsets, in contribution order."""
        a, b, c = make_toolset("a", "1"), make_toolset("b", "2", "3"), make_toolset("c", "4")
        index = ToolsetIndex([a, b, c])
        assert index.tools_for(frozenset({"c", "b", "zz"})) == b.tools + c.tools
        assert index.tools_for(frozenset()) == ()

    def test_duplicate_toolset_names_are_refused(self) -> None:
        """Two contributions may not share a name."""
        with pytest.raises(ValueError, match=r"^toolset 'ping' is contributed twice$"):
            ToolsetIndex([ping_toolset(), ping_toolset()])

    def test_not_a_contribution(self) -> None:
        """Anything but a contribution is refused."""
        with pytest.raises(ValueError, match=r"^expected a ToolsetContribution, got 'ping'$"):
            ToolsetIndex(["ping"])  # type: ignore[list-item]

    def test_dispatch_accepts_an_index_and_uses_it(self) -> None:
        """An index passed as contributions is used directly."""
        index = ToolsetIndex([ping_toolset()])
        assert index_of(index) is index
        assert dispatch(frozenset(), index, call("ping"), {}) == Run(index[0].tools[0], "ping")

    def test_lists_are_indexed_afresh_so_mutation_is_seen(self) -> None:
        """A list may change between calls; dispatch sees its current content."""
        contributions: list[ToolsetContribution] = [ping_toolset()]
        assert isinstance(dispatch(frozenset(), contributions, call("ping"), {}), Run)
        contributions.clear()
        assert dispatch(frozenset(), contributions, call("ping"), {}) == Error(
            "tool 'ping' not found"
        )
