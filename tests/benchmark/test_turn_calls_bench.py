"""``bench.turn_calls`` counts what it says: the calls of the measured turns
only (not the warm-up's, not start-up's), agentik's the same every run, and
the tree it counts is the one on ``sys.path``."""

from __future__ import annotations

from pathlib import Path

from bench.turn_calls import TURNS, count

ROOT = Path(__file__).resolve().parents[2]


def test_a_turn_counts_the_same_whatever_the_number_of_conversations() -> None:
    small, large = count("memory", 3, 5), count("memory", 12, 5)
    assert small["tree"] == str(ROOT / "agentik") + "/"
    # Per turn, not per run: a warm-up or start-up counted in would shrink
    # with more conversations; agentik's own turns of the same workload cost
    # the same, and trio's add only the measured block's nursery (a few
    # dozen calls a run).
    assert small["agentik"] == large["agentik"]
    assert abs(small["all"] - large["all"]) < 0.05 * large["all"]  # type: ignore[operator]
    # agentik's count is the same run after run (trio's moves by a few
    # calls: its scheduler shuffles its batches).
    assert count("memory", 12, 5)["agentik"] == large["agentik"]
    assert 0 < small["agentik"] < small["all"]  # type: ignore[operator]
    # The listed functions are counted per run: the busiest is called at
    # least once a turn.
    top: list[tuple[str, int]] = small["top"]  # type: ignore[assignment]
    assert len(top) == 5
    assert top[0][1] >= 3 * TURNS
    assert any(name.startswith("agentik/") for name, _ in top) or all(
        name.startswith("~") for name, _ in top
    )
