"""Forwarding inside the cluster: any node answers any request.

Several nodes on one database (docs/scale-out.md): a request for a
conversation another live node owns raises ``Redirect`` in its handler, before
any byte of the response. With ``[cluster] forward`` on, the app's handler
for it (``order_forward``) does not answer 307 but leaves the owner's URL in
the request's ``ForwardOrder``; ``Forwarder``, the ASGI layer around the
routes, then proxies the request there (its method, path, query, body and
headers, the client's credentials included, so the owner scopes it to the
same owner) and streams the owner's answer back as it comes, status and
headers as they are. A client that leaves closes the connection to the owner,
so the owner sees it leave too.

A request that carries ``agentik-forwarded`` (``FORWARDED``) was forwarded
once already and is never forwarded again: it gets the 307 (the loop guard).

The owner unreachable (it died: connection refused or reset before any byte
of its answer), or answering 307 itself (the conversation moved meanwhile),
the request is run here again: the handler asks the ownership who owns it
now, and either claims it here, or forwards to its new owner, or (its dead
owner's lease still live) meets the same owner again; then it waits a little
and tries again, until ``[cluster] takeover_wait`` has passed (then 503). An
answer whose first byte was passed to the client is never retried: if the
owner breaks off mid-answer, the client's connection ends as the answer did.

A request no node can take right now (its shard is being handed off, this
node's lease lapsed: ``NotHere``, a 503 without forwarding), or that the owner
refuses so (it answers 503 with ``agentik-not-here``), waits the same way for
the shard's next holder instead of failing. A node that stopped answering
without closing its connections (frozen: SIGSTOP, a hung machine) keeps a
forwarded request waiting only until its lease expires: when the rounds no
longer count it among the live nodes (``ConversationOwnership.peer_urls``)
the request is given up there and asked about again.

A native route that names its conversation in its path, once forwarded, is
forwarded straight to the same owner next time (``Forwarder.owners``), without
running its handler, which would ask the database each time; a failed try
forgets it and runs the request as above. Such a request (and a turn whose
shard's holder the last round named) is taken by the HTTP engine before
this layer sees it (``_early.EarlyForward``): relayed as bytes, with the
same rules; this layer serves what that does not take, and what it gave
back (``EARLY_FAILED``: the known owner was tried already).

The owner is reached on raw kept-alive connections (``_peers.PeerClient``):
an httpx client cost more CPU a forwarded turn than the owner spent running
it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable

import attrs
import trio
from starlette.responses import Response

from agentik.server._owners import CALLER_KEY, Caller
from agentik.server._peers import BrokenOff, PeerClient, Unreachable
from agentik.server.http import CANCELS, Message, Receive, Scope, Send, error_body, send_json
from agentik.server.http import ASGIApp as App
from agentik.storage import ConversationOwnership

log = logging.getLogger("agentik.server")

FORWARDED = "agentik-forwarded"
"""The hop header: the forwarding node's id. A request carrying it is not forwarded."""
_FORWARDED = FORWARDED.encode()
ORDER_KEY = "agentik.forward"
"""Where a request's ``ForwardOrder`` sits in its ASGI scope."""
EARLY_FAILED = "agentik.early_failed"
"""Scope key: the early forward (``_early``) tried the route's known owner
for this request and it did not answer for it: not tried again here."""
HOLDER = "agentik-holder"
"""On an answer to a request whose path names a conversation this node holds
(the native routes): this node's URL, so a balancer in front learns where to
send the conversation's next requests instead of a node that would forward
them (deploy/haproxy.cfg, docs/scale-out.md "Routing to the holder"). A
forwarded request's answer carries the owner's, passed on as it came."""
_HOLDER = HOLDER.encode()
NOT_HERE = "agentik-not-here"
"""On a 503 to a forwarded request: the node does not hold the conversation
now and ran nothing (``NotHere``); the forwarding node waits and asks again."""
_NOT_HERE = NOT_HERE.encode()

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
"""Headers of one connection, not of the request or answer (RFC 9110 §7.6.1)."""
NOT_SENT_ON = HOP_BY_HOP | {b"host", b"content-length", b"expect", _FORWARDED}
"""Request headers the proxy makes itself (its own ``Host``, the body's length)."""
_NOT_PASSED_BACK = HOP_BY_HOP | {b"date", b"server"}
"""Answer headers this node's engine writes itself."""

