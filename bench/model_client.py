"""Thousands of conversations through ``OpenAICompatibleModel`` against a fake provider.

    python -m bench.model_client                         # N = 100, 1,000, 10,000; 2 turns
    python -m bench.model_client -n 1000 --variants default pool100 h2 stream keepalive20
    python -m bench.model_client -n 100 1000 --pydantic-ai

The provider is ``bench.fake_openai`` in its own process (latency log-normal,
median ``--median`` s, sigma 0.5: mean 1.13 x median; the latency of a call
is a function of its last message, the same in every run and for every
client). agentik runs ``open_chat_agent`` on in-memory storage (so the
figure is the model client plus the agent, not SQLite), every conversation
started at once, each sending ``--turns`` turns one after another; one model
call per turn.

For each run it prints: client CPU per model call (this process, all of it),
wall time against the ideal for the number of calls on the wire at once (the
same calls, the same latencies, a perfect FIFO of that many slots and no
overhead, computed in advance), p50/p99 turn latency, and the server's own
CPU per call. Variants:

- ``default``: ``OpenAICompatibleModel(url, model)`` with its defaults.
- ``poolN``: ``max_connections=N`` (say ``pool100``).
- ``h2``: HTTP/2 with prior knowledge, one connection multiplexing every
  call (``httpx2.AsyncClient(http1=False, http2=True)``, ``h2`` installed).
- ``stream``: turns through ``agent.stream`` (streaming requests).
- ``keepalive20``: the model's pool, but only 20 connections kept alive
  (httpx2's default).
- ``httpx``: as agentik was before the gate: an ``httpx.AsyncClient()`` with
  its defaults (100 connections, 20 kept alive) and no queue of agentik's own
  (when httpx is installed: it is no longer a dependency).
- ``scripted``: no HTTP at all: ``ScriptedModel`` sleeping the same
  latencies (300 at once), so the agent's own CPU per call shows, and the
  model client's is the difference.

``--pydantic-ai`` runs pydantic-ai (``OpenAIChatModel``, the openai SDK, its
default pool) on the same server in the same invocation, in a child process
(it runs on asyncio), when it is installed.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx2
import trio

from agentik.agent import open_chat_agent
from agentik.models import (
    DEFAULT_MAX_CONNECTIONS,
    FifoGate,
    ModelRequest,
    ModelResponse,
    OpenAICompatibleModel,
    ScriptedModel,
)
from agentik.storage import in_memory_storage
from bench.fake_openai import latency


def text(run: str, conversation: int, turn: int) -> str:
    return f"turn {turn} of conversation {conversation} ({run})"


def ideal_wall(latencies: list[list[float]], slots: int) -> float:
    """The closed loop's wall time on ``slots`` slots with no overhead: each
    conversation's turns one after another, waiting turns served FIFO."""
    waiting = deque((i, 0) for i in range(len(latencies)))
    running: list[tuple[float, int, int]] = []
    now = 0.0
    while waiting or running:
        while waiting and len(running) < slots:
            i, k = waiting.popleft()
            heapq.heappush(running, (now + latencies[i][k], i, k))
        now, i, k = heapq.heappop(running)
        if k + 1 < len(latencies[i]):
            waiting.append((i, k + 1))
    return now


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else 0.0


def server_stats(url: str) -> dict[str, float]:
    base = url.removesuffix("/v1")
    with httpx2.Client() as client:
        stats: dict[str, float] = client.get(f"{base}/stats").json()
    return stats


@contextmanager
def fake_server(median: float) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.fake_openai", "--median", str(median)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait()


class _Scripted:
    """The fake provider's latencies without HTTP, behind the same kind of gate."""

    def __init__(self, median: float) -> None:
        self.median = median
        self.gate = FifoGate(DEFAULT_MAX_CONNECTIONS)
        self.model = ScriptedModel(self.respond)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        key = request.messages[-1].content
        async with self.gate.slot(request):
            await trio.sleep(latency(key, self.median))
        return ModelResponse(text=f"reply to {key}")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self.model.complete(request)


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


