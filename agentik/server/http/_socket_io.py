"""The client's socket read directly: what ``trio.SocketStream`` does, with
the same checkpoints and errors, without its layers of wrappers (a few per
request add up: docs/performance.md, "the socket read and written directly").

Apart from the connection (``_connection``) so that the one path past trio's
stream, and the errors it raises as trio's, are in one place; the connection
writes the same way (``Connection._send_all``), with ``stream_error``.
"""

from __future__ import annotations

import errno
import socket

import trio

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


async def receive(sock: socket.socket) -> bytes:
    """The next bytes from the client (b"" at the end of its stream): what
    ``trio.SocketStream.receive_some`` does, with the same checkpoints and
    errors, without its layers of wrappers (a few per request add up)."""
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