FIRST_PAUSE = 0.05
"""Seconds between the first tries to reach a conversation's owner; doubled
each time up to ``LONGEST_PAUSE`` (each pause drawn between half and all of
that), so a dead owner is asked about a few times a second while its lease
runs out."""
LONGEST_PAUSE = 0.5
CONNECT_TIMEOUT = 2.0
"""Seconds to connect to an owner: a node that does not accept by then is
taken for dead (the request asks again who owns the conversation)."""


KNOWN_ROUTES = 10_000
"""Routes whose owner ``Forwarder`` remembers; past it, the oldest is forgotten."""
NATIVE_ROUTES = b"/agentik/conversations/"
"""The routes whose path names their conversation (A2A's and AG-UI's bodies do)."""


def slashed_id(raw_path: bytes) -> bool:
    """Whether a native route's raw path sends its conversation id with an
    encoded ``/`` (``%2F``). The router reads the decoded path, so it would
    take the id's first part for the id (``x%2Fturns`` would run a turn of
    ``x``), while HAProxy hashes the whole id, another shard's: the guard
    refuses such a path (400), and it names no conversation here."""
    if not raw_path.startswith(NATIVE_ROUTES):
        return False
    return b"%2f" in raw_path[len(NATIVE_ROUTES) :].partition(b"/")[0].lower()


def _named_conversation(caller: Caller, path: str) -> tuple[str, list[str]] | None:
    """The stored id of the conversation a native route's ``path``
    (percent-decoded) names, and the path's segments after it; None for
    another path or an id the handler refuses. (An id sent with an encoded
    ``/`` never gets here: the guard, and before it the early forward, refuse
    it: ``slashed_id``.)"""
    parts = path.split("/")  # "", agentik, conversations, id, ...
    if len(parts) < 4 or parts[1] != "agentik" or parts[2] != "conversations" or not parts[3]:
        return None
    try:
        return caller.internal(parts[3]), parts[4:]
    except ValueError:
        return None


def _route_key(scope: Scope) -> tuple[object, bytes, bytes] | None:
    """What names a native conversation route's request's conversation: the
    caller (ids are owner-scoped), the method and the path; None elsewhere."""
    raw = scope.get("raw_path") or b""
    if not raw.startswith(NATIVE_ROUTES):
        return None
    return (scope.get(CALLER_KEY), scope["method"].encode(), raw)


@attrs.define
class ForwardOrder:
    """Set by the app's ``Redirect`` handler: the owner to forward to; or by
    its ``NotHere`` handler: no node holds it now, wait and ask again."""

    base_url: str | None = None
    wait: bool = False

    @property
    def given(self) -> bool:
        return self.base_url is not None or self.wait


class _Ordered(Response):
    """The handler's answer when the request is to be forwarded: nothing is
    sent; ``Forwarder`` sends the owner's answer."""

    def __init__(self) -> None:
        super().__init__(status_code=307)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        return None


def order_forward(scope: Scope, base_url: str) -> Response | None:
    """The forward order's response, if this request may be forwarded
    (``Forwarder`` runs it and it did not come forwarded); None otherwise."""
    order = scope.get(ORDER_KEY)
    if not isinstance(order, ForwardOrder):
        return None
    order.base_url = base_url
    return _Ordered()


def order_wait(scope: Scope) -> Response | None:
    """For ``NotHere``: the wait order's response, if this request may wait
    for the conversation's next holder (``Forwarder`` runs it); None otherwise."""
    order = scope.get(ORDER_KEY)
    if not isinstance(order, ForwardOrder):
        return None
    order.wait = True
    return _Ordered()


