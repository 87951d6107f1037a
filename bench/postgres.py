"""PostgreSQL benchmark: message appends per second through the PostgreSQL
writer against raw psycopg ``executemany`` into the same schema, and turns
per second through HAProxy in front of 1, 2 and 3 ``agentik serve`` nodes.

    python -m bench.postgres [--runs 3] [--messages 20000] [--content-chars 500]
                             [--conversations 100] [--turns 5] [--lease 20]
                             [--skip-appends] [--skip-cluster] [--skip-failover]

It starts its own throwaway PostgreSQL cluster (tests/pgcluster.py) with
``fsync`` on and PostgreSQL's defaults otherwise (``synchronous_commit``
on: every COMMIT waits for its WAL flush), on a Unix socket.

Appends: as bench/storage.py measures SQLite. The writer side is 1, 100 and
1,000 concurrent trio tasks (each task its own conversation) each calling
``MessageStore.append`` (which waits for its commit); the raw side is one
thread inserting the same rows with psycopg's ``executemany`` (pipeline mode)
1,000 rows per transaction, into a fresh schema from agentik's own migrations,
rows built before the clock starts. Medians of ``--runs`` interleaved runs.

Cluster: N nodes (the scripted demo model, so the figure is agentik's own
cost plus PostgreSQL's), HAProxy from deploy/haproxy.cfg in front, and
``agentik bench --url <balancer>`` (``--conversations`` × ``--turns``) run
against it as a separate process, on the same 2 cores as everything else.

Failover: three nodes with ``--lease`` seconds of lease, 8 conversations each
sending turn after turn (a model answering after 10 ms) to random nodes,
retrying with the same idempotency key; the owner of one conversation is
killed with SIGKILL, and the figure is the time from the kill until every
conversation has had a turn acknowledged again (the dead node's ones wait for
its lease to expire). ``--runs`` rounds, each killing one more node (a fresh
one replaces it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import psycopg
import trio

from agentik.storage import open_postgres_storage
from bench.storage import _append_all, content, messages
from tests import pgcluster
from tests.cluster import (
    Load,
    Node,
    RecordingModel,
    owner_url,
    start_haproxy,
    start_node,
    stop_nodes,
)

_INSERT = (
    "INSERT INTO message (conversation_id, seq, role, content, tool_calls, tool_call_id,"
    " prompt_tokens, completion_tokens, created_at, idempotency_key)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def raw_rate(dsn: str, tasks: int, total: int, chars: int) -> float:
    """Rows per second of psycopg executemany, 1,000 rows per transaction, in
    a fresh schema made by agentik's migrations."""
    schema = f"raw_{time.time_ns()}"

    async def make_schema() -> None:
        async with open_postgres_storage(dsn, schema=schema, readers=1):
            pass

    trio.run(make_schema)
    now = time.time()
    from datetime import UTC, datetime

    created = datetime.fromtimestamp(now, UTC)
    rows = [
        (
            f"conversation-{t}".encode(),
            i + 1,
            "user",
            content(t, i, chars).encode(),
            None,
            None,
            None,
            None,
            created,
            None,
        )
        for i in range(total // tasks)
        for t in range(tasks)
    ]
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"SET search_path TO {schema}")
        cursor = connection.cursor()
        start = time.perf_counter()
        for position in range(0, len(rows), 1000):
            with connection.transaction():
                cursor.executemany(_INSERT, rows[position : position + 1000])
        elapsed = time.perf_counter() - start
    return len(rows) / elapsed


def writer_rate(dsn: str, tasks: int, total: int, chars: int) -> tuple[float, float]:
    rows = messages(tasks, total, chars)

    async def main() -> tuple[float, float]:
        from agentik.storage import writer_stats

        schema = f"writer_{time.time_ns()}"
        async with open_postgres_storage(dsn, schema=schema) as bundle:
            rate = await _append_all(bundle.message_store, rows)
            stats = writer_stats(bundle)
            assert stats is not None
            return rate, stats.writes / max(stats.batches, 1)

    return trio.run(main)


def appends(dsn: str, runs: int, total: int, chars: int) -> list[str]:
    lines = [
        "| message chars | tasks | writer appends/s | mean batch | raw executemany rows/s"
        " | writer/raw |",
        "|---|---|---|---|---|---|",
    ]
    for tasks in (1, 100, 1000):
        count = total if tasks > 1 else min(total, 2000)
        writer, batches, raw = [], [], []
        for _ in range(runs):
            rate, batch = writer_rate(dsn, tasks, count, chars)
            writer.append(rate)
            batches.append(batch)
            raw.append(raw_rate(dsn, tasks, count, chars))
        ratio = statistics.median(w / r for w, r in zip(writer, raw, strict=True))
        line = (
            f"| {chars:,} | {tasks:,} | {statistics.median(writer):,.0f}"
            f" | {statistics.median(batches):,.0f} | {statistics.median(raw):,.0f}"
            f" | **{ratio:.0%}** |"
        )
        print(line, flush=True)
        lines.append(line)
    return lines


