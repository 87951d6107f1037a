"""The deadlines of one HTTP/1.1 connection: keep-alive, request head, request body.

A connection is in one phase at a time, and each phase but one has a deadline:

=========  ==============================================  =======================
phase      from                                            deadline
=========  ==============================================  =======================
IDLE       accepted, or the last response done             ``keep_alive_timeout``
HEAD       the first byte of a request head                ``header_timeout``
BODY       the head, while its body is still coming        ``body_timeout`` + 1 s per
                                                           ``body_min_rate`` bytes
BUSY       the body complete: the app is answering         none
ENDED      the connection is over                          none
=========  ==============================================  =======================

That is Apache's mod_reqtimeout (``header=…, body=…,MinRate=…``): a client
that sends its request slower than that is cut off, so a slow client cannot
hold a connection, while a large body sent at a reasonable rate gets the time
it needs. The app's own time (BUSY) has no deadline here: a long turn or
stream is never cut off by the connection.

The phase changes several times per request, so changing it only records
it. One watcher task per connection sleeps until the deadline it last saw
and, on waking, checks the phase and deadline now in force: it acts if one
has passed, else sleeps again. A deadline is pushed into the sleeping cancel
scope only when it is *earlier* than the one the watcher sleeps to, which on
the hot path is never (a response done sets a keep-alive deadline later than
the last one), so a keep-alive connection costs one wake-up per timeout, not
per request.

Invariants: at most one watcher per connection, ended with the connection
(``end``); the watcher acts only in IDLE, HEAD or BODY, once their deadline
has passed or, in IDLE and HEAD, once the server shuts down; BUSY is never
cut off (shutdown waits for the response; the connection, idle again, then
closes at once).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Awaitable, Callable
from typing import final

import attrs
import trio


@attrs.frozen(kw_only=True)
class ConnectionLimits:
    """How long a client may take to send a request, and how many connections
    may be open at once (``[limits]`` in agentik.toml; docs/server.md)."""

    header_timeout: float = 10.0
    """Seconds from a request head's first byte until it is complete."""
    body_timeout: float = 20.0
    """Seconds for a request body, counted from the end of its head..."""
    body_min_rate: float = 500.0
    """...plus one second for each this many bytes of it received."""
    max_connections: int = 1000
    """Open connections; past it the server accepts no more until one closes."""


class Phase(enum.Enum):
    IDLE = "idle"
    HEAD = "head"
    BODY = "body"
    BUSY = "busy"
    ENDED = "ended"


# The members as module globals: reading ``Phase.IDLE`` costs a descriptor call
# in Python 3.11, a dozen times per request here; a global costs almost nothing.
IDLE, HEAD, BODY, BUSY, ENDED = Phase.IDLE, Phase.HEAD, Phase.BODY, Phase.BUSY, Phase.ENDED

Expire = Callable[[bool], Awaitable[None]]
"""Ends the connection; True when a request was too slow (answer 408 if possible)."""


@final
class ConnectionTimer:
    """A connection's phase and the watcher that enforces its deadline. The
    connection reports where it is: ``restart`` when it goes idle, ``stop``
    when a request head is complete, and each read (``arrived`` before it is
    handled, ``handled`` after)."""

    __slots__ = (
        "_body_bytes",
        "_body_started",
        "_deadline",
        "_expire",
        "_keep_alive",
        "_limits",
        "_phase",
        "_scope",
        "_terminated",
    )

    def __init__(
        self,
        keep_alive: float,
        limits: ConnectionLimits,
        terminated: trio.Event,
        expire: Expire,
    ) -> None:
        self._keep_alive = keep_alive
        self._limits = limits
        self._terminated = terminated
        """Set when the server shuts down."""
        self._expire = expire
        self._phase = IDLE
        self._deadline = math.inf
        self._body_started = 0.0
        self._body_bytes = 0
        self._scope: trio.CancelScope | None = None
        """The watcher's sleep, once the watcher is started."""

    @property
    def phase(self) -> Phase:
        return self._phase

    def restart(self, nursery: trio.Nursery) -> None:
        """The connection went idle (accepted, or a response is done): close it
        ``keep_alive`` from now. Starts the watcher in ``nursery`` the first time."""
        if self._phase is ENDED:
            return
        now = trio.current_time()  # shutting down: an idle connection closes now
        self._phase = IDLE
        self._deadline = deadline = now if self._terminated.is_set() else now + self._keep_alive
        scope = self._scope
        if scope is None:
            self._scope = trio.CancelScope(deadline=deadline)
            nursery.start_soon(self._watch)
        elif deadline < scope.deadline:  # not on the hot path: the last deadline was earlier
            scope.deadline = deadline

    def stop(self) -> bool:
        """A request head is complete: no deadline until ``handled`` says its
        body is still coming, or the connection goes idle again. False if the
        connection was already due to close: that request must not start."""
        phase = self._phase
        if phase is IDLE and trio.current_time() >= self._deadline:
            return False  # due to close (``arrived``): the watcher cuts it
        if phase is not ENDED:
            self._phase = BUSY
            self._deadline = math.inf
        return True

    def arrived(self, size: int) -> None:
        """``size`` bytes were read and are about to be handled."""
        phase = self._phase
        if phase is IDLE and trio.current_time() >= self._deadline:
            # Due to close (shutting down, or keep-alive over) and the watcher
            # has not run yet: these bytes start no request; it cuts at once.
            return
        if phase is IDLE:
            # The first bytes of a request. Its deadline is set by ``handled``,
            # only if they are not the whole head (which they usually are).
            self._phase = HEAD
            self._deadline = math.inf
        elif phase is BODY:
            self._body_bytes += size
            self._deadline = (
                self._body_started
                + self._limits.body_timeout
                + self._body_bytes / self._limits.body_min_rate
            )  # later than before: the watcher finds it when it wakes

    def handled(self, receiving_body: bool) -> None:
        """A read was handled; ``receiving_body``: a request's body is still coming."""
        phase = self._phase
        if phase is HEAD:
            if self._deadline == math.inf:  # the head began with this read
                self._move(HEAD, trio.current_time() + self._limits.header_timeout)
        elif receiving_body:
            if phase is BUSY:
                self._body_started = now = trio.current_time()
                self._body_bytes = 0
                self._move(BODY, now + self._limits.body_timeout)
        elif phase is BODY:
            self._phase = BUSY
            self._deadline = math.inf

    def end(self) -> None:
        """The connection is over: the watcher returns without acting."""
        self._phase = ENDED
        if self._scope is not None:
            self._scope.cancel()

    def _move(self, phase: Phase, deadline: float) -> None:
        self._phase = phase
        self._deadline = deadline
        scope = self._scope
        if scope is not None and deadline < scope.deadline:
            scope.deadline = deadline

    async def _watch(self) -> None:
        terminated = self._terminated
        while True:
            assert self._scope is not None
            with self._scope:
                if terminated.is_set():
                    await trio.sleep_forever()  # only a deadline wakes it now
                else:
                    await terminated.wait()
            phase = self._phase
            if phase is ENDED:
                return
            due = trio.current_time() >= self._deadline
            if phase is IDLE and (due or terminated.is_set()):
                await self._expire(False)
                return
            if phase is HEAD and (due or terminated.is_set()):
                await self._expire(due)
                return
            if phase is BODY and due:
                await self._expire(True)
                return
            # Busy, or the deadline moved since this sleep began: sleep until
            # the one in force (infinite while busy; restart() then sets it).
            self._scope = trio.CancelScope(deadline=self._deadline)
