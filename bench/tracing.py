"""The cost of tracing, in one run: the bench workload (N conversations x T
turns, one tool call per turn: three spans a turn) with tracing

- ``off``: ``NoOpTracerProvider`` (what an application that does not use
  OpenTelemetry gets; nothing is imported then);
- ``noop``: the global provider with none configured (``tracer_provider=None``
  once the API is imported): one non-recording span per turn, no children;
- ``sdk``: the SDK's ``TracerProvider`` with a ``SimpleSpanProcessor`` into an
  ``InMemorySpanExporter`` (every span built, ended and exported in line);
- ``sdk-batch``: the same with a ``BatchSpanProcessor`` (what production runs);
- ``sdk-10%``: ``sdk-batch`` sampling one trace in ten
  (``ParentBased(TraceIdRatioBased(0.1))``): a sampled-out turn costs one
  non-recording span and makes no children.

Modes take turns round after round (``--repeat``), so drift on a shared
machine hits them alike; medians and ratios to ``off`` are printed. In-memory
storage by default, to show the CPU cost undiluted by fsync; ``--backend
sqlite`` for the durable figure.

    python -m bench.tracing                      # N = 1000, T = 5, repeat 5
    python -m bench.tracing -n 200 --repeat 9 --backend sqlite
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from agentik import NamedTool
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel, bench_responder
from agentik.storage import StorageBundle, in_memory_storage, open_sqlite_storage


async def _clock(arguments: dict[str, object]) -> str:
    return "12:00"


CLOCK = NamedTool("clock", "The time.", {"type": "object", "properties": {}}, _clock)
MODES = ("off", "noop", "sdk", "sdk-batch", "sdk-10%")


def _provider(mode: str) -> tuple[trace.TracerProvider | None, InMemorySpanExporter | None]:
    if mode == "off":
        return trace.NoOpTracerProvider(), None
    if mode == "noop":
        return None, None  # the global provider: none configured
    exporter = InMemorySpanExporter()
    sampled = mode == "sdk-10%"
    provider = (
        TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.1))) if sampled else TracerProvider()
    )
    processor = SimpleSpanProcessor(exporter) if mode == "sdk" else BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider, exporter


async def run_once(
    open_storage: Callable[[], AbstractAsyncContextManager[StorageBundle]],
    mode: str,
    n: int,
    turns: int,
) -> tuple[float, int]:
    """Turns per second, and spans exported."""
    provider, exporter = _provider(mode)
    model = ScriptedModel(bench_responder("clock"))
    async with (
        open_storage() as storage,
        open_chat_agent(
            model=model,
            storage=storage,
            tools=[CLOCK],
            builtin_tools=False,
            tracer_provider=provider,
        ) as agent,
    ):
        assert agent.tracing == (mode != "off")

        async def conversation(i: int) -> None:
            for t in range(turns):
                await agent.send(f"bench-{i}", f"turn {t}")

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(conversation, i)
        elapsed = time.perf_counter() - start
    spans = 0
    if isinstance(provider, TracerProvider):
        provider.shutdown()  # flushes the batch processor
        assert exporter is not None
        spans = len(exporter.get_finished_spans())
    return n * turns / elapsed, spans


async def main_async(args: argparse.Namespace) -> None:
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    spans: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.repeat):
            for mode in MODES:
                if args.backend == "memory":

                    @asynccontextmanager
                    async def open_storage() -> AsyncIterator[StorageBundle]:
                        yield in_memory_storage()

                else:
                    path = os.path.join(folder, f"{mode}-{round_}.db")

                    def open_storage(
                        path: str = path,
                    ) -> AbstractAsyncContextManager[StorageBundle]:
                        return open_sqlite_storage(path)

                rate, spans[mode] = await run_once(open_storage, mode, args.n, args.turns)
                results[mode].append(rate)
    base = statistics.median(results["off"])
    print(f"backend={args.backend} N={args.n} T={args.turns} repeat={args.repeat}")
    print(
        f"{'mode':<10} {'turns/s':>9} {'spread':>17} {'vs off':>8}"
        f" {'us/turn added':>14} {'spans':>7}"
    )
    for mode in MODES:
        rates = results[mode]
        median = statistics.median(rates)
        added = 1e6 * (1 / median - 1 / base)
        print(
            f"{mode:<10} {median:>9.0f} {min(rates):>8.0f}-{max(rates):<8.0f}"
            f" {median / base - 1:>+7.1%} {added:>14.1f} {spans[mode]:>7}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=1000, help="conversations at once")
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of all modes")
    parser.add_argument("--backend", choices=["memory", "sqlite"], default="memory")
    trio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