def came_forwarded(scope: Scope) -> bool:
    """Whether another node forwarded this request (it carries ``FORWARDED``)."""
    return any(name == _FORWARDED for name, _ in scope["headers"])


class _Body:
    """The request body as the app reads it, kept to send it on or read it again."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self.receive = receive
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.whole = False
        self.gone = False

    async def recording(self) -> Message:
        message = await self.receive()
        self._keep(message)
        return message

    def _keep(self, message: Message) -> None:
        if message["type"] == "http.request":
            body = message.get("body", b"")
            if body:
                self.chunks.append(body)
                self.size += len(body)
            self.whole = not message.get("more_body", False)
        elif message["type"] == "http.disconnect":
            self.gone = True

    async def rest(self) -> bool:
        """Read what the app left of the body; False if the client left or the
        body is over the limit (the app would have refused it)."""
        while not self.whole and not self.gone:
            self._keep(await self.receive())
            if self.size > self.limit:
                return False
        return not self.gone

    @property
    def content(self) -> bytes:
        return b"".join(self.chunks)

    def replay(self) -> Receive:
        """A ``receive`` giving the body read so far again, then the client's own."""
        given = False

        async def receive() -> Message:
            nonlocal given
            if given:
                return await self.receive()
            given = True
            await trio.lowlevel.checkpoint()
            return {"type": "http.request", "body": self.content, "more_body": not self.whole}

        return receive


