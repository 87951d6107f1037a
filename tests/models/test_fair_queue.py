"""The pure parts of the model-limits scheduler: deficit round robin, the
per-minute token bucket, and the provider's rate-limit headers."""

from __future__ import annotations

import bisect
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.models._bucket import Budget, Grant
from agentik.models._fair_queue import FairQueue
from agentik.models._rate_limits import (
    DEFAULT_PAUSE,
    MAX_PAUSE,
    parse_duration,
    read_rate_limit,
)


class TestFairQueue:
    @given(
        demands=st.lists(st.integers(1, 200), min_size=2, max_size=6),
        weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=6, max_size=6),
        cost=st.integers(1, 50),
    )
    @settings(deadline=None)
    def test_backlogged_keys_get_cost_in_proportion_to_weight(
        self, demands: list[int], weights: list[float], cost: int
    ) -> None:
        """While every key keeps items waiting, each key's served cost stays
        within two quanta of its weighted share, however much more some queue."""
        keys = [f"k{i}" for i in range(len(demands))]
        weight = dict(zip(keys, weights, strict=False))
        queue: FairQueue[tuple[str, int]] = FairQueue(weight.__getitem__)
        rounds = 200
        for key, demand in zip(keys, demands, strict=True):
            for i in range(demand * rounds):  # all backlogged for the whole run
                queue.push(key, (key, i), cost)
        served: Counter[str] = Counter()
        for _ in range(rounds):
            item = queue.head()
            assert item is not None
            assert queue.head() is item  # stable until popped
            assert queue.pop() is item
            served[item[0]] += cost
        total = sum(served.values())
        total_weight = sum(weight.values())
        quantum = queue.quantum
        for key in keys:
            share = total * weight[key] / total_weight
            assert abs(served[key] - share) <= 2 * quantum * max(weight.values()) + cost

    @given(
        st.lists(
            st.tuples(
                st.sampled_from(["push", "push", "pop", "remove"]),
                st.sampled_from(["a", "b", "c"]),
                st.integers(1, 30),
            ),
            max_size=80,
        )
    )
    def test_counts_costs_and_removal_stay_consistent(
        self, steps: list[tuple[str, str, int]]
    ) -> None:
        """Pushes, pops and removals keep the counts and costs the items say;
        every item pushed leaves exactly once, and a key's items leave in order."""
        queue: FairQueue[tuple[str, int]] = FairQueue(lambda key: 1.0)
        model: dict[str, list[tuple[tuple[str, int], int]]] = {"a": [], "b": [], "c": []}
        number = 0
        for action, key, cost in steps:
            if action == "push":
                item = (key, number)
                number += 1
                queue.push(key, item, cost)
                model[key].append((item, cost))
            elif action == "pop" and len(queue):
                item = queue.pop()
                assert model[item[0]][0][0] is item  # FIFO within a key
                model[item[0]].pop(0)
            elif action == "remove" and model[key]:
                item, _ = model[key].pop(cost % len(model[key]))
                assert queue.remove(key, item)
                assert not queue.remove(key, item)
            assert len(queue) == sum(len(items) for items in model.values())
            assert math.isclose(queue.cost, sum(c for items in model.values() for _, c in items))
            for k, items in model.items():
                assert queue.queued(k) == (len(items), float(sum(c for _, c in items)))
            assert queue.keys == sum(1 for items in model.values() if items)
        assert (queue.head() is None) == (len(queue) == 0)

    def test_an_empty_queue_pops_nothing(self) -> None:
        """``pop`` on an empty queue raises; ``head`` is None."""
        queue: FairQueue[int] = FairQueue(lambda key: 1.0)
        assert queue.head() is None
        with pytest.raises(IndexError, match=r"^pop from an empty FairQueue$"):
            queue.pop()

    def test_a_retried_item_keeps_its_place(self) -> None:
        """``front=True`` serves the item first within its key."""
        queue: FairQueue[str] = FairQueue(lambda key: 1.0)
        queue.push("a", "second", 1)
        queue.push("a", "first", 1, front=True)
        assert [queue.pop(), queue.pop()] == ["first", "second"]


