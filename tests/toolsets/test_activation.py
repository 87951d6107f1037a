"""Activation per conversation: enable, disable, touch, and lazy expiry after 10 minutes."""

from __future__ import annotations

import tracemalloc

import pytest
import trio
import trio.testing

from agentik.toolsets import ToolsetActivation


class TestTransitions:
    async def test_enable_is_reflected_immediately(self) -> None:
        """enable then active_names contains the toolset."""
        activation = ToolsetActivation()
        assert activation.active_names() == frozenset()
        assert activation.enable("ping") is True
        assert activation.active_names() == {"ping"}
        assert activation.is_active("ping")

    async def test_enable_is_idempotent(self) -> None:
        """A second enable reports 'already active' (False) and keeps one entry."""
        activation = ToolsetActivation()
        activation.enable("ping")
        assert activation.enable("ping") is False
        assert activation.active_names() == {"ping"}

    async def test_disable(self) -> None:
        """disable reports whether it was active; disabling an inactive one is harmless."""
        activation = ToolsetActivation()
        assert activation.disable("ping") is False
        activation.enable("ping")
        activation.enable("files")
        assert activation.disable("ping") is True
        assert activation.active_names() == {"files"}

    async def test_touch_of_an_inactive_toolset_does_nothing(self) -> None:
        """A use of an inactive toolset does not activate it."""
        activation = ToolsetActivation()
        activation.touch("ping")
        assert activation.active_names() == frozenset()

    async def test_conversations_are_isolated(self) -> None:
        """Each conversation has its own activation object and state."""
        first, second = ToolsetActivation(), ToolsetActivation()
        first.enable("ping")
        assert second.active_names() == frozenset()

    @pytest.mark.parametrize("timeout", [0, -1.0, float("inf"), float("nan")])
    def test_timeout_must_be_positive(self, timeout: float) -> None:
        """A timeout that is not a positive finite number is refused."""
        with pytest.raises(ValueError, match=r"^timeout must be a positive number of seconds"):
            ToolsetActivation(timeout=timeout)


class TestExpiry:
    async def test_expires_ten_minutes_after_enable(self, autojump_clock: trio.abc.Clock) -> None:
        """Unused for 600 s (the default), a toolset is dropped; just before, it is not."""
        activation = ToolsetActivation()
        activation.enable("ping")
        await trio.sleep(599.5)
        assert activation.active_names() == {"ping"}
        await trio.sleep(0.5)
        assert activation.active_names() == frozenset()

    async def test_touch_restarts_the_timeout(self, autojump_clock: trio.abc.Clock) -> None:
        """A use refreshes; expiry counts from the last use."""
        activation = ToolsetActivation()
        activation.enable("ping")
        await trio.sleep(500)
        activation.touch("ping")
        await trio.sleep(500)
        assert activation.active_names() == {"ping"}
        assert activation.expires_in("ping") == pytest.approx(100)
        await trio.sleep(100)
        assert activation.active_names() == frozenset()

    async def test_enable_of_an_active_toolset_refreshes(
        self, autojump_clock: trio.abc.Clock
    ) -> None:
        """'already active' still counts as a use."""
        activation = ToolsetActivation(timeout=10)
        activation.enable("ping")
        await trio.sleep(8)
        assert activation.enable("ping") is False
        await trio.sleep(8)
        assert activation.is_active("ping")

    async def test_expired_toolset_reenables_as_new(self, autojump_clock: trio.abc.Clock) -> None:
        """After expiry, enable reports a fresh activation, and touch no longer revives it."""
        activation = ToolsetActivation(timeout=10)
        activation.enable("ping")
        await trio.sleep(10)
        activation.touch("ping")
        assert activation.expires_in("ping") is None
        assert activation.disable("ping") is False
        assert activation.enable("ping") is True

    async def test_expires_in(self, autojump_clock: trio.abc.Clock) -> None:
        """expires_in counts down from timeout, None when inactive."""
        activation = ToolsetActivation(timeout=60)
        assert activation.expires_in("ping") is None
        activation.enable("ping")
        await trio.sleep(15)
        assert activation.expires_in("ping") == pytest.approx(45)

    async def test_each_toolset_expires_on_its_own(self, autojump_clock: trio.abc.Clock) -> None:
        """Expiry is per toolset."""
        activation = ToolsetActivation(timeout=10)
        activation.enable("a")
        await trio.sleep(5)
        activation.enable("b")
        await trio.sleep(5)
        assert activation.active_names() == {"b"}

    def test_injected_clock_outside_trio(self) -> None:
        """Any clock function works; no trio run is needed then."""
        clock = trio.testing.MockClock()
        activation = ToolsetActivation(timeout=30, clock=clock.current_time)
        activation.enable("ping")
        clock.jump(29.9)
        assert activation.is_active("ping")
        clock.jump(0.1)
        assert not activation.is_active("ping")


