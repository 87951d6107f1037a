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

and, for scale, the SDK's own floor: ``floor`` (``SimpleSpanProcessor``) and
``floor-batch`` (``BatchSpanProcessor``) make, in a plain loop with no
agentik, exactly the spans a bench turn makes (same names, kinds, parents and
attributes), each with one ``start_span(attributes=...)``, one
``set_attributes`` for what is known only at the end, and ``end``: what any
instrumentation must pay the SDK for those spans. ``sdk`` minus ``off``
minus ``floor`` is agentik's own share.

Modes take turns round after round (``--repeat``), so drift on a shared
machine hits them alike; medians and ratios to ``off`` are printed. In-memory
storage by default, to show the CPU cost undiluted by fsync; ``--backend
sqlite`` for the durable figure. ``--instructions`` counts CPU instructions a
turn with valgrind's callgrind instead (N and 5N conversations in fresh
interpreters, the difference over the extra turns: start-up cancels out),
repeatable where wall-clock figures are not.

    python -m bench.tracing                      # N = 1000, T = 5, repeat 5
    python -m bench.tracing -n 200 --repeat 9 --backend sqlite
    python -m bench.tracing --instructions -n 100
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
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
from opentelemetry.trace import SpanKind

from agentik import NamedTool
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel, bench_responder
from agentik.storage import StorageBundle, in_memory_storage, open_sqlite_storage
from bench.turn_instructions import callgrind_total


async def _clock(arguments: dict[str, object]) -> str:
    return "12:00"


CLOCK = NamedTool("clock", "The time.", {"type": "object", "properties": {}}, _clock)
MODES = ("off", "noop", "sdk", "sdk-batch", "sdk-10%")
FLOORS = ("floor", "floor-batch")
INSTRUCTION_MODES = ("off", "noop", "sdk", "sdk-batch", *FLOORS)


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
    simple = mode in ("sdk", "floor")
    processor = SimpleSpanProcessor(exporter) if simple else BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    return provider, exporter


async def run_once(
    open_storage: Callable[[], AbstractAsyncContextManager[StorageBundle]],
    mode: str,
    n: int,
    turns: int,
) -> tuple[float, int]:
    """Turns per second, and spans exported."""
    if mode in FLOORS:
        return floor(mode, n, turns)
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


def floor(mode: str, n: int, turns: int) -> tuple[float, int]:
    """The SDK alone making the spans of ``n * turns`` bench turns
    (``floor_spans``): turns per second (of spans only), and spans exported."""
    provider, exporter = _provider(mode)
    assert isinstance(provider, TracerProvider)
    assert exporter is not None
    tracer = provider.get_tracer("agentik")
    start = time.perf_counter()
    floor_spans(tracer, n, turns)
    elapsed = time.perf_counter() - start
    provider.shutdown()
    return n * turns / elapsed, len(exporter.get_finished_spans())


def floor_spans(tracer: trace.Tracer, n: int, turns: int) -> None:
    """The spans agentik makes for the bench workload (tests/benchmark/
    test_tracing_bench.py checks they are the same), made the cheapest way
    the SDK's API allows: per turn ``invoke_agent agentik`` with two ``chat
    scripted`` and one ``execute_tool clock`` as its children, each span's
    attributes given at ``start_span`` but for what a span learns at its end,
    given in one ``set_attributes``; no span made current."""
    internal, client = SpanKind.INTERNAL, SpanKind.CLIENT
    # bench_responder's usage: 16 prompt tokens; "{}" is 1 token, the reply 16.
    answers = (("tool_calls", 1), ("stop", 16))
    for t in range(turns):
        for i in range(n):
            conversation_id = f"bench-{i}"
            turn = tracer.start_span(
                "invoke_agent agentik",
                kind=internal,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.provider.name": "agentik",
                    "gen_ai.agent.name": "agentik",
                    "gen_ai.conversation.id": conversation_id,
                    "agentik.turn.run": 1,
                    "gen_ai.request.model": "scripted",
                },
            )
            parent = trace.set_span_in_context(turn)
            for reason, output_tokens in answers:
                chat = tracer.start_span(
                    "chat scripted",
                    parent,
                    kind=client,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": "agentik",
                        "gen_ai.conversation.id": conversation_id,
                        "agentik.request.purpose": "turn",
                        "gen_ai.request.model": "scripted",
                    },
                )
                chat.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": 16,
                        "gen_ai.usage.output_tokens": output_tokens,
                        "gen_ai.response.finish_reasons": (reason,),
                    }
                )
                chat.end()
                if reason == "tool_calls":
                    tool = tracer.start_span(
                        "execute_tool clock",
                        parent,
                        kind=internal,
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.conversation.id": conversation_id,
                            "gen_ai.tool.name": "clock",
                            "gen_ai.tool.call.id": f"call_{2 + 4 * t}",
                            "gen_ai.tool.type": "function",
                        },
                    )
                    tool.end()
            turn.set_attributes(
                {
                    "gen_ai.usage.input_tokens": 32,
                    "gen_ai.usage.output_tokens": 17,
                    "agentik.turn.status": "finished",
                }
            )
            turn.end()


