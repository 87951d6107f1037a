"""The documented HAProxy configuration (deploy/haproxy.cfg, Debian's
haproxy) in front of several ``agentik serve`` nodes on one PostgreSQL:
consistent hashing on the conversation id in the path sends every request of
a conversation to one node; the node holding the conversation's shard runs
it (a request the hash sent elsewhere is redirected there), and the turns
run once each, gapless, never two at once."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import httpx2
import pytest
import trio

from tests.cluster import (
    CONFIG,
    Node,
    RecordingModel,
    haproxy_config,
    hops,
    shards_spread,
    start_haproxy,
    start_node,
    stop_nodes,
    write_holders,
)
from tests.kits import missing_kit
from tests.postgres import fresh_database
from tests.server.test_cluster import LEASE, check_histories

HAPROXY = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None
)


def need_haproxy() -> str:
    if HAPROXY is None:
        missing_kit("haproxy", "haproxy is not installed (apt-get install haproxy; .ci/run does)")
    return HAPROXY


def test_the_documented_config_is_valid(tmp_path: Path) -> None:
    """``haproxy -c`` accepts deploy/haproxy.cfg as shipped and as the tests
    render it, and the rendering changes only the bind, server and
    use-server lines."""
    binary = need_haproxy()
    rendered = tmp_path / "rendered.cfg"
    rendered.write_text(haproxy_config(8999, ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]))
    write_holders(tmp_path)
    for path in (CONFIG, rendered):
        result = subprocess.run([binary, "-c", "-f", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
    kept = [
        line
        for line in CONFIG.read_text().splitlines()
        if not line.strip().startswith(("bind ", "server ", "use-server "))
    ]
    assert [
        line
        for line in rendered.read_text().splitlines()
        if not line.strip().startswith(("bind ", "server ", "use-server "))
    ] == kept
    assert "hash-type consistent" in kept[kept.index("backend nodes") + 2]


@pytest.mark.parametrize("count", [2, 3])
async def test_turns_through_the_balancer_land_on_their_owner(
    postgres_dsn: str, tmp_path: Path, count: int
) -> None:
    """Consistent hashing: each conversation's requests reach one node, and
    run on its shard's holder (the hash cannot know the shards). With
    ``[cluster] forward = false`` a request on another node is redirected, and
    every request of one conversation takes the same path, so either all of
    its turns are redirected or none; with forwarding (the default) no client
    sees a redirect."""
    per_conversation = await _turns_through_the_balancer(
        postgres_dsn, tmp_path, count, None, forward=False
    )
    assert set(per_conversation.values()) <= {0, 4}, per_conversation


@pytest.mark.parametrize("forward", [True, False])
async def test_a_balancer_that_routes_wrongly_costs_a_hop_only(
    postgres_dsn: str, tmp_path: Path, forward: bool
) -> None:
    """Round robin instead of the hash sends most requests to a node that
    does not own their conversation: it forwards them to the owner (no client
    sees a redirect), or with ``[cluster] forward = false`` redirects them
    (307); they still run once each, gapless, never two turns of one at once."""
    per_conversation = await _turns_through_the_balancer(
        postgres_dsn, tmp_path, 3, "roundrobin", forward=forward
    )
    redirected = sum(per_conversation.values())
    if forward:
        assert redirected == 0, "a node redirected with forwarding on"
    else:
        assert redirected > 0, "round robin over three nodes never needed a redirect"


async def _turns_through_the_balancer(
    postgres_dsn: str, tmp_path: Path, count: int, balance: str | None, *, forward: bool = True
) -> dict[str, int]:
    """12 conversations, 4 turns each, through HAProxy to ``count`` nodes;
    checks the histories and the model's calls, returns how many turns of
    each conversation were redirected. With a ``balance`` that routes
    wrongly, checks too that turns did reach nodes that did not own their
    conversation."""
    need_haproxy()
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=0.01)
    sent: dict[str, set[int]] = defaultdict(set)
    redirected: dict[str, int] = defaultdict(int)
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(
                nursery,
                database,
                model_url,
                lease=LEASE,
                cwd=tmp_path,
                settings={"AGENTIK_FORWARD": str(forward).lower()},
            )
            for _ in range(count)
        ]
        await shards_spread(database, count)  # no shard being handed off
        balancer, url = await start_haproxy(
            nursery, [n.url for n in nodes], tmp_path, balance=balance
        )
        try:
            async with httpx2.AsyncClient(
                base_url=url, follow_redirects=True, timeout=30
            ) as client:

                async def sender(conversation: str) -> None:
                    for turn in range(4):
                        response = await client.post(
                            f"/agentik/conversations/{conversation}/turns",
                            json={"text": f"{conversation} {turn}"},
                        )
                        assert response.status_code == 200, response.text
                        redirected[conversation] += bool(response.history)
                        sent[conversation].add(turn)

                async with trio.open_nursery() as senders:
                    for c in range(12):
                        senders.start_soon(sender, f"h{c}")
        finally:
            balancer.kill()
            await balancer.wait()
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()
    assert model.overlaps() == []
    await check_histories(database, sent)
    if balance is not None:
        assert hops(nodes) > 0, "every turn reached its owner: the test proved nothing"
    return dict(redirected)


async def test_the_balancer_learns_where_each_conversation_is_held(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Round robin over three nodes sends most first turns to a node that
    does not hold their conversation's shard: forwarded, one hop each. The
    holder's answer names it (``agentik-holder``), HAProxy keeps that for the
    shard, and every later request of the conversation goes to the holder,
    round robin or not: no hop after the first turns. The header is
    HAProxy's: no client sees it."""
    need_haproxy()
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=0.01)
    sent: dict[str, set[int]] = defaultdict(set)
    conversations = [f"learn{c}" for c in range(12)]
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(nursery, database, model_url, lease=LEASE, cwd=tmp_path)
            for _ in range(3)
        ]
        await shards_spread(database, 3)  # no shard being handed off
        balancer, url = await start_haproxy(
            nursery, [n.url for n in nodes], tmp_path, balance="roundrobin"
        )
        try:
            async with httpx2.AsyncClient(base_url=url, timeout=30) as client:

                async def turn(conversation: str, number: int) -> None:
                    response = await client.post(
                        f"/agentik/conversations/{conversation}/turns",
                        json={"text": f"{conversation} {number}"},
                    )
                    assert response.status_code == 200, response.text
                    assert "agentik-holder" not in response.headers
                    sent[conversation].add(number)

                async def rest(conversation: str) -> None:
                    for number in range(1, 4):
                        await turn(conversation, number)

                async with trio.open_nursery() as senders:
                    for conversation in conversations:
                        senders.start_soon(turn, conversation, 0)
                first = await _settled_hops(nodes)
                async with trio.open_nursery() as senders:
                    for conversation in conversations:
                        senders.start_soon(rest, conversation)
                later = await _settled_hops(nodes) - first
        finally:
            balancer.kill()
            await balancer.wait()
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()
    assert first > 0, "round robin sent every first turn to its holder: the test proved nothing"
    assert later == 0, f"{later} of 36 later turns still took a hop"
    assert model.overlaps() == []
    await check_histories(database, sent)


async def _settled_hops(nodes: list[Node]) -> int:
    """``hops`` once the nodes' logs have caught up (a node logs a request
    as its answer ends, and the log reaches the test a little later)."""
    seen = [hops(nodes)]
    with trio.fail_after(10):
        while len(seen) < 5 or len(set(seen[-5:])) > 1:
            await trio.sleep(0.1)
            seen.append(hops(nodes))
    return seen[-1]