class TestBudget:
    @given(
        limit=st.integers(1, 5000),
        steps=st.lists(
            st.tuples(st.floats(0.01, 1.0), st.floats(0, 5), st.floats(0, 1)),
            min_size=1,
            max_size=300,
        ),
    )
    @settings(deadline=None)
    def test_never_more_than_the_limit_in_any_60_seconds(
        self, limit: int, steps: list[tuple[float, float, float]]
    ) -> None:
        """Taking whenever the budget says ready (after a gap, or at once), in
        amounts up to the whole limit, and refunding part of some later (the
        usage was lower), never lets more than ``limit`` through in any 60 s."""
        budget = Budget(limit)
        now = 0.0
        taken: list[tuple[float, Grant]] = []
        for fraction, gap, refund in steps:
            now += gap
            amount = max(1.0, fraction * limit)
            now += budget.ready_in(amount, now)
            taken.append((now, budget.take(amount, now)))
            if refund < 0.3:  # correct an earlier grant downwards
                _, grant = taken[int(refund * 10 * len(taken)) % len(taken)]
                budget.correct(grant, grant.amount * refund, now)
        times = [t for t, _ in taken]
        for i, (start, _) in enumerate(taken):
            end = bisect.bisect_left(times, start + 60)
            assert sum(g.amount for _, g in taken[i:end]) <= limit * (1 + 1e-9)

    @given(st.integers(60, 10**7), st.floats(0.001, 0.05))
    @settings(deadline=None)
    def test_a_saturated_budget_lets_the_whole_limit_through(
        self, limit: int, fraction: float
    ) -> None:
        """Over ten minutes of calls of a few hundredths of the limit each, taken
        as soon as ready, ten minutes' budget goes through, less what cannot fit
        in a minute for the size of a call."""
        budget = Budget(limit)
        amount = max(1.0, fraction * limit)
        now, total = 0.0, 0.0
        while True:
            now += budget.ready_in(amount, now)
            if now >= 600:
                break
            budget.take(amount, now)
            total += amount
        assert total >= 10 * (limit - amount) - amount

    def test_a_debt_delays_what_follows(self) -> None:
        """A correction upwards (more used than charged) makes the next wait longer."""
        budget = Budget(6000)  # a bucket of 100, refilled at 100 a second
        assert budget.ready_in(100, 0.0) == 0.0
        grant = budget.take(100, 0.0)
        budget.correct(grant, 400, 0.0)
        assert budget.ready_in(100, 0.0) == pytest.approx(4.0)
        assert budget.in_window == 400
        budget.correct(grant, 0, 0.0)
        assert budget.in_window == 0
        assert budget.bucket.level == budget.bucket.capacity


class TestRateLimitHeaders:
    @given(
        st.lists(
            st.tuples(st.integers(0, 500), st.sampled_from(["h", "m", "s", "ms"])),
            min_size=1,
            max_size=4,
        )
    )
    def test_go_durations_are_read(self, parts: list[tuple[int, str]]) -> None:
        """``1h2m3s``, ``6m0s``, ``20ms``: the sum of their parts, in seconds."""
        unit = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
        text = "".join(f"{n}{u}" for n, u in parts)
        assert parse_duration(text) == pytest.approx(sum(n * unit[u] for n, u in parts))

    @pytest.mark.parametrize("text", ["", "s", "1x", "1s2", "-1s", "abc", "inf", "nan", "1s 2s"])
    def test_other_text_is_no_duration(self, text: str) -> None:
        """Anything else reads as nothing (never an error)."""
        assert parse_duration(text) is None

    def test_a_429_says_how_long_and_what_is_left(self) -> None:
        """Retry-After and the x-ratelimit headers are read from a 429."""
        answer = read_rate_limit(
            429,
            {
                "retry-after": "7",
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-remaining-tokens": "1200",
                "x-ratelimit-reset-requests": "1s",
                "x-ratelimit-reset-tokens": "6m0s",
            },
        )
        assert answer is not None
        assert (answer.retry_after, answer.pause) == (7.0, 7.0)
        assert (answer.remaining_requests, answer.remaining_tokens) == (0, 1200)
        assert (answer.reset_requests, answer.reset_tokens) == (1.0, 360.0)

    def test_a_bare_429_pauses_briefly_and_a_long_ask_is_capped(self) -> None:
        """A 429 that asks nothing pauses ``DEFAULT_PAUSE``; a day is ``MAX_PAUSE``."""
        bare = read_rate_limit(429, {})
        assert bare is not None and bare.pause == DEFAULT_PAUSE
        long = read_rate_limit(429, {"retry-after-ms": str(86_400_000)})
        assert long is not None and long.pause == MAX_PAUSE

    @pytest.mark.parametrize(
        ("status", "headers", "word"),
        [
            (503, {}, False),
            (503, {"retry-after": "2"}, True),
            (503, {"x-ratelimit-remaining-tokens": "0"}, True),
            (500, {"retry-after": "2"}, False),
            (200, {"x-ratelimit-remaining-tokens": "0"}, False),
            (None, {}, False),
        ],
    )
    def test_what_counts_as_the_providers_word(
        self, status: int | None, headers: dict[str, str], word: bool
    ) -> None:
        """Any 429; a 503 only with Retry-After or x-ratelimit headers; nothing else."""
        assert (read_rate_limit(status, headers) is not None) is word
