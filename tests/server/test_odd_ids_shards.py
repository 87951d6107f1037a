"""Odd conversation ids in a path (tests/server/odd_ids.py), node side, as
pure functions: whenever a node tells HAProxy it holds a conversation
(``agentik-holder``), HAProxy files that under the shard of the very
conversation the node asked about; and the forward decision asks about the
conversation the route serves. An id sent with an encoded ``/`` (``%2F``)
names nothing: the router would read its first part as the id, HAProxy the
whole (the guard refuses such a path, test_odd_ids_routing.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast
from urllib.parse import unquote

import trio
from hypothesis import example, given
from starlette.routing import Match, Route

from agentik.server._forward import HOLDER, Forwarder, slashed_id
from agentik.server._owners import CALLER_KEY, DEFAULT_CALLER, Caller
from agentik.server._peers import PeerClient
from agentik.server.http import undecodable_url
from agentik.storage import ConversationOwnership, shard_of
from tests.server.odd_ids import NATIVE, haproxy_segment, haproxy_shard, segments, suffixes

ME = "http://10.0.0.7:8080"


class Asked:
    """An ownership that holds every conversation and records which it was asked about."""

    def __init__(self) -> None:
        self.owned: list[str] = []
        self.held: list[str] = []

    def owns(self, conversation_id: str) -> bool:
        self.owned.append(conversation_id)
        return True

    def holder_url(self, conversation_id: str) -> str | None:
        self.held.append(conversation_id)
        return None

    def peer_urls(self) -> frozenset[str]:
        return frozenset()

    def on_peers(self, callback: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


def _forwarder(asked: Asked, client: PeerClient) -> Forwarder:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return Forwarder(
        app,
        client,
        node="n",
        takeover_wait=0,
        body_limit=1 << 10,
        ownership=cast(ConversationOwnership, asked),
        own_url=lambda: ME,
    )


def _scope(raw: bytes, method: str = "GET") -> dict[str, Any]:
    """As the engine builds it (``http._scope.request_scope``), past the guard."""
    return {
        "type": "http",
        "method": method,
        "path": unquote(raw.decode("ascii")),
        "raw_path": raw,
        "query_string": b"",
        "headers": [],
        CALLER_KEY: DEFAULT_CALLER,
    }


async def _holder_told(raw: bytes) -> tuple[bool, list[str]]:
    """Whether the answer for ``raw`` names this node the holder, and which
    stored ids the ownership was asked about."""
    asked = Asked()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with PeerClient(connect_timeout=1, idle_timeout=1, max_idle=1) as client:
        await _forwarder(asked, client)(_scope(raw), receive, send)
    (start,) = [m for m in sent if m["type"] == "http.response.start"]
    return HOLDER.encode() in {n for n, _ in start["headers"]}, asked.owned


@given(segments, suffixes)
@example("x%2Fturns", "")  # the router serves x's turns; HAProxy hashes "x/turns"
@example("a%2fb", "/messages")
@example("%FF", "/turns")  # the guard's 400: never seen here
def test_haproxy_files_the_holder_under_the_shard_the_node_checked(
    segment: str, suffix: str
) -> None:
    """The holder header goes out only when HAProxy's decoding of the path's
    id is the id whose shard the node holds: HAProxy never learns a holder
    for another shard. Where HAProxy cannot decode the id (``%G1``) it keeps
    no shard at all: the hash picks a node, at worst a hop."""
    raw = NATIVE + segment.encode() + suffix.encode()
    if undecodable_url(_scope(raw)) is not None or slashed_id(raw):
        return  # the guard answers 400 before the forwarder
    told, owned = trio.run(_holder_told, raw)
    if not told:
        return
    (stored,) = owned
    hashed = haproxy_segment(raw)
    if hashed is None:
        return  # HAProxy keeps nothing for this path
    assert hashed == stored.encode("utf-8", "surrogatepass"), (raw, stored)
    assert haproxy_shard(raw) == shard_of(stored, 256)


_TURNS = Route("/agentik/conversations/{conversation_id}/turns", lambda r: None, methods=["POST"])
"""The turn route's template (agentik/server/native/_routes.py), as Starlette matches it."""


@given(segments, suffixes)
@example("x%2Fturns", "")
def test_the_forward_decision_asks_about_the_conversation_the_route_serves(
    segment: str, suffix: str
) -> None:
    """``holder_of`` (the early forward's and the app's turn shortcut) asks
    the shard map about the conversation the turn route would run, or about
    none; never about another."""
    raw = NATIVE + segment.encode() + suffix.encode()
    scope = _scope(raw, "POST")
    asked = Asked()

    async def decide() -> None:
        async with PeerClient(connect_timeout=1, idle_timeout=1, max_idle=1) as client:
            caller = scope[CALLER_KEY]
            assert isinstance(caller, Caller)
            _forwarder(asked, client).holder_of(caller, "POST", scope["path"])

    trio.run(decide)
    match, child = _TURNS.matches(scope)
    if asked.held:
        assert match is Match.FULL, raw
        assert asked.held == [child["path_params"]["conversation_id"]]
    plain = "%2f" not in segment.lower()
    if match is Match.FULL and plain and "\x1f" not in child["path_params"]["conversation_id"]:
        assert asked.held, raw  # the shortcut is not lost for any other id (U+001F: a 422)
