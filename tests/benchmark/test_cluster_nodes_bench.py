"""``bench.cluster_nodes``' comparison with one node: each run against the
one-node runs measured nearest it, so the machine's drift over the minutes a
run of several node counts takes does not pass for the cluster's cost."""

from __future__ import annotations

import pytest

from bench.cluster_nodes import against_one


def test_a_run_is_compared_with_the_one_node_runs_on_either_side() -> None:
    ratios = against_one([1, 3, 1, 3, 1], [100.0, 120.0, 110.0, 130.0, 105.0])
    assert [against for _, against in ratios] == ["3", "1+3", "1+5", "3+5", "3"]
    assert ratios[1][0] == pytest.approx(120 / 105)
    assert ratios[3][0] == pytest.approx(130 / 107.5)
    # A one-node run against the others: the drift itself.
    assert ratios[0][0] == pytest.approx(100 / 110)
    assert ratios[2][0] == pytest.approx(110 / 102.5)


def test_drift_between_the_bracketing_runs_does_not_move_the_ratio() -> None:
    # The machine slows by a third over the run; the 3-node runs cost 1.1x
    # one node's at their moment.
    ones = [100.0, 133.0, 166.0]
    threes = [1.1 * (ones[0] + ones[1]) / 2, 1.1 * (ones[1] + ones[2]) / 2]
    ratios = against_one([1, 3, 1, 3, 1], [ones[0], threes[0], ones[1], threes[1], ones[2]])
    assert ratios[1][0] == pytest.approx(1.1)
    assert ratios[3][0] == pytest.approx(1.1)


def test_without_another_one_node_run_the_first_run_is_the_base() -> None:
    assert against_one([1, 2, 3], [100.0, 110.0, 130.0]) == [
        (1.0, "1"),
        (pytest.approx(1.1), "1"),
        (pytest.approx(1.3), "1"),
    ]
    assert against_one([2, 3], [100.0, 150.0]) == [(1.0, "1"), (1.5, "1")]
