"""Shard leases under a burst: what a cluster of ``agentik serve`` nodes on
one PostgreSQL pays when many conversations start at once.

    python -m bench.cluster [--nodes 2] [--conversations 30000] [--clients 500]
                            [--lease 20] [--rounds 200] [--dsn URL]

- Rounds: one node lease's round (renew, count the live nodes, take free
  shards up to its share: one statement) run back to back on its own
  connection, ``--rounds`` times: rounds/s and the p99 of one round. Before
  shards a node claimed each new conversation with a statement of its own;
  now a round claims shards for every conversation in them.
- Burst: ``--nodes`` nodes (the scripted demo model, so the figure is
  agentik's own cost plus PostgreSQL's), ``--conversations`` new
  conversations, each one first turn, sent by ``--clients`` concurrent
  clients to the nodes in turn (a request landing on a node that does not
  hold the conversation's shard is redirected: 307, followed), with the
  raw-socket client of ``agentik bench --url``. Reported: turns that failed,
  the first turn's p50/p99 (redirect included), and whether any node lost
  its lease (its ``/health`` lease shows a renewal error or a new node id).
- Join: a third as many new conversations, from half the clients, all sent
  to one node while a second joins 2 s in: the shards move under load.
  Reported: turns that failed, 503s retried (a shard being handed off),
  how long after the join the spread was even, and the first turn's p99.

Without ``--dsn`` it starts its own throwaway PostgreSQL cluster
(tests/pgcluster.py, ``fsync`` on). Everything shares the machine's cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import trio

from agentik.benchmark._http import BenchClient
from agentik.storage import open_postgres_storage
from agentik.storage.postgres._connect import connect
from agentik.storage.postgres._leases import NodeLease
from agentik.storage.postgres._watchdog import Watchdog
from tests import pgcluster
from tests.cluster import shards_spread, start_node, stop_nodes


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0


async def rounds(dsn: str, count: int) -> dict[str, float]:
    """Rounds of one lease, back to back (``NodeLease.round``)."""
    from tests.postgres import fresh_schema

    schema = fresh_schema()
    async with open_postgres_storage(dsn, schema=schema, readers=1, lease_seconds=20):
        pass  # the schema and its shards (made by the first node)
    watchdog = Watchdog()
    make = partial(connect, dsn, schema=schema, role="lease", timeout=10, watchdog=watchdog)
    lease = NodeLease(make, 20, "http://bench", watchdog=watchdog)
    await lease.join()
    times: list[float] = []
    try:
        for _ in range(count):
            began = time.perf_counter()
            await lease.round()
            times.append(time.perf_counter() - began)
    finally:
        await lease.leave()
    return {
        "rounds_per_s": len(times) / sum(times),
        "round_ms_p50": 1000 * statistics.median(times),
        "round_ms_p99": 1000 * _percentile(times, 0.99),
    }


async def _health(url: str) -> dict[str, Any]:
    async with httpx2.AsyncClient(timeout=30) as client:
        body: dict[str, Any] = (await client.get(f"{url}/health")).json()
    return body


async def burst(
    dsn: str, nodes: int, conversations: int, clients: int, lease: float, route: str = "turn"
) -> dict[str, Any]:
    """``route`` "turn": conversation i to node i % nodes (half forwarded on
    2 nodes); "owner": each to the node holding its shard (a cluster-aware
    client, no forwarding)."""
    from tests.postgres import fresh_database

    database = await trio.to_thread.run_sync(fresh_database, dsn)
    with tempfile.TemporaryDirectory(prefix="agentik-bench-shards-") as folder:
        async with trio.open_nursery() as nursery:
            started = [
                await start_node(nursery, database, "", lease=lease, cwd=Path(folder), model=False)
                for _ in range(nodes)
            ]
            try:
                await shards_spread(database, nodes)
                before = [await _health(n.url) for n in started]
                holder: dict[int, int] = {}
                if route == "owner":
                    holder = await trio.to_thread.run_sync(
                        _holders, database, [n.url for n in started], conversations
                    )
                latencies: list[float] = []
                statuses: dict[int, int] = {}
                errors: list[str] = []
                next_id = iter(range(conversations))

                async def client(index: int) -> None:
                    sessions = [BenchClient(n.url, {}) for n in started]
                    try:
                        for number in next_id:
                            session = sessions[holder.get(number, number % nodes)]
                            body = json.dumps({"text": f"hello {number}"}).encode()
                            began = time.perf_counter()
                            try:
                                reply = await session.post(
                                    f"/agentik/conversations/burst-{number}/turns", body
                                )
                            except (OSError, ConnectionError) as error:
                                errors.append(str(error))
                                continue
                            latencies.append(time.perf_counter() - began)
                            statuses[reply.status] = statuses.get(reply.status, 0) + 1
                    finally:
                        for session in sessions:
                            await session.aclose()

                began = time.perf_counter()
                async with trio.open_nursery() as senders:
                    for index in range(clients):
                        senders.start_soon(client, index)
                seconds = time.perf_counter() - began
                after = [await _health(n.url) for n in started]
            finally:
                await stop_nodes(started)
            nursery.cancel_scope.cancel()
    lost = [
        b["lease"]["node_id"] != a["lease"]["node_id"] or a["lease"]["last_renewal_error"]
        for b, a in zip(before, after, strict=True)
    ]
    ok = statuses.get(200, 0)
    return {
        "conversations": conversations,
        "ok": ok,
        "failed": conversations - ok,
        "statuses": statuses,
        "connection_errors": len(errors),
        "seconds": seconds,
        "turns_per_s": ok / seconds,
        "first_turn_ms_p50": 1000 * statistics.median(latencies) if latencies else 0.0,
        "first_turn_ms_p99": 1000 * _percentile(latencies, 0.99),
        "leases_lost": sum(bool(x) for x in lost),
        "shards_per_node": [a["lease"]["shards"] for a in after],
    }


def _holders(database: str, urls: list[str], conversations: int) -> dict[int, int]:
    """Burst conversation number -> the index in ``urls`` of its shard's holder."""
    from bench.cluster_nodes import shard_owners

    names = [f"burst-{number}" for number in range(conversations)]
    owners = shard_owners(database, names)
    return {number: urls.index(owners[name]) for number, name in enumerate(names)}


