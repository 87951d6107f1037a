"""Requests the engine relays to another server as they are, decided right
after their head is parsed: no ASGI scope, no app, and the answer written
to the client as the relay gets it (``serve(..., relay=…)``).

Why: a node of a cluster that gets a request for a conversation another node
owns forwards it (docs/scale-out.md). Through the app, that hop cost about
as much CPU as the turn: a scope, the guard, the router, the proxy's ASGI
messages, a log line built from the scope. A ``Relay`` sees the head (method,
target, fields) and answers at once whether it takes the request; the
engine then reads the body as it frames any body, and the relay sends both
on and writes the answer's bytes (``Reply.write``), head included: they
reach the client as written, so the relay frames them.

Invariants:
- A relay sees what the engine parsed (the head's fields, the body without
  its framing), never the client's raw bytes: a pipelined request that
  follows is parsed, and answered, after this one (no smuggling).
- Only what the engine can hand on whole is offered: HTTP/1.1, kept alive,
  no ``Expect: 100-continue``, no ``Transfer-Encoding`` (a body of known
  length). The rest is served by the app, as is every request a relay does
  not take.
- ``Relay.relay`` returning a mapping (nothing was written) means the app
  serves the request after all, the body read again, with the mapping's
  entries added to its scope. Once a byte was written the relay is the
  answer: if it ends unfinished, so does the connection.
- A client that leaves ends the relay as it ends an app: its task is
  cancelled.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, final

import trio

from agentik.server.http._framing import Message, Receive

if TYPE_CHECKING:
    from agentik.server.http._cycle import Cycle
    from agentik.server.http._h1 import RequestHead

log = logging.getLogger("agentik.server")


@final
class RelayedRequest:
    """A request as the engine parsed it, to be sent on."""

    __slots__ = ("body", "headers", "method", "target")

    def __init__(
        self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        self.method = method
        self.target = target
        """The path and query as the client sent them."""
        self.headers = headers
        """Names lower-cased, in order, the connection's own included."""
        self.body = body


class Reply(Protocol):
    """Where a relay writes its answer: bytes for the client's connection."""

    async def write(self, data: bytes, *, last: bool, close: bool = False) -> None:
        """Write ``data`` (the first call: starting with the status line);
        ``last``: the answer is whole with it; ``close``: the connection
        ends after this answer (said on the first call)."""
        ...


class Relay(Protocol):
    """Takes requests before the app (``serve(..., relay=…)``)."""

    def route(
        self, method: str, target: bytes, headers: list[tuple[bytes, bytes]]
    ) -> object | None:
        """Whether to relay this request, from its head alone: what ``relay``
        needs to (its route), or None for the app to serve it. Called for
        every request the engine can relay, so it must be cheap."""
        ...

    async def relay(
        self, route: object, request: RelayedRequest, reply: Reply
    ) -> Mapping[str, object] | None:
        """Send ``request`` on and its answer to ``reply``: None once answered
        (or ended); otherwise nothing was written, and the app serves the
        request, with these entries added to its scope."""
        ...


async def relay_request(
    relay: Relay, route: object, head: RequestHead, cycle: Cycle
) -> tuple[Mapping[str, object], bytes] | None:
    """Read the request's body as the engine framed it, and relay it: None
    once answered (or the client left, or the relay failed), else the scope
    entries and the body for the app, which serves it after all."""
    chunks: list[bytes] = []
    while True:
        message = await cycle.receive()
        if message["type"] != "http.request":
            return None  # the client left
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    request = RelayedRequest(head.method, head.target, head.headers, body)
    try:
        extra = await relay.relay(route, request, cycle)
    except Exception:
        log.exception("the relay failed on %s %s", head.method, head.target[:200])
        return None
    return None if extra is None else (extra, body)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` giving ``body`` (read whole already) once, then ``receive``'s own."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        await trio.lowlevel.checkpoint()
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
