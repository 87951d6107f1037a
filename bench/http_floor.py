"""Where an HTTP turn's time goes: the server's cost per request for apps of
increasing weight, beside an in-process turn.

Each variant is its own server child process, driven by ``bench.http_load``'s
client (keep-alive, N connections, R requests each, POST with a small JSON
body unless said otherwise). Reported per request: CPU ms of the server
process (user + system), or with ``--callgrind`` millions of instructions
counted under valgrind, which do not move with the machine's load (but leave
out the kernel, and run about 50 times slower).

- ``raw``: a plain ASGI app that reads the body and answers ``{}``, on
  hypercorn's stock trio worker (``hypercorn.trio.serve``): the yardstick
  agentik's server was measured against.
- ``raw-agentik``: the same app on agentik's own HTTP/1.1 server
  (``agentik.server.http._connection``: trio + llhttp, one reader and one watcher task per
  connection, a task per request, one write per fixed-length response), as
  ``agentik serve`` runs every app below.
- ``starlette``: the same answer from a one-route Starlette app (on hypercorn).
- ``health``: agentik's app (``serve_agentik``, logging as ``agentik serve``),
  ``GET /health``.
- ``turn``: agentik's app, ``POST /agentik/conversations/{id}/turns``, the
  workload of ``bench.http_load`` (one tool call, four stored messages,
  SQLite FULL).
- ``in-process``: the same turns through ``agent.send``, no HTTP.

``--steps`` counts trio task steps (a task resumed once) and tasks spawned per
request instead: the scheduling an HTTP request adds, independent of load.

    python -m bench.http_floor --repeat 3 --gc-freeze
    python -m bench.http_floor --callgrind raw turn in-process
    python -m bench.http_floor --steps
"""

from __future__ import annotations

import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402

import trio  # noqa: E402

from bench.http_load import (  # noqa: E402
    bench_toolset,
    child,
    child_cpu,
    drive,
    in_process,
    post,
    tune_gc,
)

VARIANTS = (
    "raw",
    "raw-agentik",
    "starlette",
    "health",
    "turn",
    "in-process",
)
HEALTH = b"GET /health HTTP/1.1\r\nHost: bench\r\n\r\n"
__all__ = ["bench_toolset"]  # the agentik child loads it as __main__:bench_toolset

Scope = dict[str, object]
Receive = Callable[[], Awaitable[dict[str, object]]]
Send = Callable[[dict[str, object]], Awaitable[None]]


class Steps(trio.abc.Instrument):
    """Counts task steps and spawns; ``report`` writes them to stderr (on SIGUSR1)."""

    def __init__(self) -> None:
        self.steps = 0
        self.spawns = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawns += 1

    def report(self, *_: object) -> None:
        print(f"trio-steps {self.steps} {self.spawns}", file=sys.stderr, flush=True)


def reported_steps(log: str) -> tuple[int, int]:
    with open(log) as f:
        last = [line.split() for line in f if line.startswith("trio-steps ")][-1]
    return int(last[1]), int(last[2])


async def raw_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": f"{message['type']}.complete"})
            if message["type"] == "lifespan.shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


def starlette_app() -> object:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def turn(request: Request) -> Response:
        await request.body()
        return Response(b"{}", media_type="application/json")

    return Starlette(routes=[Route("/agentik/conversations/{cid}/turns", turn, methods=["POST"])])


async def plain_child(variant: str) -> None:
    """A server of ``raw``, ``raw-agentik`` or ``starlette``, printing its URL first."""
    if variant == "raw-agentik":
        from agentik.server.http import HttpSettings
        from agentik.server.http._serve import serve

        settings = HttpSettings(keep_alive_timeout=600)  # valgrind is slow
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                lambda task_status: serve(raw_app, settings=settings, task_status=task_status)  # type: ignore[arg-type]
            )
            print(binds[0], flush=True)
        return
    import logging

    from hypercorn.config import Config
    from hypercorn.trio import serve as hypercorn_serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.backlog = 2048
    config.errorlog = logging.getLogger("bench")
    config.keep_alive_timeout = 600  # valgrind is slow
    app = starlette_app() if variant == "starlette" else raw_app
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: hypercorn_serve(app, config, task_status=task_status)  # type: ignore[arg-type]
        )
        print(binds[0], flush=True)


def start(
    variant: str, tmp: str, args: argparse.Namespace, callgrind: str | None, repeat: int
) -> subprocess.Popen[str]:
    # A fresh database per run: the same conversations in a reused one grow
    # their history, and each repeat's turns cost more than the last.
    command = [sys.executable, __file__, "--child", variant, f"{tmp}/{variant}-{repeat}.db"]
    command += ["--gc-freeze"] * args.gc_freeze + ["--steps"] * args.steps
    if callgrind:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={callgrind}", *command]
    with open(f"{tmp}/{variant}.log", "w") as log:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)


