"""Several ``agentik serve`` nodes on one PostgreSQL, measured from outside:
node CPU a turn for 1-3 nodes, and faults under load (``bench.cluster``
measures the shard leases themselves: rounds, a burst, a join).

Every figure of issue 33 in one run, on this machine's loopback, with the
raw-socket keep-alive client of ``agentik bench --url``
(``agentik.benchmark._http.BenchClient``: one connection per conversation and
node, llhttp parsing) so the figures are the nodes', not the client's; the
client's own CPU a turn is printed beside the nodes'. Each phase runs on a
fresh database; nodes run the scripted demo model (instant) unless a phase
needs the recording model (``tests.cluster.RecordingModel``, which proves no
two model calls of one conversation overlapped, wherever they ran).

Phases:

- ``scale``: N conversations x T turns, each turn sent to a random node, for
  1, 2 and 3 nodes: turns/s, p50/p99, node CPU a turn (the nodes' user+system
  time over the turns), and its ratio to one node's. ``--per-node``: N
  conversations per node (each node as loaded as the one node was), so the
  ratio is what being one of several costs a node, not a lighter load's
  smaller batches.
- ``burst``: a burst of new conversations (one turn each, ``--burst``,
  at most ``--in-flight`` at once) on 2 nodes: new conversations a second,
  first-turn p50/p99, turns failed, leases lost (the nodes' logs).
- ``kill``: 3 nodes under load; SIGKILL one: the longest any conversation
  waited for an answer after the kill, requests that failed to connect,
  acknowledged turns lost (read back), model calls of one conversation that
  overlapped (two nodes running its turns at once).
- ``stop``: 3 nodes under load; SIGSTOP one for 3 leases, then SIGCONT:
  turns failed on the healthy nodes, leases the healthy nodes lost.

``--haproxy`` sends everything through HAProxy (deploy/haproxy.cfg) instead
of to random nodes.

    python -m bench.cluster_nodes                        # every phase
    python -m bench.cluster_nodes --phases scale --conversations 300 --turns 5
    python -m bench.cluster_nodes --phases burst --burst 30000
    python -m bench.cluster_nodes --dsn postgresql://... --lease 3

The database server: ``--dsn``, else ``AGENTIK_TEST_POSTGRES_DSN`` (start a
throwaway one with ``python -m tests.pgcluster start DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx2
import trio

from agentik.benchmark._http import BenchClient
from tests.cluster import (
    Node,
    RecordingModel,
    shards_spread,
    start_haproxy,
    start_node,
    stop_nodes,
)
from tests.postgres import fresh_database

PHASES = ("scale", "burst", "kill", "stop")
_LOST_LEASE = ("lease renewal failed", "lost its lease: its shards", "could not join")


def node_cpu(node: Node) -> float:
    """User + system seconds of a node's process (``/proc``: Linux)."""
    fields = Path(f"/proc/{node.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lease_losses(node: Node) -> int:
    """Failed renewals, leases lost and joins after the first (a node that
    lost its lease joins again under a new id), from the node's log."""
    failed = sum(1 for line in node.log if any(word in line for word in _LOST_LEASE))
    joins = sum(1 for line in node.log if " joined (lease " in line)
    return failed + max(0, joins - 1)


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@attrs.define
class Driver:
    """Conversations sending turns to the nodes (or the balancer) over raw
    keep-alive sockets; a failed request is retried, same idempotency key,
    on another node after ``pause`` seconds."""

    urls: list[str]
    pause: float = 0.05
    owners: dict[str, str] | None = None
    """Each conversation's owner: with ``route`` "owner" its turns go there
    (a cluster-aware client), with "other" to a node that is not its owner
    (every turn forwarded); None: a random node."""
    route: str = "random"
    latencies: list[float] = attrs.Factory(list)
    acked: dict[str, int] = attrs.Factory(dict)
    failures: int = 0
    """Answers other than 200 (each retried)."""
    statuses: dict[str, int] = attrs.Factory(dict)
    """How many answers of each status other than 200, with their error code
    ("503 at_capacity"), where the body names one."""
    failed_at: dict[str, int] = attrs.Factory(dict)
    """Answers other than 200 and requests that reached no node, by node URL."""
    slowest: dict[str, float] = attrs.Factory(dict)
    """The longest one request took, answered or not, by node URL."""
    refused: int = 0
    """Requests that could not reach a node (each retried)."""
    last_ack: dict[str, float] = attrs.Factory(dict)
    longest_gap: float = 0.0
    """The longest any conversation waited from one answer to the next."""
    clients: dict[tuple[str, str], BenchClient] = attrs.Factory(dict)
    """One per conversation and node: a client sends one request at a time."""
    running: bool = True

    def client(self, conversation: str, url: str) -> BenchClient:
        key = (conversation, url)
        found = self.clients.get(key)
        if found is None:
            found = self.clients[key] = BenchClient(url, {"content-type": "application/json"})
        return found

    async def turn(self, conversation: str, n: int, *, urls: list[str] | None = None) -> bool:
        """One turn, retried until answered while ``running``; whether it was."""
        body = json.dumps(
            {"text": f"{conversation} {n}", "idempotency_key": f"{conversation}-{n}"}
        ).encode()
        started = time.monotonic()
        while self.running:
            url = self._pick(conversation, urls or self.urls)
            client = self.client(conversation, url)
            sent = time.monotonic()
            try:
                reply = await client.post(f"/agentik/conversations/{conversation}/turns", body)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
                self._took(url, sent, failed=True)
                self.refused += 1
                await client.aclose()
                self.clients.pop((conversation, url), None)
                await trio.sleep(self.pause)
                continue
            self._took(url, sent, failed=reply.status != 200)
            if reply.status == 200:
                now = time.monotonic()
                self.latencies.append(now - started)
                self.acked[conversation] = n
                last = self.last_ack.get(conversation)
                if last is not None:
                    self.longest_gap = max(self.longest_gap, now - last)
                self.last_ack[conversation] = now
                return True
            self.failures += 1
            kind = f"{reply.status} {_error_code(reply.body)}".rstrip()
            self.statuses[kind] = self.statuses.get(kind, 0) + 1
            await trio.sleep(self.pause)
        return False

    def _took(self, url: str, sent: float, *, failed: bool) -> None:
        self.slowest[url] = max(self.slowest.get(url, 0.0), time.monotonic() - sent)
        if failed:
            self.failed_at[url] = self.failed_at.get(url, 0) + 1

    def _pick(self, conversation: str, urls: list[str]) -> str:
        owner = None if self.owners is None else self.owners.get(conversation)
        if owner is None or self.route == "random":
            return random.choice(urls)
        if self.route == "owner":
            return owner
        return random.choice([u for u in urls if u != owner] or urls)

    async def forget(self, conversation: str) -> None:
        """Close a conversation's connections (it sends no more turns)."""
        for url in self.urls:
            client = self.clients.pop((conversation, url), None)
            if client is not None:
                await client.aclose()

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()


async def _nodes(
    nursery: trio.Nursery,
    dsn: str,
    count: int,
    lease: float,
    folder: Path,
    model_url: str | None = None,
) -> tuple[str, list[Node]]:
    database = fresh_database(dsn)
    nodes = [
        await start_node(
            nursery,
            database,
            model_url or "",
            lease=lease,
            cwd=folder,
            model=model_url is not None,
        )
        for _ in range(count)
    ]
    await shards_spread(database, count)  # measured once no shard is being handed off
    return database, nodes


async def _front(
    nursery: trio.Nursery, nodes: list[Node], folder: Path, haproxy: bool
) -> tuple[list[str], trio.Process | None]:
    if not haproxy:
        return [n.url for n in nodes], None
    process, url = await start_haproxy(nursery, [n.url for n in nodes], folder)
    return [url], process


async def _run_each(count: int, limit: int, body: Callable[[int], Awaitable[None]]) -> None:
    """``body(i)`` for i < count, at most ``limit`` at once."""
    gate = trio.CapacityLimiter(limit)

    async def one(i: int) -> None:
        async with gate:
            await body(i)

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)


