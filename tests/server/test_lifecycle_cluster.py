"""Deleting a conversation with several ``agentik serve`` processes on one
PostgreSQL database (tests/cluster.py), ``[cluster] forward = false``: a node
that does not own it answers 307 to the owner, as it does for a turn, and the
owner deletes it (forwarded instead: tests/server/test_forward.py). Real
processes and sockets: the waits are real time, bounded."""

from __future__ import annotations

from pathlib import Path

import httpx2
import trio

from tests.cluster import RecordingModel, owner_url, shards_spread, start_node, stop_nodes
from tests.postgres import fresh_database


async def test_delete_on_a_node_that_does_not_own_it_redirects_to_the_owner(
    postgres_dsn: str, tmp_path: Path
) -> None:
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=0)
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(
                nursery,
                database,
                model_url,
                lease=2.0,
                cwd=tmp_path,
                settings={"AGENTIK_FORWARD": "false"},
            )
            for _ in range(2)
        ]
        await shards_spread(database, 2)
        try:
            with trio.fail_after(60):
                async with httpx2.AsyncClient(timeout=30) as client:
                    path = "/agentik/conversations/d1"
                    turn = await client.post(f"{nodes[0].url}{path}/turns", json={"text": "d1 0"})
                    assert turn.status_code == 200, turn.text
                    owner = await owner_url(database, "d1")
                    (other,) = [node for node in nodes if node.url != owner]
                    hop = await client.delete(f"{other.url}{path}")
                    assert hop.status_code == 307, hop.text
                    assert hop.json()["error"]["code"] == "owned_elsewhere"
                    assert hop.headers["location"] == f"{owner}{path}"
                    usage = await client.get(f"{other.url}{path}/usage")
                    assert usage.status_code == 200, "the redirect deleted nothing"
                    deleted = await client.delete(hop.headers["location"])
                    assert deleted.status_code == 204, deleted.text
                    for node in nodes:
                        gone = await client.get(f"{node.url}{path}/usage")
                        assert gone.status_code == 404, gone.text
        finally:
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()