def _open_storage(
    backend: str, folder: str, name: str
) -> Callable[[], AbstractAsyncContextManager[StorageBundle]]:
    if backend == "memory":

        @asynccontextmanager
        async def open_memory() -> AsyncIterator[StorageBundle]:
            yield in_memory_storage()

        return open_memory
    path = os.path.join(folder, f"{name}.db")
    return lambda: open_sqlite_storage(path)


async def main_async(args: argparse.Namespace) -> None:
    modes = (*MODES, *FLOORS)
    results: dict[str, list[float]] = {mode: [] for mode in modes}
    spans: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.repeat):
            for mode in modes:
                open_storage = _open_storage(args.backend, folder, f"{mode}-{round_}")
                rate, spans[mode] = await run_once(open_storage, mode, args.n, args.turns)
                results[mode].append(rate)
    base = statistics.median(results["off"])
    print(f"backend={args.backend} N={args.n} T={args.turns} repeat={args.repeat}")
    print(
        f"{'mode':<11} {'turns/s':>9} {'spread':>17} {'vs off':>8}"
        f" {'us/turn added':>14} {'spans':>7}"
    )
    for mode in modes:
        rates = results[mode]
        median = statistics.median(rates)
        if mode in FLOORS:  # spans only: their whole time is what they add
            ratio, added = f"{-base / (median + base):>+7.1%}", 1e6 / median
        else:
            ratio, added = f"{median / base - 1:>+7.1%}", 1e6 * (1 / median - 1 / base)
        print(
            f"{mode:<11} {median:>9.0f} {min(rates):>8.0f}-{max(rates):<8.0f}"
            f" {ratio} {added:>14.1f} {spans[mode]:>7}"
        )


def _instructions(mode: str, n: int, turns: int, backend: str) -> int:
    """Instructions callgrind counts for one fresh run of ``mode``."""
    command = [sys.executable, "-m", "bench.tracing", "--workload", mode, "-n", str(n)]
    return callgrind_total([*command, "--turns", str(turns), "--backend", backend])


def instructions(args: argparse.Namespace) -> None:
    print(f"backend={args.backend} N={args.n} and {5 * args.n} T={args.turns}, callgrind")
    print(f"{'mode':<11} {'instr/turn':>11} {'added':>10} {'vs off':>8}")
    base = 0.0
    for mode in INSTRUCTION_MODES:
        small = _instructions(mode, args.n, args.turns, args.backend)
        large = _instructions(mode, 5 * args.n, args.turns, args.backend)
        per_turn = (large - small) / (4 * args.n * args.turns)
        if mode == "off":
            base = per_turn
        added = per_turn if mode in FLOORS else per_turn - base
        print(f"{mode:<11} {per_turn:>11,.0f} {added:>+10,.0f} {added / base:>+7.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=1000, help="conversations at once")
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    parser.add_argument("--repeat", type=int, default=5, help="rounds of all modes")
    parser.add_argument("--backend", choices=["memory", "sqlite"], default="memory")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions with callgrind"
    )
    parser.add_argument(
        "--workload", choices=[*MODES, *FLOORS], help="one run of one mode (for callgrind)"
    )
    args = parser.parse_args()
    if args.instructions:
        instructions(args)
    elif args.workload is not None:
        with tempfile.TemporaryDirectory() as folder:
            open_storage = _open_storage(args.backend, folder, args.workload)
            trio.run(run_once, open_storage, args.workload, args.n, args.turns)
    else:
        trio.run(main_async, args)


if __name__ == "__main__":
    main()
