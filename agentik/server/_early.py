"""The early forward: a request whose owner is known is relayed by the HTTP
engine right after its head, as bytes (``http.Relay``), before any ASGI
scope, guard, router or ``Forwarder`` sees it.

Why: through the app, a forwarded turn cost the forwarding node about what
the owner spent running it (docs/scale-out.md, "What the hop costs"): the
scope, the guard, the router, the proxy's ASGI messages, each piece of the
answer de-chunked and framed again. Here the owner's answer goes to the
client as it comes, its framing included; ``_answer_framing`` reads only
where it ends. Measured: the forwarding node's CPU a forwarded turn fell from
0.64 to 0.47 of a direct turn's (medians of 6 pairs, ``bench.forward``).

Which requests: a native conversation route (``/agentik/conversations/…``)
whose owner ``Forwarder`` knows, by the same key (caller, method, path):
remembered once forwarded (``Forwarder.owners``), or for a turn the shard
map's holder (``Forwarder.holder_of``). The caller comes from the request's
token here too (``Authenticator``, the guard's): the owner authenticates the
forwarded request itself, so this is not what keeps owners apart, but a
path names a different conversation for each owner (``alice`` and ``bob``
each have their ``demo``, in different shards), and a request with no valid
token is left to the guard (401) rather than sent on. A request that came
forwarded (the loop guard), has a body past ``[limits] max_body_bytes``, or
whose path or query is not UTF-8 once decoded is left to the app.

As the app's forward does (``_forward``): the client's fields but those of
its connection go on, with ``agentik-forwarded``; the answer's status,
fields and body come back as they are but the fields of the owner's
connection (its ``Date`` and ``Server`` too come as the owner wrote them); a
client that leaves closes the connection to the owner; an owner that is
unreachable before any byte of its answer, answers 307, or 503 with
``agentik-not-here``, or whose lease expires before it answered, is
forgotten for the route, and the request goes to the app (``EARLY_FAILED``
in its scope: the known owner is not tried again there), which asks who
owns the conversation now. An answer of which a byte went out is never
tried again. Each request is logged as the guard logs one, and counted.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Mapping
from typing import final

import trio

from agentik.server._answer_framing import UNTIL_CLOSE, AnswerHead
from agentik.server._forward import (
    EARLY_FAILED,
    FORWARDED,
    HOP_BY_HOP,
    NATIVE_ROUTES,
    NOT_HERE,
    NOT_SENT_ON,
    Forwarder,
    slashed_id,
)
from agentik.server._owners import Authenticator, Caller
from agentik.server._peers import BrokenOff, Unreachable
from agentik.server.http import RelayedRequest, Reply, url_text

log = logging.getLogger("agentik.server")

_FORWARDED = FORWARDED.encode()
_NOT_HERE = NOT_HERE.encode()
_NOT_RELAYED_BACK = HOP_BY_HOP - {b"transfer-encoding"}
"""Answer fields of the owner's connection. Its ``Transfer-Encoding`` stays:
the body goes on framed as the owner framed it."""
_FAILED = {EARLY_FAILED: True}


@final
class EarlyForward:
    """``http.Relay`` for the cluster: relays the requests of known owners."""

    __slots__ = ("_auth", "_counts", "_forwarder", "_limit", "_node")

    def __init__(
        self,
        forwarder: Forwarder,
        auth: Authenticator,
        counts: collections.Counter[str],
        *,
        body_limit: int,
    ) -> None:
        self._forwarder = forwarder
        self._auth = auth
        self._counts = counts
        """Responses by status class, as the guard counts them (``/metrics``)."""
        self._limit = body_limit
        self._node = forwarder.node

    def route(
        self, method: str, target: bytes, headers: list[tuple[bytes, bytes]]
    ) -> tuple[str, tuple[Caller, bytes, bytes], str] | None:
        """The known owner's URL, the route's key and the decoded path; None
        for the app to serve it."""
        if not target.startswith(NATIVE_ROUTES):
            return None
        authorization = None
        for name, value in headers:
            if name == b"authorization":
                authorization = value
            elif name == b"content-length":
                if not value.isdigit() or int(value) > self._limit:
                    return None  # the app refuses it (413)
            elif name == _FORWARDED:
                return None  # forwarded once: never again (the app's 307)
        caller = self._auth.caller(authorization)
        if caller is None:
            return None  # the guard's 401
        raw, _, query = target.partition(b"?")
        try:
            path = url_text(raw)
            if b"%" in query:
                url_text(query)  # the guard's check, before the app would refuse it
        except UnicodeDecodeError:
            return None  # the guard's 400 (``http.undecodable_url``)
        if slashed_id(raw):
            return None  # the guard's 400: the router would serve another id
        forwarder = self._forwarder
        key = (caller, method.encode(), raw)
        owner = forwarder.owners.get(key) or forwarder.holder_of(caller, method, path)
        if owner is None or forwarder.departed(owner):
            return None
        return owner, key, path

    async def relay(
        self, route: object, request: RelayedRequest, reply: Reply
    ) -> Mapping[str, object] | None:
        """Relay ``request`` to its known owner; ``EARLY_FAILED`` for the app if
        no byte of an answer came."""
        assert isinstance(route, tuple)
        owner, key, path = route
        began = time.perf_counter()
        progress = _Progress()
        forwarder = self._forwarder
        outcome: str | None = "lost its lease before answering"
        cancel = trio.CancelScope()  # by ``Forwarder._peers_changed``
        forwarder.watch(owner, cancel)
        fallback = False
        try:
            with cancel:
                outcome = await self._exchange(owner, request, reply, progress)
            if outcome is None:
                return None
            if cancel.cancelled_caught and progress.status:
                log.warning("forward owner=%s lost its lease mid-answer", owner)
                return None  # part of its answer went out: it ends unfinished
            fallback = True
        finally:
            forwarder.unwatch(owner, cancel)
            if not fallback:  # answered, or the client left: one line, as the guard's
                status = progress.status
                self._counts[f"{status // 100}xx" if status else "aborted"] += 1
                log.info(
                    "request method=%s path=%s status=%s ms=%.1f",
                    request.method,
                    path,
                    status or "-",
                    (time.perf_counter() - began) * 1000,
                )
        forwarder.owners.pop(key, None)
        log.info("forward owner=%s %s; asking who holds it now", owner, outcome)
        return _FAILED

    async def _exchange(
        self, owner: str, request: RelayedRequest, reply: Reply, progress: _Progress
    ) -> str | None:
        """None once the answer went out (whole, or broken off after its first
        byte), else why no byte of it came."""
        headers = [(n, v) for n, v in request.headers if n not in NOT_SENT_ON]
        headers.append((_FORWARDED, self._node))
        client = self._forwarder.client
        try:
            answer = await client.open_relay(
                owner, request.method.encode(), request.target, headers, request.body
            )
        except Unreachable as error:
            return f"unreachable ({error})"
        except BrokenOff as error:  # inside its head: nothing went to the client
            return f"broke off before answering ({error})"
        try:
            head = answer.head
            assert head is not None
            if head.status == 307:  # it moved between our ask and its own
                return "does not own it (307)"
            if head.status == 503 and any(n.lower() == _NOT_HERE for n, _ in head.fields):
                return "does not hold it now (503)"
            progress.status = head.status
            closes = head.framing == UNTIL_CLOSE
            out = client_head(head, closes=closes)
            if not answer.complete and not answer.body_came:
                # The owner sent its head alone (a stream's): so does this node.
                await reply.write(out, last=False, close=closes)
                out = b""
            try:
                while piece := await answer.next_piece():
                    if answer.complete:  # the last: with the rest, in one write
                        out += piece
                        break
                    await reply.write(out + piece, last=False, close=closes)
                    out = b""
            except BrokenOff as error:
                # Bytes went out: never retried; the engine ends the client's
                # connection, the answer unfinished, which is how it can tell.
                log.warning("forward owner=%s broke off its answer: %s", owner, error)
                return None
        finally:
            # Before the answer's end goes out: the client's next request may
            # come at once, and find this connection free for it.
            await client.release(answer)
        await reply.write(out, last=True, close=closes)
        return None


@final
class _Progress:
    """How far a relay got: the answer's status once its bytes began to go out."""

    __slots__ = ("status",)

    def __init__(self) -> None:
        self.status = 0


def client_head(head: AnswerHead, *, closes: bool) -> bytes:
    """The owner's answer head for the client: its status and fields, less
    those of the owner's connection (its ``Transfer-Encoding`` stays: the body
    is relayed as framed); ``Connection: close`` if the client's connection
    ends with it (a body the close ends)."""
    parts = [b"HTTP/1.1 %d %s\r\n" % (head.status, head.reason)]
    for name, value in head.fields:
        if name.lower() not in _NOT_RELAYED_BACK:
            parts.append(b"%s: %s\r\n" % (name, value))
    if closes:
        parts.append(b"connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)
