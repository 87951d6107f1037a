"""``[storage] retention_days``: delete conversations idle longer than that.

One task in the server's nursery wakes every ``period`` seconds and deletes
the idle conversations in batches of ``batch`` (``ChatAgent.
delete_idle_conversations``), pausing ``pause`` seconds between batches so
the writer's queue drains. Each conversation's delete is its own writer
request (its own savepoint: all or nothing); the writer's group commit may
put a batch's deletes in one transaction with each other and with turns'
writes, so what bounds the writer's hold is the batch size times a delete's
cost (about 5 µs a message plus the commit; bench/retention.py,
docs/performance.md "Retention"). The store checks each conversation's age
again inside its delete, so one a turn used since it was listed is kept. A
failure (the storage failing, the agent overloaded; a batch's concurrent
deletes may fail several at once, as an exception group) is logged and the
next period tries again: the server stays up.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import trio

from agentik._errors import AgentikError
from agentik.agent import ChatAgent
from agentik.storage import Clock, utc_now

log = logging.getLogger("agentik.server")

PERIOD = 3600.0
BATCH = 100
PAUSE = 0.25
"""Seconds between batches: room for the writer's other requests."""


async def run_retention(
    agent: ChatAgent,
    days: float,
    *,
    period: float = PERIOD,
    batch: int = BATCH,
    pause: float = PAUSE,
    clock: Clock = utc_now,
) -> None:
    """Delete idle conversations every ``period`` seconds, for ever (cancel to stop)."""
    while True:
        cutoff = clock() - timedelta(days=days)
        total = 0
        while True:
            deleted = await _batch(agent, cutoff, batch)
            if deleted is None:
                break
            total += len(deleted)
            if len(deleted) < batch:
                break
            await trio.sleep(pause)
        if total:
            log.info("retention deleted=%d idle_days=%g", total, days)
        await trio.sleep(period)


async def _batch(agent: ChatAgent, cutoff: datetime, batch: int) -> list[str] | None:
    """One batch's deletes; None when it failed (logged). The batch deletes
    its conversations concurrently, so failures come as an exception group,
    one per conversation that failed; any that is not an agentik error (a
    bug) still propagates."""
    try:
        return await agent.delete_idle_conversations(cutoff, limit=batch)
    except* AgentikError as group:
        failures = "; ".join(str(error) for error in _leaves(group))
        log.warning("retention stopped until the next period: %s", failures)
    return None


def _leaves(group: BaseExceptionGroup[AgentikError]) -> list[AgentikError]:
    out: list[AgentikError] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            out.extend(_leaves(error))
        else:
            out.append(error)
    return out
