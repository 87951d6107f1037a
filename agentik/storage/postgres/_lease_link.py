"""The node lease's own connection to PostgreSQL (``agentik-lease``), apart
from the writer's and the readers', so a busy writer never delays a renewal.

Opened on first use, and again once it is closed or broken (set up for the
lease each time: ``_lease_sql.lease_session``); each call on it bounded by
the watchdog (``_watchdog``). One thread uses it at a time (``using``): a
worker thread of the loop's calls, one at a time (``db``), or the lease's
keep-alive thread (``call_held``, under ``using``: ``_leases``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar, final

import psycopg
import trio

from agentik._errors import StoreError
from agentik.storage.postgres import _lease_sql as sql
from agentik.storage.postgres._watchdog import Watchdog

T = TypeVar("T")


@final
class LeaseLink:
    """The lease's connection, and the one way to call the database on it."""

    __slots__ = ("_calls", "_connect", "_lease", "_limiter", "connection", "using")

    def __init__(
        self, connect: Callable[[], psycopg.Connection], lease: float, watchdog: Watchdog
    ) -> None:
        self._connect = connect
        self._lease = lease
        self._calls = watchdog
        """Bounds each call on the lease's connection (``_watchdog``)."""
        self.connection: psycopg.Connection | None = None
        self._limiter = trio.CapacityLimiter(1)
        self.using = threading.Lock()
        """Held by the thread that uses the connection: a worker thread of the
        loop's calls (one at a time: ``_limiter``) or the keep-alive thread."""

    def call(self, operation: Callable[..., T], *args: object) -> T:
        with self.using:
            return self.call_held(operation, *args)

    def call_held(self, operation: Callable[..., T], *args: object) -> T:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            if connection is not None:
                connection.close()
            connection = self.connection = self._connect()
            try:
                sql.lease_session(connection, self._lease)
            except psycopg.Error:
                connection.close()
                raise
        with self._calls.watch(connection):
            return operation(connection, *args)

    async def db(self, operation: Callable[..., T], *args: object) -> T:
        """``operation(connection, *args)`` in a worker thread, one at a time."""
        try:
            return await trio.to_thread.run_sync(self.call, operation, *args, limiter=self._limiter)
        except psycopg.Error as error:
            raise StoreError(f"the node lease's database call failed: {error}") from error

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