async def join(dsn: str, conversations: int, clients: int, lease: float) -> dict[str, Any]:
    """A burst of new conversations to one node while a second joins: the
    shards it takes move under load. A 503 (a shard being handed off) is
    retried after 50 ms, as a client honouring ``Retry-After`` would."""
    from tests.postgres import fresh_database

    database = await trio.to_thread.run_sync(fresh_database, dsn)
    with tempfile.TemporaryDirectory(prefix="agentik-bench-join-") as folder:
        async with trio.open_nursery() as nursery:
            first = await start_node(
                nursery, database, "", lease=lease, cwd=Path(folder), model=False
            )
            started = [first]
            latencies: list[float] = []
            retried = failed = 0
            next_id = iter(range(conversations))

            async def client() -> None:
                nonlocal retried, failed
                session = BenchClient(first.url, {})
                try:
                    for number in next_id:
                        body = json.dumps({"text": f"hello {number}"}).encode()
                        began = time.perf_counter()
                        while True:
                            try:
                                reply = await session.post(
                                    f"/agentik/conversations/join-{number}/turns", body
                                )
                            except (OSError, ConnectionError):
                                failed += 1
                                break
                            if reply.status != 503:
                                break
                            retried += 1
                            await trio.sleep(0.05)
                        failed += reply.status != 200
                        latencies.append(time.perf_counter() - began)
                finally:
                    await session.aclose()

            try:
                began = time.perf_counter()
                async with trio.open_nursery() as senders:
                    for _ in range(clients):
                        senders.start_soon(client)
                    await trio.sleep(2)
                    joined_at = time.perf_counter()
                    started.append(
                        await start_node(
                            nursery, database, "", lease=lease, cwd=Path(folder), model=False
                        )
                    )
                    await shards_spread(database, 2)
                    spread_after = time.perf_counter() - joined_at
                seconds = time.perf_counter() - began
            finally:
                await stop_nodes(started)
            nursery.cancel_scope.cancel()
    return {
        "conversations": conversations,
        "failed": failed,
        "retried_503": retried,
        "seconds": seconds,
        "even_spread_seconds_after_join": spread_after,
        "first_turn_ms_p50": 1000 * statistics.median(latencies) if latencies else 0.0,
        "first_turn_ms_p99": 1000 * _percentile(latencies, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--conversations", type=int, default=30_000)
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--lease", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--dsn", default=None, help="a PostgreSQL to use instead of a new one")
    parser.add_argument(
        "--route",
        nargs="+",
        choices=("turn", "owner"),
        default=["turn", "owner"],
        help="burst: conversations to the nodes in turn (some forwarded), or each"
        " to its shard's holder (a cluster-aware client)",
    )
    parser.add_argument("--only", nargs="+", choices=("rounds", "burst", "join"))
    args = parser.parse_args()
    load = [os.getloadavg()[0]]

    only = set(args.only or ("rounds", "burst", "join"))

    def run(dsn: str) -> None:
        if "rounds" in only:
            print(json.dumps({"rounds": trio.run(rounds, dsn, args.rounds)}), flush=True)
        for route in args.route if "burst" in only else ():
            figures = trio.run(
                burst, dsn, args.nodes, args.conversations, args.clients, args.lease, route
            )
            print(json.dumps({f"burst ({route})": figures}), flush=True)
        if "join" in only:
            joined = trio.run(join, dsn, args.conversations // 3, args.clients // 2, args.lease)
            print(json.dumps({"join": joined}), flush=True)

    if args.dsn:
        run(args.dsn)
    else:
        with pgcluster.cluster(fsync=True) as dsn:
            run(dsn)
    load.append(os.getloadavg()[0])
    print(f"load average {load[0]:.1f} -> {load[1]:.1f}; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
