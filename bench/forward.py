"""The cost of a forwarded turn against a direct one: two ``agentik serve``
nodes on one PostgreSQL database (the scripted demo model, so the figure is
agentik's own cost plus PostgreSQL's), every conversation one of node A's
shards holds (picked once the shards have settled); then the same number of
turns sent to A (direct) and to B (forwarded to A), alternating rounds, one
keep-alive connection per conversation.

    AGENTIK_TEST_POSTGRES_DSN=... python -m bench.forward [--conversations 1 20]
                                                        [--turns 300] [--rounds 3]

Prints, per concurrency, the median turns/s and latency of each, and their
ratio, and each node's CPU a turn (user + system, ``/proc``) in each: with
every turn forwarded, B's is the hop's cost, A's the owner's. On this 2-core
machine, shared: figures are relative, not absolute.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx2
import trio

from bench.cluster_nodes import node_cpu, shard_owners
from tests.cluster import Node, start_node, stop_nodes
from tests.postgres import fresh_database


async def _turns(
    client: httpx2.AsyncClient, node: Node, conversations: list[str], turns: int
) -> list[float]:
    """Send ``turns`` turns spread over ``conversations`` (each its own
    sequence) to ``node``; the latency of each, in seconds."""
    latencies: list[float] = []
    per = max(1, turns // len(conversations))

    async def one(conversation: str) -> None:
        for n in range(per):
            began = time.perf_counter()
            response = await client.post(
                f"{node.url}/agentik/conversations/{conversation}/turns", json={"text": f"t{n}"}
            )
            latencies.append(time.perf_counter() - began)
            assert response.status_code == 200, response.text
            assert not response.history

    async with trio.open_nursery() as nursery:
        for conversation in conversations:
            nursery.start_soon(one, conversation)
    return latencies


async def _owned_by(database: str, owner: Node, count: int, nodes: list[Node]) -> list[str]:
    """``count`` conversation ids of shards ``owner`` holds, once every node
    holds some (the shards settled)."""
    candidates = [f"fw{count}-{i}" for i in range(count * 20)]
    settled = 0
    for _ in range(100):
        try:
            owners = await trio.to_thread.run_sync(shard_owners, database, candidates)
        except KeyError:  # a shard between two holders
            owners = {}
        if set(owners.values()) >= {n.url for n in nodes}:
            settled += 1
            if settled == 6:  # a few rounds more: hand-offs finish
                return [c for c in candidates if owners[c] == owner.url][:count]
        await trio.sleep(0.5)
    raise RuntimeError("the shards did not settle on both nodes")


async def main(concurrencies: list[int], turns: int, rounds: int) -> None:
    database = await trio.to_thread.run_sync(
        fresh_database, os.environ["AGENTIK_TEST_POSTGRES_DSN"]
    )
    with tempfile.TemporaryDirectory() as folder:
        async with trio.open_nursery() as nursery:
            nodes = [
                await start_node(nursery, database, "", model=False, lease=20, cwd=Path(folder))
                for _ in range(2)
            ]
            owner, other = nodes
            try:
                limits = httpx2.Limits(max_connections=max(concurrencies) * 2)
                async with httpx2.AsyncClient(timeout=60, limits=limits) as client:
                    for count in concurrencies:
                        conversations = await _owned_by(database, owner, count, nodes)
                        await _turns(client, owner, conversations, count)
                        await _turns(client, other, conversations, count)  # warm B's connections
                        rates: dict[str, list[float]] = {"direct": [], "forwarded": []}
                        lat: dict[str, list[float]] = {"direct": [], "forwarded": []}
                        cpu = {k: [0.0, 0.0] for k in ("direct", "forwarded")}
                        for _ in range(rounds):
                            for label, node in (("direct", owner), ("forwarded", other)):
                                before = [node_cpu(n) for n in nodes]
                                began = time.perf_counter()
                                latencies = await _turns(client, node, conversations, turns)
                                rates[label].append(len(latencies) / (time.perf_counter() - began))
                                lat[label].extend(latencies)
                                for i, n in enumerate(nodes):
                                    cpu[label][i] += (node_cpu(n) - before[i]) / len(latencies)
                        direct, forwarded = (
                            statistics.median(rates[k]) for k in ("direct", "forwarded")
                        )
                        p50 = {k: statistics.median(v) * 1000 for k, v in lat.items()}
                        print(
                            f"conversations={count} turns={turns}x{rounds}:"
                            f" direct {direct:.0f} turns/s p50 {p50['direct']:.2f} ms,"
                            f" forwarded {forwarded:.0f} turns/s p50 {p50['forwarded']:.2f} ms;"
                            f" forwarded/direct time per turn {direct / forwarded:.2f}x"
                        )
                        for label, (a, b) in cpu.items():
                            print(
                                f"  {label}: node CPU a turn, A (owner) {1e6 * a / rounds:.0f} µs,"
                                f" B {1e6 * b / rounds:.0f} µs"
                            )
            finally:
                await stop_nodes(nodes)
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trio.run(main, args.conversations, args.turns, args.rounds)