def model_for(
    variant: str, url: str
) -> tuple[OpenAICompatibleModel, httpx2.AsyncClient | None, int]:
    """The model of a variant, the client it was given (to close), and its slots."""
    if variant.startswith("pool"):
        slots = int(variant.removeprefix("pool"))
        return OpenAICompatibleModel(url, "fake", max_connections=slots), None, slots
    if variant == "h2":
        slots = DEFAULT_MAX_CONNECTIONS
        client = httpx2.AsyncClient(
            http1=False, http2=True, timeout=None, limits=httpx2.Limits(max_connections=1)
        )
        return (
            OpenAICompatibleModel(url, "fake", client=client, max_connections=slots),
            client,
            slots,
        )
    if variant == "keepalive20":
        slots = DEFAULT_MAX_CONNECTIONS
        limits = httpx2.Limits(max_connections=slots, max_keepalive_connections=20)
        client = httpx2.AsyncClient(timeout=None, limits=limits)
        return (
            OpenAICompatibleModel(url, "fake", client=client, max_connections=slots),
            client,
            slots,
        )
    if variant == "httpx":
        import httpx  # the test extra still installs it

        old = httpx.AsyncClient(timeout=None)
        model = OpenAICompatibleModel(url, "fake", client=old, max_connections=1_000_000)  # type: ignore[arg-type]
        return model, old, 100  # type: ignore[return-value]
    if variant in ("default", "stream"):
        return OpenAICompatibleModel(url, "fake"), None, DEFAULT_MAX_CONNECTIONS
    raise SystemExit(f"unknown variant {variant!r}")


async def run_agentik(url: str, variant: str, n: int, turns: int, median: float) -> dict[str, Any]:
    run = f"{variant} {time.time_ns()}"
    scripted = variant == "scripted"
    model: Any
    if scripted:
        model, client, slots = _Scripted(median), None, DEFAULT_MAX_CONNECTIONS
    else:
        model, client, slots = model_for(variant, url)
    stream = variant == "stream"
    latencies: list[float] = []
    failed = 0
    before = server_stats(url)
    async with (
        model if not scripted else _nothing(),
        open_chat_agent(
            model=model, storage=in_memory_storage(), builtin_tools=False, max_queued_turns=8
        ) as agent,
    ):

        async def conversation(i: int) -> None:
            nonlocal failed
            for t in range(turns):
                began = time.perf_counter()
                try:
                    if stream:
                        async with agent.stream(f"c{i}", text(run, i, t)) as events:
                            last = None
                            async for event in events:
                                last = event
                            if type(last).__name__ != "TurnFinished":
                                raise RuntimeError(f"turn ended with {last!r}")
                    else:
                        await agent.send(f"c{i}", text(run, i, t))
                except Exception:
                    failed += 1
                else:
                    latencies.append(time.perf_counter() - began)

        cpu, began = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(conversation, i)
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    if client is not None:
        await client.aclose()
    after = server_stats(url)
    if scripted:
        after = {**after, "calls": before["calls"] + n * turns}
    return report(
        f"agentik {variant}",
        n,
        turns,
        slots,
        median,
        run,
        wall,
        cpu,
        latencies,
        failed,
        before,
        after,
    )


def report(
    system: str,
    n: int,
    turns: int,
    slots: int,
    median: float,
    run: str,
    wall: float,
    cpu: float,
    latencies: list[float],
    failed: int,
    before: dict[str, float],
    after: dict[str, float],
) -> dict[str, Any]:
    calls = int(after["calls"] - before["calls"])
    ideal = ideal_wall(
        [[latency(text(run, i, t), median) for t in range(turns)] for i in range(n)], slots
    )
    return {
        "system": system,
        "conversations": n,
        "turns": turns,
        "slots": slots,
        "calls": calls,
        "failed": failed,
        "client_cpu_ms_per_call": 1000 * cpu / max(1, calls),
        "client_cpu_share": cpu / wall,
        "wall_s": wall,
        "ideal_s": ideal,
        "wall_over_ideal": wall / ideal,
        "p50_s": percentile(latencies, 0.5),
        "p99_s": percentile(latencies, 0.99),
        "server_cpu_ms_per_call": 1000 * (after["cpu"] - before["cpu"]) / max(1, calls),
        "server_most_open": after["most_open"],
    }


