"""``RequestQueue``: the writer's bounded request channel, one consumer.

A trio memory channel of ``capacity`` slots, with the two calls the writer
needs on top: ``put_nowait`` (False rather than ``WouldBlock``, so a caller
that has room pays no exception) and ``take``, everything queued at once up
to a limit (the batch). It replaced a hand-written queue parked on
``wait_task_rescheduled``: the channel measured the same per turn
(docs/history/performance-log.md, "Per-turn cost against the bare sketch"),
and trio's own rules come with it: every ``put`` and ``take`` is a
checkpoint, even when it need not wait; ``statistics()`` says what waits.

Semantics (trio's): FIFO; a sender waits only when the buffer is full
(backpressure), and a new sender never overtakes one that waits for room (the
buffer stays full while one waits); a sender cancelled while it waits has
queued nothing; ``capacity`` 0 hands each request straight to the writer.
``close`` refuses waiting and later senders (``trio.ClosedResourceError``)
and lets the consumer take what is queued, then ``[]``.
"""

from __future__ import annotations

from typing import Generic, TypeVar, final

import trio

T = TypeVar("T")


@final
class RequestQueue(Generic[T]):
    __slots__ = ("_receive", "_send")

    def __init__(self, capacity: int) -> None:
        self._send, self._receive = trio.open_memory_channel[T](capacity)

    def __len__(self) -> int:
        """Items waiting: in the buffer, and held by senders waiting for room."""
        stats = self._send.statistics()
        return stats.current_buffer_used + stats.tasks_waiting_send

    def statistics(self) -> trio.MemoryChannelStatistics:
        """The channel's statistics (buffer used, tasks waiting to send or take)."""
        return self._send.statistics()

    def put_nowait(self, item: T) -> bool:
        """Queue ``item`` if there is room; False if the sender has to wait.
        Raises ``trio.ClosedResourceError`` once the queue is closed."""
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:
            return False
        except trio.BrokenResourceError:  # the consumer stopped (``drain``)
            raise trio.ClosedResourceError from None
        return True

    async def put(self, item: T) -> None:
        """Wait for room, then queue ``item``; cancelled, it queues nothing.
        Raises ``trio.ClosedResourceError`` if the queue closes meanwhile."""
        try:
            await self._send.send(item)
        except trio.BrokenResourceError:
            raise trio.ClosedResourceError from None

    async def take(self, limit: int) -> list[T]:
        """The items queued, oldest first, at most ``limit``; waits for one if
        there is none. An empty list means the queue is closed and drained.
        A checkpoint either way, so a cancelled consumer stops here rather
        than take another batch."""
        try:
            first = await self._receive.receive()
        except trio.EndOfChannel:
            return []
        return [first, *self.take_nowait(limit - 1)]

    def take_nowait(self, limit: int) -> list[T]:
        """The items queued, oldest first, at most ``limit`` (maybe none)."""
        batch: list[T] = []
        receive_nowait = self._receive.receive_nowait
        while len(batch) < limit:
            try:
                batch.append(receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        return batch

    def close(self) -> None:
        """Accept nothing more. Senders waiting for room get
        ``trio.ClosedResourceError`` (their items were never accepted); the
        consumer wakes, and ``take`` returns what is queued, then []."""
        self._send.close()

    def drain(self) -> list[T]:
        """Close, and hand back every item still queued (the consumer stopped)."""
        self._send.close()
        items = self.take_nowait(len(self))
        self._receive.close()
        return items
