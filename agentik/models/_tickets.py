"""A model call as the ``ModelScheduler`` sees it, its ticket in the queue, and
what the scheduler counts (``/metrics``)."""

from __future__ import annotations

import math
from typing import final

import attrs
import trio

from agentik._histogram import Histogram
from agentik.models._bucket import Grant


@final
@attrs.define(eq=False)
class ScheduledCall:
    """One model call, as the scheduler sees it."""

    key: str
    """Its fairness key."""
    priority: int
    """0 for a turn, 1 for a summary or reflection."""
    prompt: float
    """Its prompt's tokens, estimated (0 when tokens are not limited)."""
    grant: Grant | None = None
    """Its last admitted attempt's tokens (a correction replaces them)."""
    charged: float | None = None
    """What its fairness key was charged for its last admitted attempt (None:
    admitted with nobody waiting, so charged nothing); corrected too."""
    attempts: int = 0


@final
@attrs.define
class SchedulerStats:
    """What the scheduler has done since it opened (``/metrics``)."""

    requests_granted: int = 0
    tokens_granted: float = 0.0
    """Tokens charged, with the corrections from reported usage."""
    rate_limited: int = 0
    """Answers from the provider that it is rate limited (429, or 503 saying so)."""
    pauses: int = 0
    """Times every call was paused at the provider's word."""
    refused: int = 0
    """New turns refused at the edge (expected wait past ``max_queue_wait``)."""
    wait: Histogram = attrs.Factory(Histogram)
    """Seconds each admitted attempt waited."""


@final
@attrs.define(eq=False)
class Ticket:
    """A call waiting in (or admitted from) the queue: one per attempt."""

    call: ScheduledCall
    since: float
    cost: float = 0.0
    """What its fairness key is charged when it is served."""
    event: trio.Event = attrs.Factory(trio.Event)
    granted: bool = False
    request: Grant | None = None
    """Its request in the requests budget's window, once granted."""
    wake_at: float = math.inf
    """When the head of the queue may go (set only for it)."""
    began: float = 0.0