class Forwarder:
    """The ASGI layer that forwards requests the app ordered forwarded."""

    def __init__(
        self,
        app: App,
        client: PeerClient,
        *,
        node: str,
        takeover_wait: float,
        body_limit: int,
        ownership: ConversationOwnership | None = None,
        own_url: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.app = app
        self.own_url = own_url
        """This node's advertised URL (None until it serves): ``HOLDER``'s value."""
        self.client = client
        self.node = node.encode()
        self.takeover_wait = takeover_wait
        self.body_limit = body_limit
        self.owners: dict[tuple[object, bytes, bytes], str] = {}
        """Where a native conversation route's last request was forwarded, by
        (caller, method, path): the next goes there straight, without asking
        the database (a stale entry costs one refused or 307 try, then the
        request runs here as if unknown, and the entry goes)."""
        self.ownership = ownership
        self._waiting: dict[str, set[trio.CancelScope]] = {}
        """The requests being proxied, by the owner they went to."""
        self._peers = frozenset[str]() if ownership is None else ownership.peer_urls()
        self._departed = frozenset[str]()
        """Nodes the rounds counted live once and no longer do: nothing is
        sent to them (until they hold shards again)."""
        if ownership is not None:
            ownership.on_peers(self._peers_changed)

    def _holder(self, scope: Scope) -> str | None:
        """For a native turn (``POST /agentik/conversations/{id}/turns``), the
        holder of its conversation's shard from the shard map of the last
        round: a conversation's first turn on a node that does not hold it
        goes there straight, without its handler (which would read the body,
        ask the ownership, log a refusal). Other routes (reads are served
        here) are left to their handler."""
        caller = scope.get(CALLER_KEY)
        if not isinstance(caller, Caller):
            return None
        return self.holder_of(caller, scope["method"], scope["path"])

    def holder_of(self, caller: Caller, method: str, path: str) -> str | None:
        """``_holder`` for a request of ``caller`` (``path`` percent-decoded)."""
        if self.ownership is None or method != "POST":
            return None
        named = _named_conversation(caller, path)
        if named is None or named[1] != ["turns"]:
            return None
        return self.ownership.holder_url(named[0])

    def departed(self, base_url: str) -> bool:
        """The rounds no longer count that node live: nothing goes there."""
        return base_url in self._departed

    def watch(self, base_url: str, cancel: trio.CancelScope) -> None:
        """``cancel`` is a request proxied to ``base_url``: cancelled if the
        rounds drop that node meanwhile (``_peers_changed``: its lease
        expired); ``unwatch`` it once done."""
        waiting = self._waiting.get(base_url)
        if waiting is None:
            self._waiting[base_url] = {cancel}
        else:
            waiting.add(cancel)

    def unwatch(self, base_url: str, cancel: trio.CancelScope) -> None:
        waiting = self._waiting[base_url]
        waiting.discard(cancel)
        if not waiting:
            del self._waiting[base_url]

    def _peers_changed(self) -> None:
        assert self.ownership is not None
        now = self.ownership.peer_urls()
        departed = (self._departed | self._peers) - now
        if len(departed) > KNOWN_ROUTES:  # pods come and go under new addresses
            departed = self._peers - now
        self._departed, self._peers = departed, now
        for url in self._departed & self._waiting.keys():
            for scope in self._waiting[url]:
                scope.cancel()  # its lease expired: it will not answer for it

    def _telling_holder(self, scope: Scope, send: Send) -> Send:
        """``send``, adding ``HOLDER`` to the answer's head when the request's
        path names a conversation whose shard this node holds as it answers
        (not a 5xx: a node that lost its lease says nothing)."""
        raw_path = scope.get("raw_path") or b""
        if self.ownership is None or not raw_path.startswith(NATIVE_ROUTES):
            return send
        caller = scope.get(CALLER_KEY)
        if not isinstance(caller, Caller):
            return send
        named = _named_conversation(caller, scope["path"])
        if named is None:
            return send
        stored, ownership = named[0], self.ownership

        async def telling(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 500:
                url = self.own_url()
                if url is not None and ownership.owns(stored):
                    headers = [*message.get("headers", ()), (_HOLDER, url.encode())]
                    message = {**message, "headers": headers}
            await send(message)

        return telling

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._telling_holder(scope, send)
        if came_forwarded(scope):
            await self.app(scope, receive, send)  # not forwarded twice: the 307
            return
        original = dict(scope)  # as it came, before the router adds to it
        body = _Body(receive, self.body_limit)
        key = _route_key(scope)
        arrived: Receive = body.recording
        known = None
        if key is not None and not scope.get(EARLY_FAILED):
            known = self.owners.get(key) or self._holder(scope)
        if key is not None and known is not None:
            if not await body.rest():
                if body.gone:
                    return
                # over the limit: the app refuses it, as it refuses any
            else:
                outcome = await self._proxy(known, original, body.content, receive, send)
                if outcome is _GONE or outcome is None:
                    return
                log.info("forward owner=%s %s; asking who holds it now", known, outcome)
            self.owners.pop(key, None)  # stale: the database says who owns it now
            arrived = body.replay()  # the app reads it as it came
        order = ForwardOrder()
        scope[ORDER_KEY] = order
        await self.app(scope, arrived, send)
        if not order.given:
            if key is not None:
                self.owners.pop(key, None)  # answered here: it may be owned here now
            return
        if not await body.rest():
            if not body.gone:
                message = f"the request body is over {self.body_limit} bytes"
                await send_json(send, error_body("too_large", message), 413)
            return
        deadline = trio.current_time() + self.takeover_wait
        pause = FIRST_PAUSE
        tries = 0
        while True:
            if order.base_url is None:
                outcome = "no node holds it right now"
                if key is not None:
                    self.owners.pop(key, None)
            else:
                if key is not None:
                    if len(self.owners) >= KNOWN_ROUTES and key not in self.owners:
                        del self.owners[next(iter(self.owners))]  # the oldest
                    self.owners[key] = order.base_url
                outcome = await self._proxy(order.base_url, original, body.content, receive, send)
                if outcome is _GONE or outcome is None:
                    return  # answered, or the client left
            tries += 1
            if tries == 1:  # one line a request, not one a try: a failover has many
                log.info(
                    "forward owner=%s %s; waiting up to %g s for the conversation's owner",
                    order.base_url,
                    outcome,
                    self.takeover_wait,
                )
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                log.warning(
                    "forward gave up after %d tries: owner=%s %s", tries, order.base_url, outcome
                )
                await send_json(
                    send,
                    error_body(
                        "owner_unavailable",
                        "the conversation's owner did not answer and no node took it"
                        f" over within {self.takeover_wait:g} s; retry",
                    ),
                    503,  # the guard adds its Retry-After
                )
                return
            # Jittered: the requests a dead owner left waiting do not ask together.
            wait = min(pause * (0.5 + random.random() / 2), remaining)
            if await _until_gone(receive, trio.sleep, wait) is _GONE:
                return  # the client left while it waited
            pause = min(pause * 2, LONGEST_PAUSE)
            order = ForwardOrder()
            await self.app({**original, ORDER_KEY: order}, body.replay(), send)
            if not order.given:
                if key is not None:
                    self.owners.pop(key, None)
                return  # answered here (claimed here, or refused)

    async def _proxy(
        self, base_url: str, scope: Scope, content: bytes, receive: Receive, send: Send
    ) -> object:
        """Send the request to ``base_url`` and its answer back: None once
        answered, ``_GONE`` if the client left, else why no byte of an answer
        came (nothing was sent to the client: the request may be tried again)."""
        if base_url in self._departed:
            return "no longer live (its lease expired)"
        target = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        if query:
            target = target + b"?" + query
        headers = [(n, v) for n, v in scope["headers"] if n.lower() not in NOT_SENT_ON]
        headers.append((_FORWARDED, self.node))
        started = False

        async def exchange() -> str | None:
            nonlocal started
            try:
                async with self.client.request(
                    base_url, scope["method"].encode(), target, headers, content
                ) as answer:
                    status = answer.status
                    if status == 307:  # it moved between our ask and its own
                        return "does not own it (307)"
                    if status == 503 and any(n.lower() == _NOT_HERE for n, _ in answer.headers):
                        return "does not hold it now (503)"
                    started = True
                    await send(
                        {
                            "type": "http.response.start",
                            "status": status,
                            "headers": [
                                (n, v)
                                for n, v in answer.headers
                                if n.lower() not in _NOT_PASSED_BACK
                            ],
                        }
                    )
                    try:
                        async for chunk in answer.body():
                            # The last piece ends the response in the same send (one
                            # write to the client for an answer that came in one read).
                            last = answer.complete and not answer.pending
                            await send(
                                {"type": "http.response.body", "body": chunk, "more_body": not last}
                            )
                            if last:
                                return None
                    except BrokenOff as exc:
                        # Bytes went out: never retried. Ending the response unfinished
                        # ends the client's connection, which is how it can tell.
                        log.warning("forward owner=%s broke off its answer: %s", base_url, exc)
                        return None
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return None
            except Unreachable as exc:
                return f"unreachable ({exc})"
            except BrokenOff as exc:  # inside its head: nothing went to the client
                return f"broke off before answering ({exc})"

        cancel = trio.CancelScope()
        self.watch(base_url, cancel)
        try:
            with cancel:
                if scope.get(CANCELS):  # the engine cancels this task if the client leaves
                    return await exchange()
                return await _until_gone(receive, exchange)
        finally:
            self.unwatch(base_url, cancel)
        # Cancelled by ``_peers_changed``: its lease expired.
        if started:  # part of its answer went out: end it unfinished
            log.warning("forward owner=%s lost its lease mid-answer", base_url)
            return None
        return "lost its lease before answering"


_GONE = object()
"""``_until_gone``'s result when the client left."""


async def _until_gone(
    receive: Receive, work: Callable[..., Awaitable[object]], *args: object
) -> object:
    """``work``'s result, or ``_GONE`` if the client left first (``work`` is
    then cancelled, and a connection it had open to the owner closed)."""
    result: object = _GONE
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        result = await work(*args)
        nursery.cancel_scope.cancel()
    return result
