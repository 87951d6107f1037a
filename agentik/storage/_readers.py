"""A small pool of read connections, used from worker threads.

A ``CapacityLimiter`` sized to the pool guarantees a free connection for every
task it admits, so reads never block the event loop nor wait for a
connection. Each read is one short read (SQLite: a read transaction on a WAL
connection; PostgreSQL: one statement or one read-only transaction) and sees
every commit acknowledged before it started. The pool does not know what a
connection is: the backend hands it its connections (or holders that
reconnect) and the queries that take them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, final

import trio

from agentik._errors import StoreClosedError

C = TypeVar("C")
T = TypeVar("T")


class Runner(Protocol[C]):
    """Runs a query on a connection in the worker thread, replacing the
    connection if it broke (a server restarted); returns the result and the
    connection to keep."""

    def __call__(self, query: Callable[[C], T], connection: C) -> tuple[T, C]: ...


@final
class ReaderPool(Generic[C]):
    def __init__(self, connections: list[C], runner: Runner[C] | None = None) -> None:
        self.connections = list(connections)
        """Every connection of the pool (the bundle closes them)."""
        self._free = list(range(len(connections)))
        self._runner = runner
        self._admit = trio.CapacityLimiter(len(connections))
        self._threads = trio.CapacityLimiter(len(connections))
        self._closed = False

    async def read(self, query: Callable[[C], T]) -> T:
        """Run ``query`` on a free connection in a worker thread."""
        async with self._admit:
            if self._closed:
                raise StoreClosedError("the storage bundle is closed; no more reads are possible")
            slot = self._free.pop()
            try:
                if self._runner is None:
                    return await trio.to_thread.run_sync(
                        query, self.connections[slot], limiter=self._threads
                    )
                result, self.connections[slot] = await trio.to_thread.run_sync(
                    self._runner, query, self.connections[slot], limiter=self._threads
                )
                return result
            finally:
                self._free.append(slot)

    def refuse(self) -> None:
        """Refuse reads from now on; the bundle closes the connections."""
        self._closed = True
