"""A small pool of read-only connections, used from worker threads.

A ``CapacityLimiter`` sized to the pool guarantees a free connection for every
task it admits, so reads never block the event loop nor wait on a lock. Each
read is one short read transaction; WAL lets it run while the writer commits,
and it sees every commit acknowledged before it started.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, final

import apsw
import trio

from agentik._errors import StoreClosedError

T = TypeVar("T")


@final
class ReaderPool:
    def __init__(self, connections: list[apsw.Connection]) -> None:
        self._free = list(connections)
        self._admit = trio.CapacityLimiter(len(connections))
        self._threads = trio.CapacityLimiter(len(connections))
        self._closed = False

    async def read(self, query: Callable[[apsw.Connection], T]) -> T:
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