async def cluster_rate(dsn: str, nodes: int, conversations: int, turns: int) -> dict[str, float]:
    from tests.postgres import fresh_database

    database = await trio.to_thread.run_sync(fresh_database, dsn)
    with tempfile.TemporaryDirectory(prefix="agentik-bench-cluster-") as name:
        return await _cluster_rate_in(Path(name), database, nodes, conversations, turns)


async def _cluster_rate_in(
    folder: Path, database: str, nodes: int, conversations: int, turns: int
) -> dict[str, float]:
    async with trio.open_nursery() as nursery:
        started = [
            await start_node(nursery, database, "", lease=20, cwd=folder, model=False)
            for _ in range(nodes)
        ]
        balancer, url = await start_haproxy(nursery, [n.url for n in started], folder)
        try:
            result = await trio.run_process(
                [
                    sys.executable,
                    "-m",
                    "agentik.cli",
                    "bench",
                    "--url",
                    url,
                    "--conversations",
                    str(conversations),
                    "--turns",
                    str(turns),
                    "--json",
                    "--no-progress",
                ],
                capture_stdout=True,
                env={k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")},
            )
        finally:
            balancer.kill()
            await balancer.wait()
            await stop_nodes(started)
        nursery.cancel_scope.cancel()
    figures: dict[str, float] = json.loads(result.stdout)
    return figures


def cluster(dsn: str, conversations: int, turns: int, runs: int) -> list[str]:
    lines = [
        "| nodes | turns/s (median) | p50 ms | p99 ms | bench client CPU ms per turn |",
        "|---|---|---|---|---|",
    ]
    for nodes in (1, 2, 3):
        results = [trio.run(cluster_rate, dsn, nodes, conversations, turns) for _ in range(runs)]
        rate = statistics.median(r["turns_per_s"] for r in results)
        p50 = statistics.median(r["latency_ms_p50"] for r in results)
        p99 = statistics.median(r["latency_ms_p99"] for r in results)
        cpu = statistics.median(r["client_cpu_ms_per_turn"] for r in results)
        line = f"| {nodes} | {rate:,.0f} | {p50:,.1f} | {p99:,.1f} | {cpu:.3f} |"
        print(line, flush=True)
        lines.append(line)
    return lines


async def failover_times(dsn: str, lease: float, rounds: int) -> list[float]:
    """Seconds from each SIGKILL until every conversation is served again."""
    from tests.postgres import fresh_database

    database = await trio.to_thread.run_sync(fresh_database, dsn)
    with tempfile.TemporaryDirectory(prefix="agentik-bench-failover-") as name:
        return await _failover_times_in(Path(name), database, lease, rounds)


async def _failover_times_in(folder: Path, database: str, lease: float, rounds: int) -> list[float]:
    model = RecordingModel(delay=0.01)
    conversations = [f"f{i}" for i in range(8)]
    times: list[float] = []
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(nursery, database, model_url, lease=lease, cwd=folder)
            for _ in range(3)
        ]
        dead: list[Node] = []
        try:
            async with httpx2.AsyncClient(follow_redirects=True, timeout=60) as client:
                load = Load(nodes, client)
                async with trio.open_nursery() as senders:
                    for conversation in conversations:
                        senders.start_soon(load.run, conversation)
                    for _ in range(rounds):
                        await trio.sleep(1)  # load runs on every node
                        victim_url = await owner_url(database, random.choice(conversations))
                        victim = next(n for n in nodes if n.url == victim_url)
                        victim.kill()
                        killed_at = time.monotonic()
                        nodes.remove(victim)
                        dead.append(victim)
                        with trio.fail_after(lease + 30):
                            while not all(  # noqa: ASYNC110 (other processes' progress)
                                load.last_ack.get(c, 0) > killed_at for c in conversations
                            ):
                                await trio.sleep(0.01)
                        times.append(time.monotonic() - killed_at)  # polled every 10 ms
                        print(f"failover: {times[-1]:.2f} s", flush=True)
                        nodes.append(
                            await start_node(nursery, database, model_url, lease=lease, cwd=folder)
                        )
                    load.stop = True
        finally:
            await stop_nodes(nodes + dead)
        nursery.cancel_scope.cancel()
    assert model.overlaps() == [], "two turns of one conversation overlapped"
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--content-chars", type=int, default=500)
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--skip-cluster", action="store_true")
    parser.add_argument("--lease", type=float, default=20.0)
    parser.add_argument("--skip-appends", action="store_true")
    parser.add_argument("--skip-failover", action="store_true")
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    with pgcluster.cluster(fsync=True) as dsn:
        lines = (
            [] if args.skip_appends else appends(dsn, args.runs, args.messages, args.content_chars)
        )
        if not args.skip_cluster:
            lines += ["", *cluster(dsn, args.conversations, args.turns, args.runs)]
        if not args.skip_failover:
            times = trio.run(failover_times, dsn, args.lease, args.runs)
            lines += [
                "",
                f"failover (3 nodes, lease {args.lease:g} s, SIGKILL, {len(times)} rounds):"
                " every conversation served again after "
                + ", ".join(f"{t:.2f}" for t in times)
                + " s",
            ]
    load.append(os.getloadavg()[0])
    print("\n".join(lines))
    print(f"load average {load[0]:.1f} -> {load[1]:.1f}; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
