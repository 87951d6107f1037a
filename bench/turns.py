"""Turns per second through the in-process agent: SQLite (durable) vs in-memory.

Workload (the one PERFORMANCE.md uses for the peers): N conversations at once,
each running T turns one after another; every turn makes one tool call, so it
stores four messages (user, assistant call, tool result, answer). The model is
ScriptedModel with bench_responder (instant, constant cost). SQLite runs with
synchronous=FULL unless told otherwise.

Also measures resident memory per idle conversation after one turn, in a fresh
subprocess so earlier runs do not pollute it.

    python -m bench.turns                       # N = 100, 1000, 10000; T = 5
    python -m bench.turns -n 1000 --synchronous FULL NORMAL   # the cost of FULL
    python -m bench.turns -n 1000 --turns 5 --repeat 3
    python -m bench.turns --gc-freeze           # gc.freeze() + higher thresholds
    python -m bench.turns -n 1000 10000 --sketch ../shared/bench/sketch_trio.py

``--sketch`` runs the bare trio+apsw sketch of agentik's shape (PERFORMANCE.md)
as the baseline, in a fresh interpreter, alternating with agentik's runs in the
same invocation, and prints agentik SQLite / sketch: the machine's speed drifts,
so only ratios taken side by side mean anything. Besides the ratio of the
medians it gives the ratio run by run (each agentik run over the sketch run
right after it) and their median. It also prints the CPU a turn
of each (process CPU, threads included; the sketch's start-up left out) and
sketch / agentik by CPU, which a loaded machine moves far less than turns/s.

``--rss-conversations 0`` skips the resident-memory measurement.

Against a model with latency (issue 30): each turn's model answer makes
``--tool-calls`` calls of a tool that takes ``--tool-latency`` seconds, and
every model call takes ``--model-latency`` seconds (fixed, or log-normal with
that median and ``--latency-sigma``); the turn ends with a text answer, so a
turn is two model calls and one round of tools::

    python -m bench.turns --model-latency 0.5 --tool-latency 0.2 --tool-calls 3

It reports turns/s, turn latency p50/p99, agentik's own CPU a turn, and the
tool time of a turn as measured (from the first call's start to the last
call's end) beside what it would be with the calls run one after another
(serial: calls x latency) and all at once (parallel: one latency). Any of the
three options selects this mode (default N = 100, 1000; no sketch, no RSS).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import attrs
import trio

from agentik import ModelRequest, ModelResponse, NamedTool, Role, ToolCall, tool
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel, bench_responder
from agentik.storage import StorageBundle, in_memory_storage, open_sqlite_storage


@tool
async def clock() -> str:
    """The time."""
    return "12:00"


CLOCK = clock
"""A ``@tool``, as a user's tool would be (its arguments checked by compiled closures)."""


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@asynccontextmanager
async def memory_backend() -> AsyncIterator[StorageBundle]:
    yield in_memory_storage()


def sqlite_backend(
    path: str, synchronous: str
) -> Callable[[], AbstractAsyncContextManager[StorageBundle]]:
    def open_() -> AbstractAsyncContextManager[StorageBundle]:
        return open_sqlite_storage(path, synchronous=synchronous)  # type: ignore[arg-type]

    return open_


async def run_load(
    open_storage: Callable[[], AbstractAsyncContextManager[StorageBundle]], n: int, turns: int
) -> dict[str, float]:
    latencies: list[float] = []
    model = ScriptedModel(bench_responder("clock"))
    async with (
        open_storage() as storage,
        open_chat_agent(model=model, storage=storage, tools=[CLOCK], builtin_tools=False) as agent,
    ):

        async def conversation(i: int) -> None:
            cid = f"bench-{i}"
            for t in range(turns):
                start = time.perf_counter()
                await agent.send(cid, f"turn {t}")
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        cpu = time.process_time()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(conversation, i)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
    latencies.sort()
    return {
        "turns_per_s": n * turns / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "seconds": elapsed,
        "cpu_us_per_turn": 1e6 * cpu / (n * turns),
    }


async def idle_rss(n: int) -> dict[str, float]:
    """RSS growth per conversation that ran one turn and now sits idle."""
    with tempfile.TemporaryDirectory() as tmp:
        model = ScriptedModel(bench_responder("clock"))
        async with (
            open_sqlite_storage(f"{tmp}/rss.db") as storage,
            open_chat_agent(
                model=model, storage=storage, tools=[CLOCK], builtin_tools=False, idle_timeout=3600
            ) as agent,
        ):
            await agent.send("warm-up", "hello")  # imports, caches, first allocations
            gc.collect()
            before = rss_bytes()
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(agent.send, f"idle-{i}", "hello")
            gc.collect()
            after = rss_bytes()
            live = agent.live_conversations
            agent_stats = agent.stats
            assert live == n + 1, live
            del agent_stats
    return {"bytes_per_conversation": (after - before) / n, "conversations": n}