async def scale(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    """For each route, the nodes counts in turn; each row's CPU is compared
    with one node's (``cpu_vs_one``, ``against_one``)."""
    rows = []
    for route in args.route:
        mine = [await _scale_once(args, folder, count, route) for count in args.nodes]
        cpu = [row["node_cpu_us"] for row in mine]
        for row, (ratio, against) in zip(mine, against_one(args.nodes, cpu), strict=True):
            row["cpu_vs_one"], row["against_one"] = ratio, against
        rows += mine
    return rows


def against_one(counts: list[int], cpu: list[float]) -> list[tuple[float, str]]:
    """Each run's CPU a turn over one node's measured nearest it, and which
    runs that was (1-based): the mean of the closest other one-node run
    before it and the closest after it (either, if one is missing). So
    ``--nodes 1 3 1 3 1`` brackets every 3-node run with one-node runs and
    the machine's drift (here often more than the 1.2x target over a few
    minutes) falls out; a one-node run's own ratio is that drift. With no
    other one-node run, the first run is the base."""
    ones = [i for i, count in enumerate(counts) if count == 1]
    out = []
    for i, value in enumerate(cpu):
        before = [j for j in ones if j < i]
        after = [j for j in ones if j > i]
        near = before[-1:] + after[:1] or [0]
        base = sum(cpu[j] for j in near) / len(near)
        out.append((value / base, "+".join(str(j + 1) for j in near)))
    return out


def shard_owners(database: str, conversations: list[str]) -> dict[str, str]:
    """Each conversation's owner's URL: its shard's holder (what a
    cluster-aware client or balancer would know from the nodes' shard map)."""
    import psycopg

    from agentik.storage import shard_of

    with psycopg.connect(database) as connection:
        row = connection.execute(
            "SELECT value::integer FROM agentik.agentik_setting WHERE name = 'shards'"
        ).fetchone()
        assert row is not None
        shards = int(row[0])
        holders: dict[int, str] = dict(
            connection.execute(
                "SELECT s.shard, n.url FROM agentik.agentik_shard s JOIN agentik.agentik_node n"
                " USING (node_id) WHERE n.expires_at > clock_timestamp()"
            ).fetchall()
        )
    return {c: holders[shard_of(c, shards)] for c in conversations}


@asynccontextmanager
async def _profiled(nodes: list[Node], folder: str | None, label: str) -> AsyncIterator[None]:
    """``py-spy record`` on every node while the block runs (``--profile``):
    collapsed stacks in ``folder/<label>-node<i>.txt``."""
    if folder is None:
        yield
        return
    await trio.Path(folder).mkdir(parents=True, exist_ok=True)
    spies = [
        await trio.lowlevel.open_process(
            [
                "py-spy",
                "record",
                "--pid",
                str(node.process.pid),
                "--format",
                "raw",
                "--rate",
                "500",
                "--nonblocking",
                "--output",
                str(Path(folder) / f"{label}-node{i}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i, node in enumerate(nodes)
    ]
    await trio.sleep(0.5)  # py-spy attached
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        with trio.move_on_after(10):
            for spy in spies:
                await spy.wait()


def _error_code(body: bytes) -> str:
    """The ``error.code`` of an agentik error body; "" for anything else (a
    balancer's own page)."""
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return ""
    return code if isinstance(code, str) else ""


async def _scale_once(
    args: argparse.Namespace, folder: Path, count: int, route: str
) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        database, nodes = await _nodes(nursery, args.dsn, count, args.lease, folder)
        urls, balancer = await _front(nursery, nodes, folder, args.haproxy)
        prefix = f"s{count}{route[0]}-{os.getpid()}-"
        n = args.conversations * (count if args.per_node else 1)
        warm = Driver(urls)  # each conversation's first turn: its claim
        await _run_each(n, n, lambda i: _turns(warm, prefix, i, 1))
        # Its connections closed: kept open, they would hold half of each
        # node's max_connections idle (the nodes' keep-alive is 300 s here),
        # and past 500 conversations the measured driver's would wait behind them.
        await warm.aclose()
        owners = None
        if route != "random":
            names = [f"{prefix}{i}" for i in range(n)]
            owners = await trio.to_thread.run_sync(shard_owners, database, names)
        driver = Driver(urls, owners=owners, route=route)
        cpu0 = [node_cpu(node) for node in nodes]
        client0 = time.process_time()
        started = time.monotonic()
        async with _profiled(nodes, args.profile, f"{count}-{route}"):
            await _run_each(n, n, lambda i: _turns(driver, prefix, i, args.turns, first=2))
        elapsed = time.monotonic() - started
        turns = len(driver.latencies)
        each = [node_cpu(node) - c for node, c in zip(nodes, cpu0, strict=True)]
        cpu = sum(each)
        row = {
            "nodes": count,
            "route": route,
            "turns": turns,
            "turns_per_s": turns / elapsed,
            "p50_ms": 1000 * _percentile(driver.latencies, 0.5),
            "p99_ms": 1000 * _percentile(driver.latencies, 0.99),
            "node_cpu_us": 1e6 * cpu / turns,
            "client_cpu_us": 1e6 * (time.process_time() - client0) / turns,
            "failed": driver.failures,
            "each_node_us": "/".join(f"{1e6 * c / turns:.0f}" for c in each),
        }
        await driver.aclose()
        await stop_nodes(nodes)
        if balancer is not None:
            balancer.kill()
        nursery.cancel_scope.cancel()
    return row


async def _turns(driver: Driver, prefix: str, i: int, turns: int, *, first: int = 1) -> None:
    for n in range(first, first + turns):
        if not await driver.turn(f"{prefix}{i}", n):
            return


async def burst(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    async with trio.open_nursery() as nursery:
        _, nodes = await _nodes(nursery, args.dsn, 2, args.lease, folder)
        urls, balancer = await _front(nursery, nodes, folder, args.haproxy)
        driver = Driver(urls)
        prefix = f"b-{os.getpid()}-"
        started = time.monotonic()

        async def first_turn(i: int) -> None:  # a connection each, closed after
            await _turns(driver, prefix, i, 1)
            await driver.forget(f"{prefix}{i}")

        await _run_each(args.burst, args.in_flight, first_turn)
        elapsed = time.monotonic() - started
        result = {
            "new_conversations": len(driver.latencies),
            "per_s": len(driver.latencies) / elapsed,
            "first_turn_p50_ms": 1000 * _percentile(driver.latencies, 0.5),
            "first_turn_p99_ms": 1000 * _percentile(driver.latencies, 0.99),
            "failed": driver.failures,
            "leases_lost": sum(lease_losses(n) for n in nodes),
        }
        if driver.statuses:
            print(f"burst: answers other than 200 by status: {driver.statuses}")
        await driver.aclose()
        await stop_nodes(nodes)
        if balancer is not None:
            balancer.kill()
        nursery.cancel_scope.cancel()
    return result


@attrs.frozen
class Outcome:
    """What a phase under load left: the driver, the model's record, the nodes
    and the acknowledged turns the database does not hold."""

    driver: Driver
    model: RecordingModel
    nodes: list[Node]
    lost: int


async def _under_load(
    args: argparse.Namespace,
    folder: Path,
    fault: Callable[[list[Node], Driver], Awaitable[None]],
) -> Outcome:
    """3 nodes calling the recording model, conversations sending turns to
    them, ``fault`` applied after a second of load; then the acknowledged
    turns are read back."""
    model = RecordingModel(delay=0.01)
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        database, nodes = await _nodes(nursery, args.dsn, 3, args.lease, folder, model_url)
        urls, balancer = await _front(nursery, nodes, folder, args.haproxy)
        driver = Driver(urls)
        prefix = f"k-{os.getpid()}-"

        async def conversation(i: int) -> None:
            n = 0
            while driver.running:
                n += 1
                await driver.turn(f"{prefix}{i}", n)

        async with trio.open_nursery() as load:
            for i in range(args.load_conversations):
                load.start_soon(conversation, i)
            await trio.sleep(1.0)
            driver.longest_gap = 0.0
            await fault(nodes, driver)
            driver.running = False
        await driver.aclose()
        await stop_nodes([n for n in nodes if n.process.returncode is None])
        if balancer is not None:
            balancer.kill()
        lost = await _lost_turns(nursery, database, driver, args.lease, folder)
        nursery.cancel_scope.cancel()
    return Outcome(driver, model, nodes, lost)


async def _lost_turns(
    nursery: trio.Nursery, database: str, driver: Driver, lease: float, folder: Path
) -> int:
    """Acknowledged turns whose user message is not stored, read back through
    a node started on the database once the others stopped."""
    node = await start_node(nursery, database, "", lease=lease, cwd=folder, model=False)
    lost = 0
    try:
        async with httpx2.AsyncClient(base_url=node.url, timeout=30) as client:
            for conversation, last in driver.acked.items():
                texts: set[str] = set()
                after = 0
                while True:
                    reply = await client.get(
                        f"/agentik/conversations/{conversation}/messages",
                        params={"after_seq": after, "limit": 1000},
                    )
                    page = reply.json()
                    texts.update(m["content"] for m in page["messages"])
                    if page["next_after_seq"] is None:
                        break
                    after = page["next_after_seq"]
                lost += sum(1 for n in range(1, last + 1) if f"{conversation} {n}" not in texts)
    finally:
        await stop_nodes([node])
    return lost


async def kill(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    async def fault(nodes: list[Node], driver: Driver) -> None:
        nodes[0].kill()
        if not args.haproxy:  # as a balancer's health check would: the rest
            driver.urls = [n.url for n in nodes[1:]]  # are only sent by redirects
        await trio.sleep(args.lease * 3 + 2)

    out = await _under_load(args, folder, fault)
    if out.driver.statuses:
        print(f"kill: answers other than 200 by status: {out.driver.statuses}")
    return {
        "longest_wait_s": out.driver.longest_gap,
        "lease_s": args.lease,
        "refused_requests": out.driver.refused,
        "failed_answers": out.driver.failures,
        "turns_acked": sum(out.driver.acked.values()),
        "acked_turns_lost": out.lost,
        "overlapping_calls": len(out.model.overlaps()),
    }


async def stop(args: argparse.Namespace, folder: Path) -> dict[str, float]:
    async def fault(nodes: list[Node], driver: Driver) -> None:
        nodes[0].process.send_signal(signal.SIGSTOP)
        try:
            if not args.haproxy:  # only the healthy nodes get turns meanwhile
                driver.urls = [n.url for n in nodes[1:]]
            await trio.sleep(args.lease * 3)
        finally:
            nodes[0].process.send_signal(signal.SIGCONT)
        await trio.sleep(args.lease)

    out = await _under_load(args, folder, fault)
    if out.driver.statuses:
        print(f"stop: answers other than 200 by status: {out.driver.statuses}")
    frozen = out.nodes[0].url
    healthy = [u for u in out.driver.slowest if u != frozen]
    return {
        "failed_on_healthy": sum(out.driver.failed_at.get(u, 0) for u in healthy),
        "failed_on_frozen": out.driver.failed_at.get(frozen, 0),
        "leases_lost_healthy": sum(lease_losses(n) for n in out.nodes[1:]),
        "slowest_healthy_s": max((out.driver.slowest[u] for u in healthy), default=0.0),
        "longest_wait_s": out.driver.longest_gap,
        "acked_turns_lost": out.lost,
        "overlapping_calls": len(out.model.overlaps()),
    }


def _table(title: str, rows: list[dict[str, Any]]) -> str:
    keys = list(rows[0])
    lines = [title, " | ".join(f"{k:>14}" for k in keys)]
    for row in rows:
        lines.append(" | ".join(f"{_fmt(row[k]):>14}" for k in keys))
    return "\n".join(lines)


def _fmt(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}"


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    report: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "scale" in args.phases:
            rows = await scale(args, folder)
            report["scale"] = rows
            print(_table("scale (node CPU a turn for 1..n nodes on one PostgreSQL):", rows))
        if "burst" in args.phases:
            row = await burst(args, folder)
            report["burst"] = row
            print(_table(f"burst of {args.burst:,} new conversations on 2 nodes:", [row]))
        if "kill" in args.phases:
            row = await kill(args, folder)
            report["kill"] = row
            print(_table("SIGKILL of one of 3 nodes under load:", [row]))
        if "stop" in args.phases:
            row = await stop(args, folder)
            report["stop"] = row
            print(_table("SIGSTOP of one of 3 nodes for 3 leases under load:", [row]))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("AGENTIK_TEST_POSTGRES_DSN"))
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--burst", type=int, default=30_000)
    parser.add_argument("--in-flight", type=int, default=1_000)
    parser.add_argument("--load-conversations", type=int, default=100)
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--haproxy", action="store_true")
    parser.add_argument(
        "--route",
        nargs="+",
        choices=("random", "owner", "other"),
        default=["random", "owner"],
        help="scale: each turn to a random node (forwarded when another holds"
        " its shard), to its conversation's owner (a cluster-aware client), or"
        " to a node that is not its owner (every turn forwarded)",
    )
    parser.add_argument(
        "--per-node",
        action="store_true",
        help="scale: --conversations per node (the same load on each node, however"
        " many), not in all",
    )
    parser.add_argument("--profile", help="scale: py-spy each node into this folder")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if not args.dsn:
        parser.error("no PostgreSQL: pass --dsn or set AGENTIK_TEST_POSTGRES_DSN")
    report = trio.run(main_async, args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