def instructions(process: subprocess.Popen[str], out: str, zero: bool) -> int:
    """Zero callgrind's counters, or dump them and return the instructions counted."""
    command = ["callgrind_control", "-z" if zero else "-d", str(process.pid)]
    subprocess.run(command, check=True, capture_output=True)
    if zero:
        return 0
    time.sleep(1)
    (dump,) = glob.glob(f"{out}.*")
    with open(dump) as f:
        found = re.search(r"^(?:summary|totals): (\d+)", f.read(), flags=re.MULTILINE)
    assert found is not None
    return int(found.group(1))


def in_process_instructions(args: argparse.Namespace, tmp: str, repeat: int) -> float:
    """Instructions per in-process turn: two runs under valgrind, the difference."""
    counted = []
    for turns in (2, 2 + args.requests):
        database = f"{tmp}/ip-{turns}-{repeat}.db"
        command = [sys.executable, __file__, "--child", "in-process", database]
        command += ["--clients", str(args.clients), "--requests", str(turns)]
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/ip.cg", *command],
            capture_output=True,
            text=True,
            check=True,
        )
        found = re.search(r"Collected : (\d+)", run.stderr)
        assert found is not None
        counted.append(int(found.group(1)))
    measured: int = args.clients * args.requests
    return (counted[1] - counted[0]) / measured / 1e6


def measure(variant: str, args: argparse.Namespace, tmp: str, repeat: int) -> float:
    n: int = args.clients
    each: int = args.requests
    if variant == "in-process":
        if args.callgrind:
            return in_process_instructions(args, tmp, repeat)
        trio.run(in_process, f"{tmp}/warm-{repeat}.db", n, 2)
        steps = Steps()
        result = trio.run(in_process, f"{tmp}/local-{repeat}.db", n, each, instruments=[steps])
        if args.steps:
            print(f"    {steps.spawns / (n * each):.2f} tasks spawned per turn", file=sys.stderr)
            return steps.steps / (n * each)
        return result["cpu_ms_per_turn"]
    out = f"{tmp}/{variant}-{repeat}.cg" if args.callgrind else None
    process = start(variant, tmp, args, out, repeat)
    log = f"{tmp}/{variant}.log"
    try:
        assert process.stdout is not None
        host, port = process.stdout.readline().strip().removeprefix("http://").rsplit(":", 1)

        def requests(tag: str, count: int) -> list[list[bytes]]:
            if variant == "health":
                return [[HEALTH] * count for _ in range(n)]
            path = "/agentik/conversations/{}/turns"
            return [
                [post(path.format(f"{tag}{i}"), b'{"text": "turn %d"}' % t) for t in range(count)]
                for i in range(n)
            ]

        assert drive(host, int(port), requests("w", 2)).errors == 0  # warm up
        if out:
            instructions(process, out, zero=True)
        if args.steps:
            process.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            before_steps = reported_steps(log)
        before = child_cpu(process)
        assert drive(host, int(port), requests("m", each)).errors == 0
        if out:
            return instructions(process, out, zero=False) / (n * each) / 1e6
        if args.steps:
            process.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            stepped, spawned = (
                b - a for a, b in zip(before_steps, reported_steps(log), strict=True)
            )
            print(f"    {spawned / (n * each):.2f} tasks spawned per request", file=sys.stderr)
            return stepped / (n * each)
        return 1000 * (child_cpu(process) - before) / (n * each)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help=f"of {', '.join(VARIANTS)} (default: all)")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--requests", type=int, default=20, help="per client")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--gc-freeze", action="store_true")
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--steps", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("VARIANT", "DATABASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    variants = args.variants or list(VARIANTS)
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown variant {sorted(unknown)[0]!r}; choose from {', '.join(VARIANTS)}")
    if args.child:
        variant, database = args.child
        steps = Steps()
        if args.steps:
            signal.signal(signal.SIGUSR1, steps.report)
        if variant == "in-process":
            trio.run(in_process, database, args.clients, args.requests)
        elif variant in ("health", "turn"):
            trio.run(child, database, args.gc_freeze, instruments=[steps] * args.steps)
        else:
            if args.gc_freeze:
                tune_gc()
            trio.run(plain_child, variant, instruments=[steps] * args.steps)
        return
    if args.gc_freeze:
        tune_gc()
    if args.callgrind:
        args.clients, args.requests = min(args.clients, 50), min(args.requests, 10)
    results: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeat):
            for variant in variants:  # interleaved, so load changes hit all alike
                results[variant].append(measure(variant, args, tmp, repeat))
                print(f"  {variant}: {results[variant][-1]:.3f}", file=sys.stderr)
    unit = "M instructions" if args.callgrind else "trio task steps" if args.steps else "CPU ms"
    print(
        f"\n{unit} per request, {args.clients} clients x {args.requests}, median of {args.repeat}"
    )
    for variant, values in results.items():
        spread = json.dumps([round(v, 3) for v in values])
        print(f"{variant:>18} {statistics.median(values):8.3f}   {spread}")


if __name__ == "__main__":
    main()
