"""Turns per second and latency over HTTP, beside the in-process figure from the same run.

Workload: N clients at once, each its own conversation, each running T turns
one after another (closed loop); every turn makes one tool call, so it
stores four messages. The model is ScriptedModel with bench_responder
(instant). Storage is SQLite with synchronous=FULL, as ``agentik serve`` runs.

- in-process: ``agent.send`` on an agent built as ``serve_agentik`` builds it.
- HTTP: ``agentik serve``'s app (``serve_agentik``) in a child process, driven
  by a minimal keep-alive HTTP/1.1 client (one connection per client,
  non-blocking sockets under one ``selectors`` loop, prebuilt requests), so
  the figure measures the server rather than a Python HTTP client; its own
  CPU per turn is reported too, since it shares the cores with the server.
  ``POST /agentik/conversations/{id}/turns`` with a JSON body.

    python -m bench.http_load                      # N = 100 and 1000, T = 5
    python -m bench.http_load -n 100 --turns 5 --repeat 3 [--gc-freeze]
"""

from __future__ import annotations

import os
import sys

# This file is named http.py: keep its folder off sys.path so that `import http`
# (httpx, h11, …) finds the standard library, not this script.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import attrs  # noqa: E402
import trio  # noqa: E402

from agentik.agent import open_chat_agent  # noqa: E402
from agentik.models import ScriptedModel, bench_responder  # noqa: E402
from agentik.server import ServerConfig  # noqa: E402
from agentik.storage import open_sqlite_storage  # noqa: E402
from agentik.toolsets import ToolsetContribution, tool  # noqa: E402


@tool
async def bench_echo() -> str:
    """Answers at once."""
    return "12:00"


def bench_toolset() -> ToolsetContribution:
    return ToolsetContribution(name="bench", description="Benchmark tools.", tools=(bench_echo,))


def model() -> ScriptedModel:
    return ScriptedModel(bench_responder("bench_echo"))


def summary(
    latencies: list[float], turns: int, elapsed: float, errors: int, cpu: float
) -> dict[str, float]:
    latencies.sort()
    return {
        "turns_per_s": turns / elapsed,
        "cpu_ms_per_turn": 1000 * cpu / turns,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "seconds": elapsed,
        "errors": errors,
    }


async def in_process(database: str, n: int, turns: int) -> dict[str, float]:
    latencies: list[float] = []
    async with (
        open_sqlite_storage(database) as storage,
        open_chat_agent(model=model(), storage=storage, toolsets=(bench_toolset(),)) as agent,
    ):

        async def client(i: int) -> None:
            for t in range(turns):
                began = time.perf_counter()
                await agent.send(f"c{i}", f"turn {t}")
                latencies.append(time.perf_counter() - began)

        began, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(client, i)
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    return summary(latencies, n * turns, elapsed, 0, cpu)


class Exchange:
    """One keep-alive HTTP/1.1 connection sending its requests one after another.

    The client side of the benchmark, kept cheap because it shares the two
    cores with the server: requests are prebuilt bytes, sockets are
    non-blocking under one ``selectors`` loop (no event-loop framework), and a
    response is read in full (its Content-Length) with only the status line
    and that header parsed."""

    def __init__(self, sock: socket.socket, requests: list[bytes]) -> None:
        self.sock = sock
        self.requests = requests
        self.next = 0
        self.buffer = b""
        self.length = -1
        """Bytes of the current response (head + body) once its head is in."""
        self.status = 0
        self.began = 0.0

    def start(self) -> None:
        self.began = time.perf_counter()
        self.sock.sendall(self.requests[self.next])  # a few hundred bytes: never blocks
        self.next += 1

    def received(self, chunk: bytes) -> bool:
        """Take bytes in; True when the whole current response is in."""
        self.buffer += chunk
        if self.length < 0:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = self.buffer[:end].lower()
            self.status = int(head.split(b" ", 2)[1])
            at = head.find(b"\r\ncontent-length:")
            if at < 0:
                raise ConnectionError("the response has no Content-Length")
            stop = head.find(b"\r\n", at + 17)
            self.length = end + 4 + int(head[at + 17 : stop if stop >= 0 else end])
        if len(self.buffer) < self.length:
            return False
        if len(self.buffer) > self.length:
            raise ConnectionError("the server sent more than one response")
        self.buffer, self.length = b"", -1
        return True


@attrs.frozen
class Driven:
    latencies: list[float]
    errors: int
    """Responses whose status was not 200."""
    seconds: float
    """From the first request sent to the last response in (connections are opened before)."""
    cpu: float
    """CPU seconds the client used meanwhile."""


def drive(host: str, port: int, requests: list[list[bytes]]) -> Driven:
    """Open one connection per list of requests, then run them all to the end."""
    selector = selectors.DefaultSelector()
    exchanges = []
    for batch in requests:
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        exchange = Exchange(sock, batch)
        selector.register(sock, selectors.EVENT_READ, exchange)
        exchanges.append(exchange)
    latencies: list[float] = []
    errors = 0
    began, cpu = time.perf_counter(), time.process_time()
    for exchange in exchanges:
        exchange.start()
    running = len(exchanges)
    while running:
        for key, _ in selector.select():
            exchange = key.data
            chunk = exchange.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            if not exchange.received(chunk):
                continue
            latencies.append(time.perf_counter() - exchange.began)
            errors += exchange.status != 200
            if exchange.next < len(exchange.requests):
                exchange.start()
            else:  # done: close it, as a client leaving would (the server may time it out)
                selector.unregister(exchange.sock)
                exchange.sock.close()
                running -= 1
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    selector.close()
    return Driven(latencies, errors, elapsed, cpu)


