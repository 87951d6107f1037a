"""``agentik-holder``: the answers of a node that holds a conversation's
shard name it, so a balancer in front learns where to send the
conversation's next requests (deploy/haproxy.cfg; tests/server/test_haproxy.py
shows HAProxy learning it). Only the holder says so, only about a
conversation its path names, and never on a 5xx."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest

from agentik.server._forward import FORWARDED, HOLDER, Forwarder
from agentik.server._owners import CALLER_KEY, DEFAULT_CALLER, Caller
from agentik.server._peers import PeerClient
from agentik.storage import ConversationOwnership

ME = "http://10.0.0.7:8080"


class Held:
    """The part of a node's ownership the forwarder asks: these stored ids are held here."""

    def __init__(self, *held: str) -> None:
        self.held = set(held)

    def owns(self, conversation_id: str) -> bool:
        return conversation_id in self.held

    def holder_url(self, conversation_id: str) -> str | None:
        return None

    def peer_urls(self) -> frozenset[str]:
        return frozenset()

    def on_peers(self, callback: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


def _app(status: int) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": [(b"x", b"1")]})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


async def _answer_head(
    path: str,
    *,
    status: int = 200,
    held: tuple[str, ...] = ("c1",),
    caller: Caller | None = DEFAULT_CALLER,
    method: str = "GET",
    forwarded: bool = False,
    own_url: str | None = ME,
) -> list[tuple[bytes, bytes]]:
    """The headers of the answer a forwarder around an app answering
    ``status`` sends for ``path``."""
    async with PeerClient(connect_timeout=1, idle_timeout=1, max_idle=1) as client:
        forwarder = Forwarder(
            _app(status),
            client,
            node="n",
            takeover_wait=0,
            body_limit=1 << 10,
            ownership=cast(ConversationOwnership, Held(*held)),
            own_url=lambda: own_url,
        )
        headers = [(FORWARDED.encode(), b"other")] if forwarded else []
        scope: dict[str, Any] = {
            "type": "http",
            "method": method,
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": headers,
        }
        if caller is not None:
            scope[CALLER_KEY] = caller
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await forwarder(scope, receive, send)
    (start,) = [m for m in sent if m["type"] == "http.response.start"]
    return list(start["headers"])


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("forwarded", [False, True])
@pytest.mark.parametrize("status", [200, 404, 409])
async def test_the_holder_names_itself(method: str, forwarded: bool, status: int) -> None:
    headers = await _answer_head(
        "/agentik/conversations/c1/turns", method=method, forwarded=forwarded, status=status
    )
    assert (HOLDER.encode(), ME.encode()) in headers
    assert (b"x", b"1") in headers  # the app's own headers kept


@pytest.mark.parametrize(
    ("path", "options"),
    [
        ("/agentik/conversations/c2/turns", {}),  # held elsewhere (a read served here)
        ("/agentik/conversations/c1/turns", {"status": 503}),  # e.g. its lease lapsed
        ("/agentik/conversations/c1/turns", {"status": 500}),
        ("/agentik/conversations/c1/turns", {"caller": None}),  # no guard ran
        ("/agentik/conversations/c1/turns", {"own_url": None}),  # not serving yet
        ("/agentik/conversations/c1", {"held": ("bob\x1fc1",)}),  # another owner's
        ("/agentik/conversations/", {}),
        ("/health", {}),
        ("/agui/run", {}),
    ],
)
async def test_no_one_else_does(path: str, options: dict[str, Any]) -> None:
    headers = await _answer_head(path, **options)
    assert HOLDER.encode() not in {name for name, _ in headers}


async def test_an_owner_scoped_id_is_held_under_its_owner() -> None:
    """With per-owner tokens the stored id carries the owner: that is what
    the node holds, and what it checks."""
    path = "/agentik/conversations/c1/turns"
    assert (HOLDER.encode(), ME.encode()) in await _answer_head(
        path, caller=Caller("bob"), held=("bob\x1fc1",)
    )
    assert (HOLDER.encode(), ME.encode()) not in await _answer_head(
        path, caller=Caller("bob"), held=("c1",)
    )
