"""``agentik bench --url``'s client, old and new, against one ``agentik serve``.

The server: ``agentik serve`` on a SQLite file (synchronous FULL, the demo
scripted model, instant), in its own process on 127.0.0.1. Each run is a
separate process (this script again, ``--one``) with its own conversation
prefix, so runs share the server but not conversations:

- ``old``: what ``agentik bench --url`` did before (an httpx 0.x
  ``AsyncClient`` whose pool is sized to the conversations,
  ``follow_redirects``), driven by the same closed loop;
- ``new``: ``agentik.benchmark.run_bench`` as ``agentik bench --url`` runs it
  now (one keep-alive connection per conversation, llhttp parsing).

Each prints turns/s and the client's CPU (process time) per turn; the
server's CPU per turn is read from /proc for the server process, so the two
can be compared.

    python -m bench.bench_client                       # N = 200 and 1000
    python -m bench.bench_client -n 200 --turns 5 --runs 2 --clients new old
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process has used, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_old(url: str, conversations: int, turns: int, prefix: str) -> dict[str, Any]:
    import httpx
    import trio

    limits = httpx.Limits(max_connections=conversations, max_keepalive_connections=conversations)
    ok = failed = 0
    async with httpx.AsyncClient(
        base_url=url, limits=limits, timeout=120.0, follow_redirects=True
    ) as client:

        async def conversation(i: int) -> None:
            nonlocal ok, failed
            for t in range(turns):
                try:
                    response = await client.post(
                        f"/agentik/conversations/{prefix}-{i}/turns",
                        json={"text": f"turn {t} of conversation {i}"},
                    )
                except httpx.HTTPError:  # the old bench stopped here; count it instead
                    failed += 1
                    continue
                if response.status_code == 200:
                    ok += 1
                else:
                    failed += 1

        cpu, started = time.process_time(), trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(conversations):
                nursery.start_soon(conversation, i)
        seconds = trio.current_time() - started
        cpu = time.process_time() - cpu
    return {
        "ok": ok,
        "failed": failed,
        "seconds": seconds,
        "turns_per_s": ok / seconds,
        "client_cpu_ms_per_turn": 1000 * cpu / max(1, ok + failed),
    }


async def run_new(url: str, conversations: int, turns: int, prefix: str) -> dict[str, Any]:
    from agentik.benchmark import BenchConfig, run_bench

    result = await run_bench(
        BenchConfig(conversations=conversations, turns=turns, url=url, prefix=prefix)
    )
    return {
        "ok": result.turns_ok,
        "failed": result.turns_failed + result.turns_overloaded,
        "seconds": result.seconds,
        "turns_per_s": result.turns_per_s,
        "client_cpu_ms_per_turn": result.client_cpu_ms_per_turn,
    }


def one(args: argparse.Namespace) -> None:
    import trio

    runner = run_old if args.one == "old" else run_new
    print(json.dumps(trio.run(runner, args.url, args.conversations, args.turns, args.prefix)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--conversations", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--clients", nargs="+", default=["old", "new"], choices=["old", "new"])
    parser.add_argument("--one", choices=["old", "new"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        args.conversations = args.conversations[0]
        one(args)
        return
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="agentik-bench-client-") as tmp:
        server = subprocess.Popen(
            [sys.executable, "-m", "agentik.cli", "serve", "--bind", f"127.0.0.1:{port}",
             "--database", os.path.join(tmp, "bench.db")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "AGENTIK_MAX_CONNECTIONS": "5000"},
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            print(f"agentik serve (SQLite, demo model) at {url}; load {os.getloadavg()[0]:.1f}")
            print("client  N     turns  turns/s  failed  client CPU ms/turn  server CPU ms/turn")
            run = 0
            for _ in range(args.runs):
                for n in args.conversations:
                    for client in args.clients:
                        run += 1
                        before = server_cpu(server.pid)
                        out = subprocess.run(
                            [sys.executable, "-m", "bench.bench_client", "--one", client,
                             "-n", str(n), "--turns", str(args.turns), "--url", url,
                             "--prefix", f"{client}{run}"],
                            capture_output=True, text=True, check=False,
                        )  # fmt: skip
                        used = server_cpu(server.pid) - before
                        if out.returncode:
                            print(f"{client:<7} {n:<5} failed: {out.stderr[-600:]}")
                            continue
                        r = json.loads(out.stdout)
                        print(
                            f"{client:<7} {n:<5} {r['ok']:<6} {r['turns_per_s']:>7,.0f}"
                            f"  {r['failed']:>6}  {r['client_cpu_ms_per_turn']:>18.3f}"
                            f"  {1000 * used / max(1, r['ok']):>18.3f}",
                            flush=True,
                        )
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
