"""Where a model call waits for a connection: in agentik, never in the HTTP library.

A ``Gate`` hands out slots; a call holds one for exactly one attempt on the
wire (request sent, answer read or stream drained, connection back in the
pool) and for nothing else: not while it encodes or decodes, and not while it
sleeps before a retry. The HTTP client's pool has at least as many
connections as the gate has slots, so a call holding a slot always finds a
connection and the pool's own queue stays empty (httpx's pool re-ran its
assignment of every queued request on each pass, encode/httpcore#1035: CPU per
request grew with the queue).

Invariants of ``FifoGate``:

- At most ``capacity`` slots are held at once; a slot is released however its
  holder leaves (answer, error, cancellation), exactly once.
- Waiters are served first come, first served.
- Waiting costs O(1) and nothing per other waiter: one entry in a trio
  ``ParkingLot`` (an ordered dict), woken directly by the release that hands it
  the slot; no waiter polls or is woken to fail and re-queue.
- A waiter cancelled while it waits (its deadline passed, its turn was
  cancelled) leaves the queue at once and holds nothing.

This is the one queue of model calls. The admission scheduler of model limits
(token buckets, fairness across owners, priorities by ``ModelRequest.purpose``)
implements the same ``Gate`` protocol and takes this one's place: it decides
which waiter gets the next slot, where this one takes the oldest.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol, final

import trio

from agentik._errors import ModelBackendError

if TYPE_CHECKING:
    from agentik.models._protocol import ModelRequest


class Gate(Protocol):
    """Admission of model calls to the wire, one attempt at a time."""

    @property
    def capacity(self) -> int:
        """Slots in all: attempts that may be on the wire at once."""
        ...

    def slot(self, request: ModelRequest) -> AbstractAsyncContextManager[None]:
        """Wait for a slot for one attempt at ``request``; release it on exit.

        Cancel-safe: cancelled while waiting, the caller leaves no trace; the
        slot is released whether the body of the ``async with`` returns,
        raises or is cancelled.
        """
        ...


@final
class FifoGate:
    """A ``Gate`` serving waiters in arrival order (a trio ``Semaphore``, which is FIFO)."""

    __slots__ = ("_capacity", "_semaphore")

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ModelBackendError(f"max_connections must be an integer >= 1, got {capacity!r}")
        self._capacity = capacity
        # max_value turns a release of a slot never taken into an error.
        self._semaphore = trio.Semaphore(capacity, max_value=capacity)

    def __repr__(self) -> str:
        return f"FifoGate(capacity={self._capacity}, in_use={self.in_use}, waiting={self.waiting})"

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def in_use(self) -> int:
        """Slots held now."""
        return self._capacity - self._semaphore.value

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot now."""
        return self._semaphore.statistics().tasks_waiting

    def slot(self, request: ModelRequest) -> AbstractAsyncContextManager[None]:
        # The semaphore is its own context manager: acquire on entry, release on exit.
        return self._semaphore
