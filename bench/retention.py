"""Retention while turns run: does deleting idle conversations stall the writer?

A SQLite file (synchronous=FULL) holds K idle conversations of M messages
(60 days old). The bench workload (N conversations x T turns, one tool call a
turn) runs twice on a copy of it: alone, then with the retention task
(``run_retention``, 30 days) deleting the idle ones meanwhile. Printed: turns/s
and turn latency p50/p99 of both, how many conversations retention deleted
and at what rate, and the writer time one delete takes for conversations of
several sizes (a delete is one transaction).

    python -m bench.retention                     # K = 2000, M = 20, N = 200, T = 20
    python -m bench.retention -k 5000 -m 50
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

import trio

from agentik import Message, NamedTool, Role
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel, bench_responder
from agentik.server._retention import run_retention
from agentik.storage import (
    ArchivedMessage,
    open_sqlite_storage,
)

OLD = datetime.now(UTC) - timedelta(days=60)


async def _clock(arguments: dict[str, object]) -> str:
    return "12:00"


CLOCK = NamedTool("clock", "The time.", {"type": "object", "properties": {}}, _clock)


def _conversation(messages: int) -> list[ArchivedMessage]:
    return [
        ArchivedMessage(
            message=Message(
                Role.USER if i % 2 == 0 else Role.ASSISTANT,
                "x" * 200,
                seq=i + 1,
                created_at=OLD + timedelta(seconds=i),
            )
        )
        for i in range(messages)
    ]


async def prefill(path: str, k: int, m: int) -> None:
    async with open_sqlite_storage(path) as storage:
        store = storage.message_store
        records = _conversation(m)
        async with trio.open_nursery() as nursery:
            for i in range(k):
                nursery.start_soon(store.import_conversation, f"idle-{i:06d}", records)


async def load(path: str, n: int, turns: int, retention: bool) -> dict[str, float]:
    latencies: list[float] = []
    deleted_before = 0
    async with open_sqlite_storage(path) as storage:
        deleted_before = len(await storage.message_store.list_conversations(limit=10**9))
        model = ScriptedModel(bench_responder("clock"))
        async with open_chat_agent(
            model=model, storage=storage, tools=[CLOCK], builtin_tools=False
        ) as agent:

            async def conversation(i: int) -> None:
                for t in range(turns):
                    start = time.perf_counter()
                    await agent.send(f"live-{i}", f"turn {t}")
                    latencies.append(time.perf_counter() - start)

            start = time.perf_counter()
            async with trio.open_nursery() as outer:
                if retention:
                    outer.start_soon(lambda: run_retention(agent, 30, period=3600))
                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(conversation, i)
                elapsed = time.perf_counter() - start
                outer.cancel_scope.cancel()
        left = len(await storage.message_store.list_conversations(limit=10**9))
    latencies.sort()
    return {
        "turns_per_s": n * turns / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
        "deleted": deleted_before - (left - n),
        "seconds": elapsed,
    }


async def delete_cost(folder: str, sizes: list[int]) -> dict[int, float]:
    """Milliseconds one delete holds the writer, by conversation size."""
    out: dict[int, float] = {}
    async with open_sqlite_storage(os.path.join(folder, "sizes.db")) as storage:
        store = storage.message_store
        for size in sizes:
            await store.import_conversation(f"c{size}", _conversation(size))
            runs = []
            for _ in range(3):
                await store.import_conversation("probe", _conversation(size))
                start = time.perf_counter()
                await store.delete_conversation("probe")
                runs.append(time.perf_counter() - start)
            out[size] = 1000 * statistics.median(runs)
    return out


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = os.path.join(folder, "base.db")
        await prefill(base, args.k, args.m)
        results = []
        for round_ in range(args.repeat):
            for retention in (False, True):
                path = os.path.join(folder, f"run-{round_}-{retention}.db")
                shutil.copy(base, path)
                results.append((retention, await load(path, args.n, args.turns, retention)))
                os.remove(path)
        costs = await delete_cost(folder, [20, 1000, 10000])
    print(f"K={args.k} idle conversations of M={args.m} messages; N={args.n} x T={args.turns}")
    for retention, r in results:
        label = "with retention" if retention else "alone"
        print(
            f"{label:<15} {r['turns_per_s']:>7.0f} turns/s  p50 {r['p50_ms']:6.1f} ms"
            f"  p99 {r['p99_ms']:6.1f} ms  deleted {r['deleted']:.0f}"
            f" ({r['deleted'] / r['seconds']:.0f}/s while turns ran)"
        )
    print("one delete (one transaction, synchronous=FULL):")
    for size, ms in costs.items():
        print(f"  {size:>6} messages  {ms:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", type=int, default=2000, help="idle conversations")
    parser.add_argument("-m", type=int, default=20, help="messages per idle conversation")
    parser.add_argument("-n", type=int, default=200, help="live conversations")
    parser.add_argument("--turns", type=int, default=20, help="turns per live conversation")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of both runs")
    trio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