def tune_gc() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def _sketch_once(
    path: str, n: int, turns: int, synchronous: str, folder: str
) -> tuple[dict[str, object], float]:
    """One run of the sketch: its RESULT line, and the CPU seconds it took
    (user + system, its writer thread included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, path, str(n), "--turns", str(turns), "--sync", synchronous],
        env=os.environ | {"BENCH_DIR": folder},
        capture_output=True,
        text=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, object] = json.loads(line.removeprefix("RESULT "))
    if result["errors"]:
        raise RuntimeError(f"the sketch lost rows: {result}")
    return result, cpu


def run_sketch(path: str, n: int, turns: int, synchronous: str, folder: str) -> dict[str, float]:
    """One run of the sketch in a fresh interpreter (its own database in
    ``folder``). Its CPU a turn leaves out start-up (imports, schema), taken
    as the CPU of a run of one conversation and one turn just before."""
    _, startup = _sketch_once(path, 1, 1, synchronous, folder)
    result, cpu = _sketch_once(path, n, turns, synchronous, folder)
    return {
        "turns_per_s": float(result["turns_per_s"]),  # type: ignore[arg-type]
        "p50_ms": float(result["p50_ms"]),  # type: ignore[arg-type]
        "p99_ms": float(result["p99_ms"]),  # type: ignore[arg-type]
        "seconds": float(result["wall_s"]),  # type: ignore[arg-type]
        "cpu_us_per_turn": 1e6 * max(cpu - startup, 0.0) / (n * turns),
    }


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    report: dict[str, object] = {"turns": args.turns, "runs": []}
    runs: list[dict[str, object]] = report["runs"]  # type: ignore[assignment]
    for n in args.n:
        with tempfile.TemporaryDirectory() as tmp:
            backends = {"memory": memory_backend} | {
                f"sqlite-{sync}": sqlite_backend(f"{tmp}/bench.db", sync)
                for sync in args.synchronous
            }
            figures: dict[str, list[dict[str, float]]] = {name: [] for name in backends}
            for repeat in range(args.repeat):
                for name, backend in backends.items():
                    if name.startswith("sqlite"):
                        # A fresh database for every run.
                        for suffix in ("", "-wal", "-shm"):
                            with contextlib.suppress(FileNotFoundError):
                                os.remove(f"{tmp}/bench.db{suffix}")
                    figures[name].append(await run_load(backend, n, args.turns))
                    print(
                        f"  N={n} {name} run {repeat + 1}:"
                        f" {figures[name][-1]['turns_per_s']:.0f} turns/s",
                        file=sys.stderr,
                    )
                if args.sketch:
                    sync = args.synchronous[0]
                    run = await trio.to_thread.run_sync(
                        run_sketch, args.sketch, n, args.turns, sync, tmp
                    )
                    figures.setdefault("sketch", []).append(run)
                    print(
                        f"  N={n} sketch run {repeat + 1}: {run['turns_per_s']:.0f} turns/s",
                        file=sys.stderr,
                    )
        row: dict[str, object] = {"conversations": n}
        for name, results in figures.items():
            row[name] = {key: statistics.median(r[key] for r in results) for key in results[0]} | {
                "spread_turns_per_s": [round(r["turns_per_s"]) for r in results]
            }
        sqlite_tps = row[f"sqlite-{args.synchronous[0]}"]["turns_per_s"]  # type: ignore[index]
        memory_tps = row["memory"]["turns_per_s"]  # type: ignore[index]
        row["sqlite_over_memory"] = sqlite_tps / memory_tps
        if "sketch" in row:
            row["sqlite_over_sketch"] = sqlite_tps / row["sketch"]["turns_per_s"]  # type: ignore[index]
            # Run by run: each agentik run against the sketch run just after it,
            # so a drift of the machine's speed between repeats cancels out.
            paired = zip(figures[f"sqlite-{args.synchronous[0]}"], figures["sketch"], strict=True)
            pairs = [a["turns_per_s"] / b["turns_per_s"] for a, b in paired]
            row["sqlite_over_sketch_pairs"] = [round(r, 2) for r in pairs]
            row["sqlite_over_sketch_pair_median"] = statistics.median(pairs)
            # CPU a turn, sketch / agentik: what the throughput ratio would be
            # if both were CPU-bound on a machine of their own (a loaded machine
            # moves turns/s by 2-3x between runs; CPU a turn far less).
            row["sqlite_over_sketch_cpu"] = (
                row["sketch"]["cpu_us_per_turn"]  # type: ignore[index]
                / row[f"sqlite-{args.synchronous[0]}"]["cpu_us_per_turn"]  # type: ignore[index]
            )
        if "FULL" in args.synchronous and "NORMAL" in args.synchronous:
            full_tps = row["sqlite-FULL"]["turns_per_s"]  # type: ignore[index]
            row["full_over_normal"] = full_tps / row["sqlite-NORMAL"]["turns_per_s"]  # type: ignore[index]
        runs.append(row)
    return report


def measure_idle_rss(args: argparse.Namespace) -> dict[str, float]:
    """``idle_rss`` in a fresh interpreter, so earlier runs do not pollute it."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.turns",
            "--rss-only",
            "--rss-conversations",
            str(args.rss_conversations),
        ]
        + (["--gc-freeze"] if args.gc_freeze else []),
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


