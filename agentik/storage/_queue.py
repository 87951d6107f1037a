"""``RequestQueue``: the writer's bounded request channel, one consumer.

It keeps the semantics of a trio memory channel of ``capacity`` slots that the
writer drains: FIFO; a sender waits only when it is full (backpressure); a
sender cancelled while it waits has queued nothing; ``capacity`` 0 hands each
request straight to the writer. It drops what the writer does not need on the
path every message takes: the channel's checks and bookkeeping per item, and
waking the consumer once per item (the writer is woken once, by the first
request after it went idle, and then takes everything queued at once).

Invariants:
- an item is either in the buffer, held by a waiting sender, or taken: a
  sender is rescheduled exactly once, when its item is accepted (moved into the
  buffer or taken) or refused (the queue closed), unless it was cancelled
  first, in which case its item is dropped;
- items are taken in the order they were offered, waiting senders after the
  buffer, and a sender never overtakes one that waits for room;
- everything here runs in trio tasks of one run, never in another thread.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar, final

import outcome
import trio

T = TypeVar("T")


@final
class RequestQueue(Generic[T]):
    __slots__ = ("_buffer", "_capacity", "_closed", "_consumer", "_senders")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._buffer: list[T] = []
        self._senders: OrderedDict[trio.lowlevel.Task, T] = OrderedDict()
        """Senders waiting for room, oldest first, with their items."""
        self._consumer: trio.lowlevel.Task | None = None
        """The writer, while it waits for a first item."""
        self._closed = False

    def __len__(self) -> int:
        """Items waiting: in the buffer, and held by senders waiting for room."""
        return len(self._buffer) + len(self._senders)

    def put_nowait(self, item: T) -> bool:
        """Queue ``item`` if there is room; False if the sender has to wait.
        Raises ``trio.ClosedResourceError`` once the queue is closed."""
        if self._closed:
            raise trio.ClosedResourceError
        if len(self._buffer) >= self._capacity or self._senders:
            return False
        self._buffer.append(item)
        self._wake_consumer()
        return True

    async def put(self, item: T) -> None:
        """Wait for room, then queue ``item``; cancelled, it queues nothing.
        Raises ``trio.ClosedResourceError`` if the queue closes meanwhile."""
        if self._closed:
            raise trio.ClosedResourceError
        task = trio.lowlevel.current_task()
        senders = self._senders
        senders[task] = item
        self._wake_consumer()  # with capacity 0, the consumer takes it from here

        def abort(_: object) -> trio.lowlevel.Abort:
            del senders[task]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def take(self, limit: int) -> list[T]:
        """The items queued, oldest first, at most ``limit``; waits for one if
        there is none. An empty list means the queue is closed and drained.
        Cancellation is checked first either way, so a cancelled consumer stops
        here rather than take another batch."""
        await trio.lowlevel.checkpoint_if_cancelled()
        # A loop, not an ``if``: a sender that woke us may be cancelled before
        # we run, taking its item back; that is no reason to return [] (closed).
        while not self._buffer and not self._senders:
            if self._closed:
                return []
            self._consumer = trio.lowlevel.current_task()

            def abort(_: object) -> trio.lowlevel.Abort:
                self._consumer = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        return self.take_nowait(limit)

    def take_nowait(self, limit: int) -> list[T]:
        """The items queued, oldest first, at most ``limit`` (maybe none)."""
        buffer = self._buffer
        if len(buffer) <= limit:
            batch, self._buffer = buffer, []
        else:
            batch = buffer[:limit]
            del buffer[:limit]
        senders = self._senders
        # Senders waiting for room: their items come next, into the batch if it
        # has room, else into the room the batch just made in the buffer.
        while senders and len(batch) < limit:
            task, item = senders.popitem(last=False)
            batch.append(item)
            trio.lowlevel.reschedule(task)
        while senders and len(self._buffer) < self._capacity:
            task, item = senders.popitem(last=False)
            self._buffer.append(item)
            trio.lowlevel.reschedule(task)
        return batch

    def close(self) -> None:
        """Accept nothing more. Senders waiting for room get
        ``trio.ClosedResourceError`` (their items were never accepted); the
        consumer wakes, and ``take`` returns what is queued, then []."""
        self._closed = True
        self._refuse_senders()
        self._wake_consumer()

    def drain(self) -> list[T]:
        """Close, and hand back every item still queued (the consumer stopped)."""
        self._closed = True
        self._refuse_senders()
        items, self._buffer = self._buffer, []
        return items

    def _refuse_senders(self) -> None:
        senders = self._senders
        while senders:
            task, _ = senders.popitem(last=False)
            trio.lowlevel.reschedule(task, outcome.Error(trio.ClosedResourceError()))

    def _wake_consumer(self) -> None:
        consumer = self._consumer
        if consumer is not None:
            self._consumer = None
            trio.lowlevel.reschedule(consumer)