class TestFootprint:
    def test_idle_activations_are_small(self) -> None:
        """Idle, an activation holds no dict; thousands fit in a few hundred KB."""
        activation = ToolsetActivation(clock=lambda: 0.0)
        activation.enable("ping")
        activation.disable("ping")
        assert activation._last_use is None
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            kept = [ToolsetActivation(clock=lambda: 0.0) for _ in range(1000)]
            per_object = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
        finally:
            tracemalloc.stop()
        assert per_object < 300


class TestOfferOrder:
    """What the model is offered, piece by piece in the order it was switched on."""

    def test_tools_added_later_come_last_and_a_switch_off_removes_them_all(self) -> None:
        """Enabling only adds (the union of the tools asked for, each new one
        last); only a switch-off takes a toolset's tools away."""
        now = [0.0]
        activation = ToolsetActivation(clock=lambda: now[0])
        activation.enable("git", ["git_log"])
        activation.enable("web")
        activation.enable("git", ["git_log", "git_diff"])
        assert activation.offer_order() == (
            ("git", frozenset({"git_log"})),
            ("web", None),
            ("git", frozenset({"git_diff"})),
        )
        assert activation.tools_of("git") == {"git_log", "git_diff"}
        assert activation.enable("git", ["git_push"]) is False  # fewer asked: still added
        assert activation.tools_of("git") == {"git_log", "git_diff", "git_push"}
        assert activation.offer_order()[-1] == ("git", frozenset({"git_push"}))
        order = activation.offer_order()
        activation.enable("git", ["git_diff"])  # nothing new: nothing moves
        assert activation.offer_order() == order
        activation.enable("git")  # the rest of git, after everything
        assert activation.offer_order() == (*order, ("git", None))
        assert activation.tools_of("git") is None
        activation.enable("git", ["git_log"])  # whole stays whole
        assert activation.offer_order() == (*order, ("git", None))
        assert activation.tools_of("git") is None
        activation.disable("git")
        assert activation.offer_order() == (("web", None),)
        activation.enable("git", ["git_diff"])  # switched on anew: only what is asked
        assert activation.offer_order() == (("web", None), ("git", frozenset({"git_diff"})))
        now[0] += 600.0
        assert activation.offer_order() == ()
        assert activation._order is None  # an idle conversation holds no list

    def test_the_index_gives_a_later_whole_piece_only_the_rest(self) -> None:
        from agentik.toolsets import NamedTool, ToolsetContribution, ToolsetIndex

        async def ok(arguments: object) -> str:
            return "ok"

        git = ToolsetContribution(
            "git", "git", [NamedTool(f"git_{v}", v, {"type": "object"}, ok) for v in "abc"]
        )
        index = ToolsetIndex([git])
        pieces = [("git", frozenset({"git_c"})), ("git", None)]
        assert [t.name for t in index.tools_of(pieces)] == ["git_c", "git_a", "git_b"]
