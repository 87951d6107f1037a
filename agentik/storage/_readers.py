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
from typing import Generic, TypeVar, final

import trio

from agentik._errors import StoreClosedError

C = TypeVar("C")
T = TypeVar("T")


@final
class ReaderPool(Generic[C]):
    def __init__(self, connections: list[C]) -> None:
        self._free = list(connections)
        self._admit = trio.CapacityLimiter(len(connections))
        self._threads = trio.CapacityLimiter(len(connections))
        self._closed = False

    async def read(self, query: Callable[[C], T]) -> T:
        """Run ``query`` on a free connection in a worker thread."""
        async with self._admit:
            if self._closed:
                raise StoreClosedError("the storage bundle is closed; no more reads are possible")
            connection = self._free.pop()
            try:
                return await trio.to_thread.run_sync(query, connection, limiter=self._threads)
            finally:
                self._free.append(connection)

    def refuse(self) -> None:
        """Refuse reads from now on; the bundle closes the connections."""
        self._closed = True
