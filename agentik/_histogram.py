"""A Prometheus-style histogram, for ``/metrics``: plain numbers, updated in place
by one thread (the agent's tasks)."""

from __future__ import annotations

import bisect

import attrs

MODEL_LATENCY_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


@attrs.define
class Histogram:
    """A Prometheus-style histogram: counts per upper bound, plus sum and count."""

    bounds: tuple[float, ...] = MODEL_LATENCY_BUCKETS
    counts: list[int] = attrs.Factory(lambda self: [0] * (len(self.bounds) + 1), takes_self=True)
    """``counts[i]`` observations fell in ``(bounds[i-1], bounds[i]]``; the last is +Inf."""
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= bound)`` pairs, ending with +Inf."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out
