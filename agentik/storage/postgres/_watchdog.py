"""The client's own bound on each PostgreSQL call.

A server that stops answering (a frozen process, a paused VM, a network that
drops packets without a reset) is caught by nothing on its side:
``statement_timeout`` is a timer in the frozen server, and TCP keepalives are
answered by its kernel, which still runs. libpq puts no bound on a
statement. So agentik bounds each call itself: a call still waiting
``bound`` seconds after it began (in a writer batch: after its latest request
began) has its connection's socket shut down; libpq reads end-of-file at
once, and the call fails with an error saying the server did not answer.

``bound`` is the session's ``statement_timeout`` plus ``GRACE``: the server
cancels a statement that runs too long itself, with a clean error that keeps
the connection, and the watchdog acts only when that error does not come.
A session whose ``statement_timeout`` is off (0, chosen by the user) has no
bound, but for a hurry.

Once the storage's writer is cancelled (the bundle closing past its grace: a
shutdown, a deadline around the block), nobody waits for what a call would
return: ``hurry`` bounds every call, armed or to come, to ``CANCEL_GRACE``
more seconds, and nothing connects again (``connect`` refuses), so a frozen
server holds the cancellation no longer than that.

Invariants:
- the watchdog shuts down only the socket of a call that is still armed, and
  through its own duplicate of the descriptor, taken when the call was armed
  and closed when it is disarmed: a descriptor libpq closed meanwhile (and
  the kernel handed to someone else) is never touched;
- arming and disarming take one lock, and wake the watchdog thread only when
  it sleeps with nothing armed; the one thread per bundle sleeps until the
  earliest deadline;
- a call that was cut raises ``StoreError`` (a writer batch: ``BatchFailed``
  caused by that error), never retried on a new connection: the server did
  not answer, and asking again would double the wait.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from types import TracebackType
from typing import final

import psycopg

from agentik._errors import StoreError
from agentik.storage._writer import BatchFailed

log = logging.getLogger("agentik.storage")

GRACE = 2.0
"""Seconds past ``statement_timeout`` before agentik stops waiting: room for
the server's own cancellation to arrive over a slow network."""

CANCEL_GRACE = 0.25
"""Seconds a call may still wait once the storage's writer is cancelled
(``Watchdog.hurry``): a server that answers at all answers a COMMIT in
milliseconds, so a batch in flight still commits, and a frozen one holds the
shutdown no longer than this."""


@final
class Watchdog:
    """Cuts the connections of calls that outlive ``bound``; one per bundle."""

    def __init__(self) -> None:
        self.bound: float | None = None
        """Seconds a call may wait for the server; None: no bound (set once the
        writer's session tells its ``statement_timeout``)."""
        self._condition = threading.Condition()
        self._armed: set[Watch] = set()
        self._wakes_at = math.inf
        self._hurry_until = math.inf
        """Once ``hurry`` was called: when every call is cut, whatever its bound."""
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name="agentik-postgres-watchdog", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify()
        if self._thread is not None:
            self._thread.join()

    def hurry(self, seconds: float = CANCEL_GRACE) -> None:
        """From any thread: cut every call still waiting ``seconds`` from now,
        and bound the calls to come to the same moment (the bundle is going
        away: its writer was cancelled)."""
        with self._condition:
            until = time.monotonic() + seconds
            if until >= self._hurry_until:
                return
            self._hurry_until = until
            for watch in self._armed:
                watch.deadline = min(watch.deadline, until)
            if until < self._wakes_at:
                self._condition.notify()

    @property
    def hurried(self) -> bool:
        """``hurry`` was called: the bundle is going away, so nothing connects
        again (a connection attempt to a frozen server waits ``connect_timeout``)."""
        return self._hurry_until < math.inf

    def _deadline(self, bound: float | None) -> float:
        """A call's deadline if it began now (under the lock)."""
        limit = math.inf if bound is None else time.monotonic() + bound
        return min(limit, self._hurry_until)

    def watch(self, connection: psycopg.Connection) -> Watch:
        """A context manager around one call on ``connection`` (in its thread)."""
        return Watch(self, connection)

    def _run(self) -> None:
        with self._condition:
            while not self._stopped:
                now = time.monotonic()
                wakes_at = math.inf
                for watch in list(self._armed):
                    if watch.deadline <= now:
                        self._armed.discard(watch)
                        watch.cut(hurried=self._hurry_until <= now)
                    else:
                        wakes_at = min(wakes_at, watch.deadline)
                self._wakes_at = wakes_at
                self._condition.wait(None if wakes_at == math.inf else wakes_at - now)


@final
class Watch:
    """One call on one connection. ``touch`` restarts its clock (a writer batch,
    at each request); leaving the block disarms it, and turns the error of a
    call that was cut into one that says so."""

    __slots__ = (
        "_bound",
        "_connection",
        "_descriptor",
        "_hurried",
        "_watchdog",
        "deadline",
        "was_cut",
    )

    def __init__(self, watchdog: Watchdog, connection: psycopg.Connection) -> None:
        self._watchdog = watchdog
        self._connection = connection
        self._bound = watchdog.bound
        self._descriptor = -1
        self._hurried = False
        self.deadline = math.inf
        self.was_cut = False

    def __enter__(self) -> Watch:
        # Unbounded calls are armed too (for ``hurry``), but not by an
        # unstarted watchdog: there is nobody to cut them.
        watchdog = self._watchdog
        if self._bound is None and watchdog._thread is None:
            return self
        try:
            self._descriptor = os.dup(self._connection.fileno())
        except (psycopg.Error, OSError):
            return self  # no socket: the call fails at once by itself
        with watchdog._condition:
            self.deadline = watchdog._deadline(self._bound)
            watchdog._armed.add(self)
            if self.deadline < watchdog._wakes_at:
                watchdog._condition.notify()
        return self

    def touch(self) -> None:
        if self._descriptor < 0:
            return
        with self._watchdog._condition:
            self.deadline = self._watchdog._deadline(self._bound)

    def cut(self, *, hurried: bool = False) -> None:
        """In the watchdog thread, under its lock: end the call's wait."""
        self.was_cut = True
        self._hurried = hurried
        if hurried:
            log.warning("PostgreSQL did not answer as the storage closed: closing its connection")
        else:
            log.warning(
                "PostgreSQL did not answer within %g s: closing its connection", self._bound
            )
        try:
            sock = socket.socket(fileno=self._descriptor)
        except OSError:
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already shut: the call ends either way
        finally:
            sock.detach()  # the descriptor stays ours, closed when the call is disarmed

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._descriptor < 0:
            return
        with self._watchdog._condition:
            self._watchdog._armed.discard(self)
        os.close(self._descriptor)
        self._descriptor = -1
        if not self.was_cut:
            return
        unanswered = StoreError(
            "PostgreSQL did not answer before the storage was closing (its writer cancelled);"
            " agentik closed the connection"
            if self._hurried
            else f"PostgreSQL did not answer within {self._bound:g} s;"
            " agentik closed the connection"
        )
        if isinstance(error, BatchFailed):
            unanswered.__cause__ = error.__cause__
            raise BatchFailed(doubt=error.doubt) from unanswered
        if isinstance(error, psycopg.Error):
            raise unanswered from error
