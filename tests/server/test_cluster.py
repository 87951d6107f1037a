"""Several ``agentik serve`` processes on one PostgreSQL database (tests/cluster.py).

- Turns for the same conversations, sent alternately to every node and
  concurrently, each run exactly once, on the conversation's owner (the
  node that does not own it forwards the turn there, or with ``[cluster]
  forward = false`` redirects the client, who follows), with gapless seqs,
  and no two model calls of one conversation ever overlap in time.
- Failover: under load, a node is killed with SIGKILL, round after round;
  no acknowledged turn is lost, and its conversations are served by other
  nodes within the lease plus 5 s.

Real processes, a real database, real sockets: the waits are real time,
kept short (leases of 2 s) and bounded.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx2
import pytest
import trio

from agentik import Role
from agentik.storage import open_postgres_storage
from tests.cluster import (
    Load,
    Node,
    RecordingModel,
    hops,
    owner_url,
    shards_spread,
    start_node,
    stop_nodes,
)
from tests.postgres import fresh_database

LEASE = 2.0


async def check_histories(database: str, sent: dict[str, set[int]]) -> None:
    """Every acknowledged turn once, in gapless seqs, each answered."""
    async with open_postgres_storage(database) as storage:
        for conversation, turns in sent.items():
            history = [m async for m in storage.message_store.get_messages(conversation)]
            assert [m.seq for m in history] == list(range(1, len(history) + 1))
            users = Counter(m.content for m in history if m.role is Role.USER)
            for turn in turns:
                assert users[f"{conversation} {turn}"] == 1, (conversation, turn, users)
            assert all(count == 1 for count in users.values()), users
            for user, answer in zip(history[::2], history[1::2], strict=True):
                assert user.role is Role.USER and answer.role is Role.ASSISTANT
                assert answer.content == f"answer to {user.content}"


@pytest.mark.parametrize(("count", "forward"), [(2, False), (3, True)])
async def test_turns_sent_to_every_node_run_once_each_on_the_owner(
    postgres_dsn: str, tmp_path: Path, count: int, forward: bool
) -> None:
    """``forward``: a node that does not own a conversation proxies its turns
    to the owner (no client sees a redirect); without, it answers 307."""
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=0.02)
    sent: dict[str, set[int]] = defaultdict(set)
    redirected = 0
    settings = {"AGENTIK_FORWARD": str(forward).lower()}
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(
                nursery, database, model_url, lease=LEASE, cwd=tmp_path, settings=settings
            )
            for _ in range(count)
        ]
        await shards_spread(database, count)
        try:
            async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as client:

                async def sender(conversation: str, turns: range) -> None:
                    nonlocal redirected
                    for turn in turns:
                        node = nodes[turn % count]
                        response = await client.post(
                            f"{node.url}/agentik/conversations/{conversation}/turns",
                            json={"text": f"{conversation} {turn}"},
                        )
                        assert response.status_code == 200, response.text
                        assert response.json()["text"] == f"answer to {conversation} {turn}"
                        # a redirect is a 307 to another node, same path
                        for hop in response.history:
                            assert hop.status_code == 307, hop
                            location = hop.headers["location"]
                            assert location.endswith(hop.url.path), (location, hop.url)
                            assert not location.startswith(node.url), location
                        redirected += bool(response.history)
                        sent[conversation].add(turn)

                async with trio.open_nursery() as senders:
                    for c in range(6):
                        # two senders per conversation, each alternating over the nodes
                        senders.start_soon(sender, f"c{c}", range(0, 6, 2))
                        senders.start_soon(sender, f"c{c}", range(1, 6, 2))
        finally:
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()
    assert hops(nodes) > 0, "every turn landed on its owner: the test proved nothing"
    assert (redirected > 0) if not forward else (redirected == 0), redirected
    assert model.overlaps() == []
    await check_histories(database, sent)


async def test_a_killed_node_loses_nothing_and_its_conversations_move(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Three rounds: under load on 3 nodes, SIGKILL the owner of a busy
    conversation; every conversation is served again within the lease + 5 s;
    a new node replaces the dead one. No acknowledged turn is lost, none runs
    twice, no two turns of one conversation overlap."""
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=0.01)
    conversations = [f"f{i}" for i in range(8)]
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(nursery, database, model_url, lease=LEASE, cwd=tmp_path)
            for _ in range(3)
        ]
        await shards_spread(database, 3)
        dead: list[Node] = []
        try:
            async with httpx2.AsyncClient(follow_redirects=True, timeout=30) as client:
                load = Load(nodes, client)
                async with trio.open_nursery() as senders:
                    for conversation in conversations:
                        senders.start_soon(load.run, conversation)
                    for _ in range(3):
                        await trio.sleep(0.5)  # load runs on every node
                        victim_url = await owner_url(database, conversations[0])
                        victim = next(n for n in nodes if n.url == victim_url)
                        victim.kill()
                        killed_at = time.monotonic()
                        nodes.remove(victim)
                        dead.append(victim)
                        with trio.fail_after(LEASE + 5):
                            while not all(  # noqa: ASYNC110 (other processes' progress)
                                load.last_ack.get(c, 0) > killed_at for c in conversations
                            ):
                                await trio.sleep(0.05)
                        nodes.append(
                            await start_node(
                                nursery, database, model_url, lease=LEASE, cwd=tmp_path
                            )
                        )
                    load.stop = True
        finally:
            await stop_nodes(nodes + dead)
        nursery.cancel_scope.cancel()
    assert model.overlaps() == []
    await check_histories(database, load.acked)


async def test_sigterm_hands_the_nodes_shards_off_at_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A node stopped with SIGTERM releases its shards as it exits: its
    conversations are served by the other node within seconds, not after
    its (here 30-second) lease."""
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=0)
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(nursery, database, model_url, lease=30.0, cwd=tmp_path)
            for _ in range(2)
        ]
        await shards_spread(database, 2)
        try:
            async with httpx2.AsyncClient(timeout=30) as client:
                owners = {c: await owner_url(database, c) for c in (f"h{i}" for i in range(8))}
                leaving = nodes[0]
                staying = nodes[1]
                moved = [c for c, url in owners.items() if url == leaving.url]
                assert moved, owners
                for conversation in moved:
                    path = f"{leaving.url}/agentik/conversations/{conversation}/turns"
                    first = await client.post(path, json={"text": f"{conversation} 0"})
                    assert first.status_code == 200, first.text
                leaving.terminate()
                with trio.fail_after(20):
                    await leaving.process.wait()
                exited = time.monotonic()
                for conversation in moved:
                    path = f"{staying.url}/agentik/conversations/{conversation}/turns"
                    with trio.fail_after(10):  # a third of the lease
                        while True:
                            response = await client.post(path, json={"text": f"{conversation} 1"})
                            if response.status_code == 200:
                                break
                            assert response.status_code in (307, 503), response.text
                            await trio.sleep(0.1)
                    assert response.json()["text"] == f"answer to {conversation} 1"
                assert time.monotonic() - exited < 10
        finally:
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()
