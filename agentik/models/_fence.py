"""The last check before a model request goes on the wire.

A node of a cluster can lose a conversation (its lease lapsed, or a pause
froze the process past it) while one of the conversation's model calls waits
in a queue (the model's limits, its connection gate): the check its turn made
before asking is stale by then, and the conversation's new owner may be
calling the model for it already. ``current_call_fence`` holds the check of
the conversation whose task makes the call (the agent sets it in a cluster);
a model runs it with ``pass_fence`` once it holds what it waited for, right
before it sends, and again before each retry.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

import trio

current_call_fence: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "agentik_call_fence", default=None
)
"""The calling conversation's check: cancels its turn if this node no longer
holds the conversation (None outside a cluster)."""


async def pass_fence() -> None:
    """Run the calling conversation's fence: raises ``Cancelled`` before
    anything is sent if it cancelled the turn. Without a fence, nothing
    (no checkpoint either)."""
    fence = current_call_fence.get()
    if fence is not None:
        fence()
        await trio.lowlevel.checkpoint_if_cancelled()
