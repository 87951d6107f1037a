"""Counters the agent keeps for ``/metrics``: plain numbers, updated in place.

Only the agent's own tasks write them (one thread), so no locking is needed.
"""

from __future__ import annotations

import attrs

from agentik._histogram import MODEL_LATENCY_BUCKETS as MODEL_LATENCY_BUCKETS
from agentik._histogram import Histogram as Histogram


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
