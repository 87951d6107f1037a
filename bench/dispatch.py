"""Dispatch cost against scale: 1 toolset of 3 tools vs 500 toolsets of 20 tools.

Run: /work/venv/bin/python bench/dispatch.py [--repeat 30] [--calls 10000]

Prints CPU ns per call (the minimum and the median over interleaved repeats;
CPU time, so other processes on the shared cores do not count) for the
module-level ``dispatch`` (tuple of contributions, index cached by identity)
and for ``ToolsetIndex.dispatch`` (the agent's hot path), and the large/small
ratio of the minimums (expected within 2x: dispatch is O(1) in toolsets and
tools). The same-process baseline is a bare dict lookup over the same calls:
its own large/small ratio shows what the memory hierarchy alone costs at
10,000 tools. Call names are fresh strings, as a JSON parser produces them.
Also: ``parse_arguments`` against bare ``json.loads`` for a small argument object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import timeit
from collections.abc import Callable

from agentik import ToolCall
from agentik._json import JsonObject
from agentik.toolsets import (
    NamedTool,
    ToolsetContribution,
    ToolsetIndex,
    dispatch,
    parse_arguments,
    tool,
)


async def _answer(arguments: JsonObject) -> str:
    return "ok"


def _toolsets(count: int, tools_each: int) -> tuple[ToolsetContribution, ...]:
    return tuple(
        ToolsetContribution(
            f"set{i}",
            f"toolset number {i}",
            [
                NamedTool(f"set{i}_verb{j}", "a tool", {"type": "object"}, _answer)
                for j in range(tools_each)
            ],
        )
        for i in range(count)
    )


def _calls(contributions: tuple[ToolsetContribution, ...], n: int) -> list[ToolCall]:
    """A fixed mix: tools of active and inactive toolsets, core tools, unknown names."""
    rng = random.Random(42)
    calls = []
    for k in range(n):
        kind = k % 4
        if kind in (0, 1):
            contribution = rng.choice(contributions)
            name = rng.choice(contribution.tools).name
        elif kind == 2:
            name = "core_time"
        else:
            name = f"set{rng.randrange(len(contributions))}_missing"
        # A fresh string, as a JSON parser would produce: not the tool's own name object.
        calls.append(ToolCall(f"c{k}", json.loads(json.dumps(name)), "{}"))
    return calls


# CPU time of this process: other processes on the 2 shared cores do not count.
_CPU = time.process_time


def _time(fn: Callable[[], object], number: int, repeat: int) -> list[float]:
    """Seconds per call, one figure per repeat."""
    return [t / number for t in timeit.repeat(fn, timer=_CPU, number=number, repeat=repeat)]


def _fmt(samples: list[float]) -> str:
    ns = [s * 1e9 for s in samples]
    return f"min {min(ns):7.1f} ns/call, median {statistics.median(ns):7.1f}"


def _runners(
    count: int, tools_each: int, n_calls: int, core: dict[str, NamedTool]
) -> dict[str, Callable[[], None]]:
    contributions = _toolsets(count, tools_each)
    index = ToolsetIndex(contributions)
    active = frozenset(c.name for c in contributions[::2])
    calls = _calls(contributions, n_calls)
    lookup = {t.name: t for c in contributions for t in c.tools}

    def run_dispatch() -> None:
        for call in calls:
            dispatch(active, contributions, call, core)

    def run_index() -> None:
        for call in calls:
            index.dispatch(active, call, core)

    def run_baseline() -> None:
        for call in calls:
            lookup.get(call.name)

    return {"dispatch": run_dispatch, "index": run_index, "baseline": run_baseline}


SCALES = {"small": (1, 3), "large": (500, 20)}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--calls", type=int, default=10_000)
    options = parser.parse_args()
    core = {"core_time": NamedTool("core_time", "the time", {"type": "object"}, _answer)}
    runners = {label: _runners(*scale, options.calls, core) for label, scale in SCALES.items()}
    samples: dict[str, dict[str, list[float]]] = {
        label: {name: [] for name in runners[label]} for label in SCALES
    }
    # Interleave scales and variants so load from other processes hits all alike.
    for _ in range(options.repeat):
        for label in SCALES:
            for name, run in runners[label].items():
                samples[label][name].extend(
                    t / options.calls for t in timeit.repeat(run, timer=_CPU, number=1, repeat=1)
                )
    for label, (count, tools_each) in SCALES.items():
        print(f"{label}: {count} toolset(s) x {tools_each} tools = {count * tools_each} tools")
        for name, figures in samples[label].items():
            print(f"  {name:9s} {_fmt(figures)}")
    print("ratio large / small (min per call; within 2x = independent of scale):")
    for name in ("dispatch", "index", "baseline"):
        ratio = min(samples["large"][name]) / min(samples["small"][name])
        print(f"  {name:9s} {ratio:.2f}x")
    index_vs_lookup = min(samples["large"]["index"]) / min(samples["large"]["baseline"])
    print(f"index.dispatch / bare dict lookup (large): {index_vs_lookup:.1f}x")

    @tool
    async def weather(city: str, days: int = 1, unit: str | None = None) -> str:
        """Weather for a city."""
        return city

    raw = '{"city": "Paris", "days": 3, "unit": null}'
    parse = _time(lambda: parse_arguments(weather, raw), 20_000, options.repeat)
    loads = _time(lambda: json.loads(raw), 20_000, options.repeat)
    print(f"parse_arguments {_fmt(parse)}; json.loads {_fmt(loads)}; ", end="")
    print(f"ratio {min(parse) / min(loads):.2f}x")


if __name__ == "__main__":
    main()
