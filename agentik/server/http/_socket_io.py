"""The client's socket, read and written directly: what ``trio.SocketStream``
does, with the same checkpoints and errors, without its layers of wrappers
(a few per request add up: docs/performance.md, "the socket read and
written directly").

``SocketIO`` is the base of ``_connection.Connection``: the socket, and
every write to it under one lock (the app's response, ``100 Continue``, a
refusal the connection sends on its own), kept apart from the connection's
state machine. What a write means stays the connection's: a response
written whole settles its cycle (``_settle``, before the write's
checkpoint), a failed write ends the connection (``_end``).
"""

from __future__ import annotations

import abc
import contextlib
import errno
import socket

import trio

from agentik.server.http._cycle import Cycle
from agentik.server.http._framing import STATUS_LINES, ResponseHeaders

MAX_RECV = 65536
"""Bytes asked of the socket per read."""
GONE = (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError)
"""A socket the client left, or one being written by another task."""
_CLOSED_ERRNOS = frozenset({errno.EBADF, errno.ENOTSOCK})


def stream_error(error: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    """A socket's error as ``trio.SocketStream`` raises it."""
    if error.errno in _CLOSED_ERRNOS:
        return trio.ClosedResourceError("this socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {error}")


class SocketIO(abc.ABC):
    """The client's socket, read directly and written under one lock
    (``Connection``'s base)."""

    __slots__ = ("_lock", "_sock", "_stream", "response_headers")

    def __init__(self, sock: socket.socket, response_headers: ResponseHeaders) -> None:
        self._sock = sock
        """The client's socket (non-blocking), read and written directly on the hot path."""
        self._stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        """The same socket through trio, for the rest (waiting to write, EOF, closing)."""
        self._lock = trio.Lock()
        """Held while writing: an app's response and a 408 never interleave."""
        self.response_headers = response_headers
        """The headers every response ends its head with (``ResponseHeaders``)."""

    @abc.abstractmethod
    def _settle(self, cycle: Cycle) -> None:
        """``cycle``'s response is written whole (the connection's)."""

    @abc.abstractmethod
    def _end(self) -> None:
        """End the connection whole (the connection's)."""

    async def _receive(self) -> bytes:
        """The next bytes from the client (b"" at the end of its stream): what
        ``trio.SocketStream.receive_some`` does, with the same checkpoints and
        errors, without its layers of wrappers (a few per request add up)."""
        sock = self._sock
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            data = sock.recv(MAX_RECV)
        except BlockingIOError:
            pass  # the usual case: wait for the client
        except OSError as error:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise stream_error(error) from error
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return data
        while True:
            await trio.lowlevel.wait_readable(sock)  # ClosedResourceError once closed
            try:
                return sock.recv(MAX_RECV)
            except BlockingIOError:
                pass
            except OSError as error:
                raise stream_error(error) from error

    async def write(self, data: bytes, last: Cycle | None = None) -> None:
        """Write to the client; a client that is gone ends the connection.
        ``last``: the cycle whose response ``data`` ends, settled as soon as
        it is written, before the checkpoint, so that the next request,
        which a client sends the moment it has the answer, finds the
        connection ready instead of waiting for this task's next step."""
        lock = self._lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        written = False
        try:
            await self._send_all(data, last)
            written = True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            lock.release()
            if not written:  # gone, or cancelled part-way: the framing is lost
                self._end()

    async def _send_all(self, data: bytes, last: Cycle | None) -> None:
        """``trio.SocketStream.send_all``, with the same checkpoints and errors:
        the socket's buffer takes a response whole, so the first try is direct,
        and only the rest of a large one goes through trio's waiting."""
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as error:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise stream_error(error) from error
        if sent == len(data):
            if last is not None:
                self._settle(last)
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await self._stream.send_all(memoryview(data)[sent:])
            if last is not None:
                self._settle(last)

    async def send_continue(self, cycle: Cycle) -> None:
        cycle.expect_continue = False
        await self.write(b"HTTP/1.1 100 Continue\r\n" + self.response_headers() + b"\r\n")

    async def _send_refusal(self, status: int, headers: bytes = b"", body: bytes = b"") -> None:
        """A response of ``status`` (no body unless given), that closes the connection."""
        data = (
            STATUS_LINES[status]
            + b"content-length: %d\r\nconnection: close\r\n" % len(body)
            + headers
            + self.response_headers()
            + b"\r\n"
            + body
        )
        with trio.move_on_after(1):  # it fits in the socket's buffer, unless the client is stuck
            with contextlib.suppress(*GONE):
                async with self._lock:  # after a 100 Continue being written, not inside it
                    await self._stream.send_all(data)
