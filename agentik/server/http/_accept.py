"""Accepting connections in bursts: ``trio.serve_listeners`` for listening sockets,
taking every waiting connection at once rather than one per schedule point.

``trio.SocketListener.accept`` is a schedule point after each connection it
accepts, so the accept loop takes one connection per scheduler round. When a
thousand clients connect at once to a busy server, each round also runs every
turn that is ready, and the last client waited seconds before its connection
was even accepted (p99 7.4 s over HTTP against 0.9 s in process, at 1,000
clients in ``bench/http_load.py``). Here each wake-up accepts up to
``ACCEPTS_PER_ROUND`` connections before yielding.

At most ``max_connections`` connections are open at once, and ``reserve``
more: a connection accepted while ``max_connections`` are open takes a
reserve slot, and its handler is told so (it serves only other nodes'
requests there: ``_settings.PeerReserve``). A slot taken is the same kind
until its connection closes. With both full the loop accepts nothing more
until one closes, so further clients wait in the kernel's listen backlog
(their connect succeeds, their request waits) while the open connections go
on undisturbed; when the backlog is full too, the kernel drops new
connection attempts and clients retry them.

Errors are handled as trio's listener and ``serve_listeners`` do: the routine
ones (a connection reset before it was accepted) are skipped; running out of
file descriptors or memory is logged and retried after 100 ms; anything else
is raised.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import NoReturn, final

import trio

log = logging.getLogger("agentik.server")

ACCEPTS_PER_ROUND = 100
"""Connections taken per wake-up; then the loop yields to the work they bring."""

_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""The system is out of something: wait, then accept again."""
_RETRY_AFTER = 0.1

_IGNORABLE_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EPERM",  # Linux, a connection denied by the firewall
        "ECONNABORTED",  # reset before it was accepted
        "EPROTO",
        "ENETDOWN",
        "ENOPROTOOPT",
        "EHOSTDOWN",
        "ENONET",
        "EHOSTUNREACH",
        "EOPNOTSUPP",
        "ENETUNREACH",
    )
    if hasattr(errno, name)
)
"""What trio's ``SocketListener`` skips: that connection is gone, not the listener."""

Handler = Callable[[socket.socket, "Slot"], Awaitable[object]]
"""Serves one accepted connection: a non-blocking socket, closed once it
returns, and the slot it holds."""


@final
class Slots:
    """``regular`` slots and ``reserve`` more: a connection takes a regular
    one while any is free, else a reserve one. A client's connection on a
    reserve slot may wait for a regular one (``wait_for_regular``), as it
    would have waited in the listen backlog, while no more than half the
    reserve waits so: the rest stays the peers'."""

    __slots__ = ("_lot", "_regular", "_reserve", "_total", "regular_taken")

    def __init__(self, regular: int, reserve: int) -> None:
        self._total = trio.Semaphore(regular + reserve)
        self._regular = regular
        self._reserve = reserve
        self.regular_taken = 0
        self._lot = trio.lowlevel.ParkingLot()
        """Clients' connections on reserve slots waiting for a regular one."""

    async def take(self) -> Slot:
        """Wait for a free slot and take it: a regular one while any is free."""
        try:
            self._total.acquire_nowait()
        except trio.WouldBlock:
            await self._total.acquire()  # at the bound: until a connection closes
        if self.regular_taken < self._regular:
            self.regular_taken += 1
            return Slot(self, reserved=False)
        return Slot(self, reserved=True)  # every regular one is taken: a reserve one

    @property
    def crowded(self) -> bool:
        """Every regular slot is taken."""
        return self.regular_taken >= self._regular

    def give_back(self, reserved: bool) -> None:
        if not reserved:
            self._regular_freed()
        self._total.release()

    def _regular_freed(self) -> None:
        """A regular slot was given up: to the longest waiting client, if any
        (its reserve slot becomes the regular one), else free."""
        if self._lot:
            self._lot.unpark()
        else:
            self.regular_taken -= 1

    async def wait_for_regular(self) -> bool:
        """For a client's connection on a reserve slot: wait until a regular
        slot is handed to it (True), unless half the reserve waits already
        (False: it is turned away, so peers keep room)."""
        if len(self._lot) >= self._reserve // 2:
            return False
        await self._lot.park()
        return True

    def move_to_reserve(self) -> bool:
        """Every regular slot is taken and a reserve one is free: a regular
        slot becomes a reserve one (its connection a peer's), and the next
        client gets it; whether it moved."""
        taken = self._regular + self._reserve - self._total.value
        if not self.crowded or taken - self.regular_taken >= self._reserve:
            return False
        self._regular_freed()
        return True