def post(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def over_http(host: str, port: int, n: int, turns: int, tag: str) -> dict[str, float]:
    requests = [
        [
            post(
                f"/agentik/conversations/{tag}{i}/turns", json.dumps({"text": f"turn {t}"}).encode()
            )
            for t in range(turns)
        ]
        for i in range(n)
    ]
    driven = drive(host, port, requests)
    result = summary(driven.latencies, n * turns, driven.seconds, driven.errors, 0.0)
    result["client_cpu_ms_per_turn"] = 1000 * driven.cpu / (n * turns)
    return result


def health_floor(host: str, port: int, clients: int, each: int) -> None:
    """GET /health from ``clients`` connections: the server's cost of a request
    that does nothing (the HTTP server + Starlette + agentik's guard)."""
    request = b"GET /health HTTP/1.1\r\nHost: bench\r\n\r\n"
    assert drive(host, port, [[request] * each for _ in range(clients)]).errors == 0


def tune_gc() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


async def child(database: str, gc_freeze: bool) -> None:
    """The server process: serve_agentik until SIGTERM, printing its URL first.
    It logs as ``agentik serve`` does (its stderr goes to a file)."""
    from agentik.cli._serve import setup_logging
    from agentik.server import serve_agentik

    setup_logging()
    if gc_freeze:
        tune_gc()
    stop = trio.Event()
    config = ServerConfig(port=0, database=database, toolsets=("__main__:bench_toolset",))
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    stop.set()
                    return

        nursery.start_soon(watch)
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config, model=model(), shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        print(url, flush=True)


def start_child(database: str, gc_freeze: bool) -> tuple[subprocess.Popen[str], str, int]:
    """The server, logging to ``{database}.log``."""
    command = [sys.executable, __file__, "--child", database]
    if gc_freeze:
        command.append("--gc-freeze")
    with open(f"{database}.log", "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return process, host, int(port)


def log_lines(database: str, what: str) -> int:
    with open(f"{database}.log") as f:
        return sum(what in line for line in f)


def child_cpu(process: subprocess.Popen[str]) -> float:
    """Seconds of CPU (user + system) the server process has used so far."""
    with open(f"/proc/{process.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median_row(results: list[dict[str, float]]) -> dict[str, float]:
    row = {key: statistics.median(r[key] for r in results) for key in results[0]}
    row["spread"] = [round(r["turns_per_s"]) for r in results]  # type: ignore[assignment]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--gc-freeze", action="store_true")
    parser.add_argument("--child", metavar="DATABASE", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if args.child:
        trio.run(child, args.child, args.gc_freeze)
        return
    if args.gc_freeze:
        tune_gc()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.n:
            local, remote = [], []
            for repeat in range(args.repeat):
                local.append(trio.run(in_process, f"{tmp}/local-{n}-{repeat}.db", n, args.turns))
                database = f"{tmp}/http-{n}-{repeat}.db"
                process, host, port = start_child(database, args.gc_freeze)
                try:
                    before = child_cpu(process)
                    remote.append(over_http(host, port, n, args.turns, f"r{repeat}-"))
                    spent = child_cpu(process) - before
                    remote[-1]["cpu_ms_per_turn"] = 1000 * spent / (n * args.turns)
                    before = child_cpu(process)
                    health_floor(host, port, 50, 40)
                    remote[-1]["floor_cpu_ms"] = 1000 * (child_cpu(process) - before) / 2000
                finally:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=60)
                requests = n * args.turns + 2000
                logged = log_lines(database, " request method=")
                if logged != requests:
                    raise SystemExit(f"the server logged {logged} request lines for {requests}")
                remote[-1]["ratio"] = remote[-1]["turns_per_s"] / local[-1]["turns_per_s"]
                print(
                    f"  N={n} run {repeat + 1}: in-process {local[-1]['turns_per_s']:.0f} turns/s,"
                    f" HTTP {remote[-1]['turns_per_s']:.0f} turns/s"
                    f" ({remote[-1]['ratio']:.0%})",
                    file=sys.stderr,
                )
            rows.append({"clients": n, "in_process": median_row(local), "http": median_row(remote)})
    if args.json:
        print(json.dumps({"turns": args.turns, "repeat": args.repeat, "rows": rows}, indent=2))
        return
    print(f"\n{args.turns} turns per client, one tool call per turn, SQLite FULL,", end=" ")
    print(f"median of {args.repeat}")
    print(
        f"{'clients':>8} | {'in-process t/s':>14} {'p50 ms':>7} {'p99 ms':>7} {'cpu ms':>6} | "
        f"{'HTTP t/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'cpu ms':>6} {'errors':>6} | "
        f"{'HTTP/in-proc':>12} | {'client cpu ms':>13} | {'GET /health cpu ms':>18}"
    )
    for row in rows:
        a, b = row["in_process"], row["http"]
        left = (
            f"{a['turns_per_s']:>14.0f} {a['p50_ms']:>7.1f} {a['p99_ms']:>7.1f}"
            f" {a['cpu_ms_per_turn']:>6.2f}"
        )
        right = (
            f"{b['turns_per_s']:>8.0f} {b['p50_ms']:>7.1f} {b['p99_ms']:>7.1f}"
            f" {b['cpu_ms_per_turn']:>6.2f}"
        )
        print(
            f"{row['clients']:>8} | {left} | {right} {b['errors']:>6.0f} | {b['ratio']:>12.0%}"
            f" | {b['client_cpu_ms_per_turn']:>13.2f} | {b['floor_cpu_ms']:>18.2f}"
        )
    print("cpu ms: CPU time per turn of the serving process (HTTP: the server process only);")
    print("client cpu ms: the HTTP client's (this process); HTTP/in-proc: median of per-run ratios")


if __name__ == "__main__":
    main()