async def pydantic_ai_child(url: str, n: int, turns: int, run: str) -> dict[str, Any]:
    """pydantic-ai on asyncio: N conversations x turns, message history carried."""
    import asyncio

    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=url, api_key="x"))
    agent = Agent(model)
    latencies: list[float] = []
    failed = 0

    async def conversation(i: int) -> None:
        nonlocal failed
        history: list[Any] = []
        for t in range(turns):
            began = time.perf_counter()
            try:
                result = await agent.run(text(run, i, t), message_history=history)
            except Exception:
                failed += 1
                continue
            history = result.all_messages()
            latencies.append(time.perf_counter() - began)

    cpu, began = time.process_time(), time.perf_counter()
    await asyncio.gather(*(conversation(i) for i in range(n)))
    return {
        "wall": time.perf_counter() - began,
        "cpu": time.process_time() - cpu,
        "latencies": latencies,
        "failed": failed,
    }


def run_pydantic_ai(url: str, n: int, turns: int, median: float) -> dict[str, Any] | None:
    run = f"pydantic-ai {time.time_ns()}"
    before = server_stats(url)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.model_client",
            "--pydantic-ai-child",
            url,
            str(n),
            str(turns),
            run,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"pydantic-ai not run: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    child = json.loads(done.stdout)
    after = server_stats(url)
    slots = 1000  # the openai SDK's max_connections
    return report(
        "pydantic-ai",
        n,
        turns,
        slots,
        median,
        run,
        child["wall"],
        child["cpu"],
        child["latencies"],
        child["failed"],
        before,
        after,
    )


COLUMNS = (
    ("system", "{}"),
    ("conversations", "{:,}"),
    ("slots", "{:,}"),
    ("calls", "{:,}"),
    ("failed", "{}"),
    ("client_cpu_ms_per_call", "{:.2f}"),
    ("client_cpu_share", "{:.0%}"),
    ("wall_s", "{:.1f}"),
    ("ideal_s", "{:.1f}"),
    ("wall_over_ideal", "{:.2f}"),
    ("p50_s", "{:.2f}"),
    ("p99_s", "{:.2f}"),
    ("server_cpu_ms_per_call", "{:.2f}"),
)


def table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(name for name, _ in COLUMNS) + " |"
    lines = [head, "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(fmt.format(row[name]) for name, fmt in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, nargs="+", default=[100, 1000, 10_000])
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--median", type=float, default=0.5)
    parser.add_argument("--variants", nargs="+", default=["default"])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--pydantic-ai", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pydantic-ai-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pydantic_ai_child:
        import asyncio

        url, n, turns, run = args.pydantic_ai_child
        print(json.dumps(asyncio.run(pydantic_ai_child(url, int(n), int(turns), run))))
        return
    load = [os.getloadavg()[0]]
    rows: list[dict[str, Any]] = []
    with fake_server(args.median) as url:
        for n in args.n:
            for _ in range(args.repeat):
                for variant in args.variants:
                    rows.append(trio.run(run_agentik, url, variant, n, args.turns, args.median))
                    print(table(rows[-1:]).splitlines()[-1], flush=True)
                if args.pydantic_ai:
                    row = run_pydantic_ai(url, n, args.turns, args.median)
                    if row is not None:
                        rows.append(row)
                        print(table(rows[-1:]).splitlines()[-1], flush=True)
    load.append(os.getloadavg()[0])
    if args.json:
        print(json.dumps(rows, indent=2))
    print(table(rows))
    flat = [r for r in rows if r["system"] == f"agentik {args.variants[0]}"]
    if len({r["conversations"] for r in flat}) > 1:
        by_n = {r["conversations"]: r["client_cpu_ms_per_call"] for r in flat}
        print(
            f"client CPU per call, largest N over smallest: "
            f"{by_n[max(by_n)] / by_n[min(by_n)]:.2f}x"
        )
    print(f"load average {load[0]:.1f} -> {load[1]:.1f}; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
