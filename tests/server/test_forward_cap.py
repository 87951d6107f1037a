"""Two forwarding nodes at their connection cap (agentik issue 33): every
turn completes, where before the peers' reserve (``[limits]
peer_connections``; tests/server/test_peer_reserve.py) the nodes waited on
each other for ever.

Each node takes ``max_connections = 8``; 40 conversations each send turns
to a random node, one connection per conversation and node held open
(keep-alive, as ``bench.cluster_nodes`` does), so each node's cap is soon
full of clients whose turns are forwarded to the other node. Without the
reserve those forwarded requests wait, never accepted, in the other's
listen backlog, while its own connections wait on requests forwarded the
other way: nothing completes. With it a forwarded request is served past
the cap, and a client's connection past the cap gets 503 with Retry-After,
which it retries (on a random node, as any client may).

Real processes, a real database, real sockets: the bound is real time.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import attrs
import httpx2
import trio

from agentik.benchmark._http import BenchClient
from tests.cluster import Node, shards_spread, start_node, stop_nodes
from tests.postgres import fresh_database

CONVERSATIONS = 40
TURNS = 4
BOUND = 60.0
"""Seconds every turn of every conversation must be answered within."""
PAUSE = 0.05
"""Seconds before a client retries a 503 or a connection the node closed."""


@attrs.define
class Clients:
    """The conversations' clients: one per conversation and node."""

    urls: list[str]
    by_node: dict[tuple[int, str], BenchClient] = attrs.Factory(dict)
    answered: int = 0
    at_capacity: int = 0
    """503s from a node at its cap (``at_capacity``), each retried."""

    def client(self, conversation: int, url: str) -> BenchClient:
        key = (conversation, url)
        found = self.by_node.get(key)
        if found is None:
            found = self.by_node[key] = BenchClient(url, {"content-type": "application/json"})
        return found

    async def forget(self, conversation: int, url: str) -> None:
        client = self.by_node.pop((conversation, url), None)
        if client is not None:
            await client.aclose()

    async def turn(self, conversation: int, n: int) -> None:
        body = json.dumps(
            {"text": f"c{conversation} {n}", "idempotency_key": f"c{conversation}-{n}"}
        ).encode()
        while True:
            url = random.choice(self.urls)
            try:
                reply = await self.client(conversation, url).post(
                    f"/agentik/conversations/c{conversation}/turns", body
                )
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                await self.forget(conversation, url)  # closed under it: a new one
                await trio.sleep(PAUSE)
                continue
            if reply.status == 200:
                self.answered += 1
                return
            assert reply.status == 503, (reply.status, reply.body)
            code = json.loads(reply.body)["error"]["code"]
            assert code in ("at_capacity", "unavailable"), reply.body
            if code == "at_capacity":
                self.at_capacity += 1
                await self.forget(conversation, url)  # its answer closed the connection
            await trio.sleep(PAUSE)

    async def conversation(self, conversation: int) -> None:
        for n in range(1, TURNS + 1):
            await self.turn(conversation, n)
        for url in self.urls:  # done: its connections go, as a client's would
            await self.forget(conversation, url)


async def test_two_forwarding_nodes_at_their_cap_answer_every_turn(
    postgres_dsn: str, tmp_path: Path
) -> None:
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    settings = {"AGENTIK_MAX_CONNECTIONS": "8"}
    async with trio.open_nursery() as nursery:
        nodes: list[Node] = []
        try:
            for _ in range(2):
                nodes.append(
                    await start_node(
                        nursery, database, "", cwd=tmp_path, model=False, settings=settings
                    )
                )
            await shards_spread(database, 2)  # each node owns half the conversations
            clients = Clients([node.url for node in nodes])
            try:
                with trio.fail_after(BOUND):
                    async with trio.open_nursery() as load:
                        for i in range(CONVERSATIONS):
                            load.start_soon(clients.conversation, i)
            except trio.TooSlowError:
                raise AssertionError(
                    f"{clients.answered} of {CONVERSATIONS * TURNS} turns answered"
                    f" in {BOUND} s: the nodes wait on each other"
                ) from None
            finally:
                for client in clients.by_node.values():
                    await client.aclose()
            assert clients.answered == CONVERSATIONS * TURNS
            assert clients.at_capacity > 0, "the caps were never reached: the test shows nothing"
            turned_away = 0
            async with httpx2.AsyncClient() as probe:
                for node in nodes:
                    metrics = (await probe.get(f"{node.url}/metrics")).text
                    (line,) = [
                        line
                        for line in metrics.splitlines()
                        if line.startswith('agentik_http_at_bound_total{event="turned_away"} ')
                    ]
                    turned_away += int(float(line.split()[-1]))
            assert turned_away == clients.at_capacity  # /metrics counts each 503 at the bound
        finally:
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()