@final
class Slot:
    """The slot one connection holds: regular, or of the reserve."""

    __slots__ = ("_slots", "reserved")

    def __init__(self, slots: Slots | None, reserved: bool) -> None:
        self._slots = slots
        self.reserved = reserved

    @property
    def crowded(self) -> bool:
        """A regular slot while clients hold every regular one (``to_reserve``)."""
        return not self.reserved and self._slots is not None and self._slots.crowded

    def to_reserve(self) -> bool:
        """For a peer's connection on a regular slot: move to the reserve when
        clients need every regular slot (``Slots.move_to_reserve``); whether
        it holds a reserve slot now. A peer's kept-alive connections, opened
        while slots were free, would otherwise hold regular slots idle while
        clients past the bound are turned away."""
        if not self.reserved and self._slots is not None and self._slots.move_to_reserve():
            self.reserved = True
        return self.reserved

    async def to_regular(self) -> bool:
        """For a client's connection on a reserve slot: wait for a regular
        slot (``Slots.wait_for_regular``); whether it holds one now."""
        if not self.reserved:
            return True
        if self._slots is None or not await self._slots.wait_for_regular():
            return False
        self.reserved = False
        return True

    def give_back(self) -> None:
        if self._slots is not None:
            self._slots.give_back(self.reserved)


UNBOUNDED = Slot(None, reserved=False)
"""Every connection's slot when nothing bounds them (it never changes)."""


async def serve_sockets(
    handler: Handler,
    sockets: list[socket.socket],
    handler_nursery: trio.Nursery,
    *,
    max_connections: int | None = None,
    reserve: int = 0,
) -> NoReturn:
    """Run ``handler(sock, slot)`` in ``handler_nursery`` for each
    connection to any of ``sockets`` (listening already), with at most
    ``max_connections`` (None: no bound) handlers running, and ``reserve``
    more whose slot says they are past it; closes the sockets when cancelled."""
    if max_connections is not None and max_connections < 1:
        raise ValueError(f"max_connections must be at least 1, got {max_connections}")
    if reserve < 0:
        raise ValueError(f"reserve must be at least 0, got {reserve}")
    slots = Slots(max_connections, reserve) if max_connections is not None else None
    async with trio.open_nursery() as nursery:
        for sock in sockets:
            nursery.start_soon(_serve_one, handler, sock, handler_nursery, slots)
    raise AssertionError("unreachable: the accept loops never return")


async def _serve_one(
    handler: Handler,
    sock: socket.socket,
    handler_nursery: trio.Nursery,
    slots: Slots | None,
) -> None:
    with trio.socket.from_stdlib_socket(sock) as listener:  # closed on the way out
        while True:
            await trio.lowlevel.wait_readable(listener)
            for _ in range(ACCEPTS_PER_ROUND):
                slot = UNBOUNDED if slots is None else await slots.take()
                try:
                    connection, _ = sock.accept()
                except OSError as error:
                    slot.give_back()  # this slot took no connection
                    if isinstance(error, BlockingIOError):
                        break
                    if error.errno in _IGNORABLE_ERRNOS:
                        continue
                    if error.errno not in _CAPACITY_ERRNOS:
                        raise
                    log.error(
                        "accept returned %s (%s); retrying in %s seconds",
                        errno.errorcode[error.errno],
                        os.strerror(error.errno),
                        _RETRY_AFTER,
                    )
                    await trio.sleep(_RETRY_AFTER)
                    break
                connection.setblocking(False)
                handler_nursery.start_soon(_run_handler, handler, connection, slot)


async def _run_handler(handler: Handler, sock: socket.socket, slot: Slot) -> None:
    try:
        await handler(sock, slot)
    finally:
        slot.give_back()
        trio.lowlevel.notify_closing(sock)  # a task still waiting on it is woken
        sock.close()