# --- a model and tools with latency ---------------------------------------------------


@attrs.frozen(kw_only=True)
class Latency:
    """The workload against a slow model: what each turn waits for."""

    model: float = 0.0
    """Seconds a model call takes (the median, when ``sigma`` > 0)."""
    sigma: float = 0.0
    """0: every model call takes ``model``; else log-normal around it."""
    tool: float = 0.0
    """Seconds each tool call takes."""
    calls: int = 1
    """Tool calls in the model's first answer of a turn."""
    seed: int = 1


@attrs.define
class LatentWorkload:
    """The model, the tool and what they saw: each model call's delay, and
    per turn (keyed by its user text) when its first call started and its
    last one ended."""

    latency: Latency
    model_seconds: list[float] = attrs.Factory(list)
    tool_spans: dict[str, list[float]] = attrs.Factory(dict)
    _rng: random.Random = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._rng = random.Random(self.latency.seed)

    def delay(self) -> float:
        median, sigma = self.latency.model, self.latency.sigma
        if sigma == 0 or median == 0:
            return median
        return self._rng.lognormvariate(math.log(median), sigma)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """``calls`` tool calls when the user spoke last, else a short text;
        the calls carry the user's text, so the tool knows the turn."""
        seconds = self.delay()
        self.model_seconds.append(seconds)
        await trio.sleep(seconds)
        last = request.messages[-1]
        if last.role is Role.USER:
            arguments = json.dumps({"turn": last.content})
            calls = tuple(
                ToolCall(f"call_{len(request.messages)}_{i}", "wait", arguments)
                for i in range(self.latency.calls)
            )
            return ModelResponse(tool_calls=calls, finish_reason="tool_calls")
        return ModelResponse(text="ok " * 20, finish_reason="stop")

    def tool(self) -> NamedTool:
        spans = self.tool_spans
        seconds = self.latency.tool

        @tool
        async def wait(turn: str) -> str:
            """Wait as a slow tool does.

            Args:
                turn: The turn this call belongs to.
            """
            start = trio.current_time()
            await trio.sleep(seconds)
            span = spans.setdefault(turn, [start, start])
            span[0] = min(span[0], start)
            span[1] = max(span[1], trio.current_time())
            return "done"

        return wait


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


