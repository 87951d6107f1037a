"""Counters the agent keeps for ``/metrics``: plain numbers, updated in place.

Only the agent's own tasks write them (one thread), so no locking is needed.
"""

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


@attrs.define
class AgentStats:
    """What the agent has done since it opened."""

    turns_started: int = 0
    turns_finished: int = 0
    turns_failed: int = 0
    turns_replayed: int = 0
    turns_resumed: int = 0
    """Turns continued from stored state: interrupted by a stop, or retried
    with their key after they failed."""
    approvals_requested: int = 0
    """Tool calls that waited for a person's decision."""
    approvals_decided: int = 0
    summaries: int = 0
    """Summaries of older history stored (context policy)."""
    summaries_failed: int = 0
    """Retries answered from history through an idempotency key."""
    tool_calls: int = 0
    tool_errors: int = 0
    model_calls: int = 0
    model_errors: int = 0
    input_tokens: int = 0
    """Prompt tokens the model reported, over every request (reflections too)."""
    output_tokens: int = 0
    """Completion tokens the model reported, over every request."""
    reflections_failed: int = 0
    """Reflection steps that failed (logged; the turn had already finished)."""
    overloaded: int = 0
    """Turns refused because a queue was full."""
    live_conversations: int = 0
    model_latency: Histogram = attrs.Factory(Histogram)
