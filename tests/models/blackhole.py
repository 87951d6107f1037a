"""An address on 127.0.0.1 whose connects never finish: a listening socket with
a backlog of 0 whose one queued connection is never accepted, so the kernel
drops every later SYN (as a firewall that drops packets would). A test's
connect then waits until its own timeout, not for a refusal."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def blackholed_port() -> Iterator[int]:
    """A port on 127.0.0.1 where a connect hangs, while the block lasts."""
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port: int = listener.getsockname()[1]
        filler.connect(("127.0.0.1", port))  # fills the accept queue for good
        yield port