async def run_latency_load(
    open_storage: Callable[[], AbstractAsyncContextManager[StorageBundle]],
    n: int,
    turns: int,
    latency: Latency,
) -> dict[str, float]:
    """``n`` conversations of ``turns`` turns each against the slow model."""
    work = LatentWorkload(latency)
    latencies: list[float] = []
    async with (
        open_storage() as storage,
        open_chat_agent(
            model=ScriptedModel(work.respond),
            storage=storage,
            tools=[work.tool()],
            builtin_tools=False,
        ) as agent,
    ):

        async def conversation(i: int) -> None:
            for t in range(turns):
                start = trio.current_time()
                await agent.send(f"bench-{i}", f"bench-{i} turn {t}")
                latencies.append(trio.current_time() - start)

        start = trio.current_time()
        cpu = time.process_time()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(conversation, i)
        elapsed = trio.current_time() - start
        cpu = time.process_time() - cpu
    tool_times = [end - begin for begin, end in work.tool_spans.values()]
    done = n * turns
    assert len(latencies) == done, latencies
    assert len(tool_times) == (done if latency.calls else 0), tool_times
    return {
        "turns_per_s": done / elapsed,
        "p50_ms": 1000 * _percentile(latencies, 0.50),
        "p99_ms": 1000 * _percentile(latencies, 0.99),
        "seconds": elapsed,
        "cpu_us_per_turn": 1e6 * cpu / done,
        "model_ms_per_turn": 1000 * sum(work.model_seconds) / done,
        "tool_ms_p50": 1000 * _percentile(tool_times, 0.50) if tool_times else 0.0,
        "tool_ms_p99": 1000 * _percentile(tool_times, 0.99) if tool_times else 0.0,
        "tool_ms_serial": 1000 * latency.calls * latency.tool,
        "tool_ms_parallel": 1000 * latency.tool if latency.calls else 0.0,
    }


async def latency_main(args: argparse.Namespace, latency: Latency) -> dict[str, object]:
    report: dict[str, object] = {"turns": args.turns, "latency": attrs.asdict(latency)}
    runs: list[dict[str, object]] = []
    for n in args.n:
        with tempfile.TemporaryDirectory() as tmp:
            backends = {"memory": memory_backend} | {
                f"sqlite-{sync}": sqlite_backend(f"{tmp}/bench.db", sync)
                for sync in args.synchronous
            }
            figures: dict[str, list[dict[str, float]]] = {name: [] for name in backends}
            for repeat in range(args.repeat):
                for name, backend in backends.items():
                    for suffix in ("", "-wal", "-shm"):  # a fresh database for every run
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(f"{tmp}/bench.db{suffix}")
                    figures[name].append(await run_latency_load(backend, n, args.turns, latency))
                    print(
                        f"  N={n} {name} run {repeat + 1}:"
                        f" {figures[name][-1]['turns_per_s']:.0f} turns/s",
                        file=sys.stderr,
                    )
        row: dict[str, object] = {"conversations": n}
        for name, results in figures.items():
            row[name] = {key: statistics.median(r[key] for r in results) for key in results[0]}
        runs.append(row)
    report["runs"] = runs
    return report


