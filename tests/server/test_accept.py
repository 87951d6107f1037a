"""serve_sockets: a burst of connections gets in at once; accept errors as trio handles them."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from agentik.server.http._accept import Slot, serve_sockets


class Rounds(trio.abc.Instrument):
    """Counts scheduler rounds (each ends with a check for I/O)."""

    def __init__(self) -> None:
        self.count = 0

    def after_io_wait(self, timeout: float) -> None:
        self.count += 1


def listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


def script_accept_errors(monkeypatch: pytest.MonkeyPatch, *errors: OSError) -> None:
    """The next accept() calls (of any socket: only the server accepts here)
    raise ``errors``, one each, then accept as usual."""
    accept = socket.socket.accept
    pending = list(errors)

    def scripted(self: socket.socket) -> tuple[socket.socket, object]:
        if pending:
            raise pending.pop(0)
        return accept(self)

    monkeypatch.setattr(socket.socket, "accept", scripted)


@pytest.fixture
def clients() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for client in opened:
        client.close()


async def serve_until_accepted(
    sock: socket.socket, clients: list[socket.socket], count: int
) -> int:
    """Connect ``count`` clients (they wait in the backlog), serve, and return
    the scheduler rounds it took until every connection reached its handler."""
    for _ in range(count):
        clients.append(socket.create_connection(sock.getsockname()))
    rounds = Rounds()
    accepted: list[socket.socket] = []
    all_in = trio.Event()

    async def handler(connection: socket.socket, slot: Slot) -> None:
        accepted.append(connection)
        if len(accepted) == count:
            all_in.set()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        trio.lowlevel.add_instrument(rounds)
        nursery.start_soon(serve_sockets, handler, [sock], nursery)
        await all_in.wait()
        trio.lowlevel.remove_instrument(rounds)
        nursery.cancel_scope.cancel()
    return rounds.count


async def test_a_burst_of_connections_is_accepted_in_a_few_rounds(
    clients: list[socket.socket],
) -> None:
    sock = listening()
    # trio's own listener takes one connection per round: 120 rounds here;
    # serve_sockets takes up to 100 per round. (120 stays within the smallest
    # listen backlog a kernel may impose, 128, so connecting cannot block.)
    assert await serve_until_accepted(sock, clients, 120) <= 10
    assert sock.fileno() == -1  # the listening socket is closed when serving stops


async def test_a_connection_reset_before_accept_is_skipped(
    clients: list[socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    script_accept_errors(monkeypatch, ConnectionAbortedError(errno.ECONNABORTED, "aborted"))
    await serve_until_accepted(listening(), clients, 2)


async def test_running_out_of_descriptors_is_logged_and_retried(
    clients: list[socket.socket],
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script_accept_errors(monkeypatch, OSError(errno.EMFILE, "too many open files"))
    began = trio.current_time()
    await serve_until_accepted(listening(), clients, 2)
    assert trio.current_time() - began >= 0.1
    assert [r.getMessage() for r in caplog.records] == [
        "accept returned EMFILE (Too many open files); retrying in 0.1 seconds"
    ]


async def test_another_accept_error_is_raised(
    clients: list[socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    script_accept_errors(monkeypatch, OSError(errno.EINVAL, "invalid"))
    sock = listening()
    clients.append(socket.create_connection(sock.getsockname()))

    async def handler(connection: socket.socket, slot: Slot) -> None:
        raise AssertionError("no connection was accepted")

    with pytest.raises(ExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            await serve_sockets(handler, [sock], nursery)
    assert caught.group_contains(OSError, match=r"^\[Errno 22\] invalid$")