def print_latency_report(report: dict[str, object], latency: Latency) -> None:
    shape = "fixed" if latency.sigma == 0 else f"log-normal, sigma {latency.sigma:g}"
    print(
        f"model {latency.model:g} s a call ({shape}); {latency.calls} tool calls of"
        f" {latency.tool:g} s in a turn's first answer; {report['turns']} turns per"
        " conversation; medians of the runs"
    )
    print(
        f"{'N':>6} | {'backend':<12} | {'turns/s':>8} | {'turn p50 / p99 ms':>19}"
        f" | {'model ms/turn':>13} | {'tool ms/turn p50 / p99':>22} | {'serial':>6}"
        f" | {'parallel':>8} | {'CPU µs/turn':>11}"
    )
    for row in report["runs"]:  # type: ignore[attr-defined]
        for name, f in row.items():
            if name == "conversations":
                continue
            print(
                f"{row['conversations']:>6} | {name:<12} | {f['turns_per_s']:>8.0f} |"
                f" {f['p50_ms']:>8.0f} / {f['p99_ms']:<8.0f} | {f['model_ms_per_turn']:>13.0f} |"
                f" {f['tool_ms_p50']:>10.0f} / {f['tool_ms_p99']:<9.0f} |"
                f" {f['tool_ms_serial']:>6.0f} | {f['tool_ms_parallel']:>8.0f} |"
                f" {f['cpu_us_per_turn']:>11.0f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "-n", type=int, nargs="+", help="conversations (100 1000 10000; with latency: 100 1000)"
    )
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--synchronous",
        nargs="+",
        default=["FULL"],
        choices=["FULL", "NORMAL"],
        help="one or both; with both, each N also reports FULL / NORMAL from the same run",
    )
    parser.add_argument("--gc-freeze", action="store_true")
    parser.add_argument(
        "--sketch",
        metavar="PATH",
        help="the bare trio+apsw sketch (sketch_trio.py): run it as the baseline, alternating",
    )
    parser.add_argument(
        "--model-latency", type=float, default=0.0, help="seconds a model call takes (median)"
    )
    parser.add_argument(
        "--latency-sigma",
        type=float,
        default=0.0,
        help="0: every model call takes --model-latency; else log-normal with this sigma",
    )
    parser.add_argument("--tool-latency", type=float, default=0.0, help="seconds a tool call takes")
    parser.add_argument(
        "--tool-calls", type=int, default=None, help="tool calls in a turn's first answer"
    )
    parser.add_argument("--seed", type=int, default=1, help="of the log-normal delays")
    parser.add_argument(
        "--rss-conversations",
        type=int,
        default=10_000,
        help="idle conversations of the resident-memory measurement; 0 skips it",
    )
    parser.add_argument("--rss-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.gc_freeze:
        tune_gc()
    if args.model_latency or args.tool_latency or args.tool_calls is not None or args.latency_sigma:
        latency = Latency(
            model=args.model_latency,
            sigma=args.latency_sigma,
            tool=args.tool_latency,
            calls=1 if args.tool_calls is None else args.tool_calls,
            seed=args.seed,
        )
        if min(latency.model, latency.sigma, latency.tool, latency.calls) < 0:
            parser.error("latencies, --latency-sigma and --tool-calls must be >= 0")
        if args.sketch or args.rss_only:
            parser.error("--sketch and the RSS measurement go with the instant model only")
        args.n = args.n or [100, 1000]
        latency_report = trio.run(latency_main, args, latency)
        if args.json:
            print(json.dumps(latency_report, indent=2))
        else:
            print_latency_report(latency_report, latency)
        return
    args.n = args.n or [100, 1000, 10000]
    if args.rss_only:
        print(json.dumps(trio.run(idle_rss, args.rss_conversations)))
        return
    if args.rss_conversations < 0:
        parser.error("--rss-conversations must be >= 0")
    report = trio.run(main_async, args)
    rss = None if args.rss_conversations == 0 else measure_idle_rss(args)
    report["idle_rss"] = rss
    report["gc_freeze"] = args.gc_freeze
    if args.json:
        print(json.dumps(report, indent=2))
        return
    sync = f"sqlite-{args.synchronous[0]}"
    print(
        f"turns per conversation: {args.turns}; median of {args.repeat} runs;"
        f" gc_freeze={args.gc_freeze}"
    )
    print(
        f"{'N':>6} | {sync + ' turns/s':>18} | {'memory turns/s':>14} | {'ratio':>5}"
        f" | {'sqlite p50/p99 ms':>18} | {'memory p50/p99 ms':>18}"
    )
    for row in report["runs"]:  # type: ignore[union-attr]
        s, m = row[sync], row["memory"]
        print(
            f"{row['conversations']:>6} | {s['turns_per_s']:>18.0f} | {m['turns_per_s']:>14.0f} |"
            f" {row['sqlite_over_memory']:>5.2f} | {s['p50_ms']:>8.1f} / {s['p99_ms']:<7.1f} |"
            f" {m['p50_ms']:>8.1f} / {m['p99_ms']:<7.1f}"
        )
    for row in report["runs"]:  # type: ignore[union-attr]
        if "sqlite_over_sketch" in row:
            sketch = row["sketch"]
            print(
                f"N={row['conversations']}: sketch {sketch['turns_per_s']:.0f} turns/s"
                f" (runs {sketch['spread_turns_per_s']}), agentik {sync}"
                f" {row[sync]['turns_per_s']:.0f} (runs {row[sync]['spread_turns_per_s']}):"
                f" agentik / sketch {row['sqlite_over_sketch']:.2f}"
                f" (run by run {row['sqlite_over_sketch_pairs']},"
                f" median {row['sqlite_over_sketch_pair_median']:.2f});"
                f" CPU a turn: sketch {sketch['cpu_us_per_turn']:.0f} µs,"
                f" agentik {row[sync]['cpu_us_per_turn']:.0f} µs,"
                f" sketch / agentik {row['sqlite_over_sketch_cpu']:.2f}"
            )
    for row in report["runs"]:  # type: ignore[union-attr]
        if "full_over_normal" in row:
            full, normal = row["sqlite-FULL"], row["sqlite-NORMAL"]
            print(
                f"N={row['conversations']}: FULL {full['turns_per_s']:.0f} turns/s,"
                f" NORMAL {normal['turns_per_s']:.0f} turns/s,"
                f" FULL / NORMAL {row['full_over_normal']:.2f}"
            )
    if rss is not None:
        print(
            f"idle conversation after one turn: {rss['bytes_per_conversation'] / 1024:.1f} KiB"
            f" resident each ({rss['conversations']} conversations)"
        )


if __name__ == "__main__":
    main()
