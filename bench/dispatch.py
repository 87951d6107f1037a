"""Dispatch cost against scale: 1 toolset of 3 tools vs 500 toolsets of 20 tools.

Run: /work/venv/bin/python bench/dispatch.py [--repeat 30] [--calls 10000]

For each scale it prints CPU ns per call, the minimum and the median over
interleaved repeats. CPU time is used so that other processes on the shared
cores do not count. Three variants are timed:

- ``dispatch``: the module-level function, given the ``ToolsetIndex`` (it
  keeps no cache: given a plain tuple it would index all of it on every
  call, which is not what is measured here);
- ``index``: ``ToolsetIndex.dispatch``, the agent's hot path;
- ``baseline``: a bare dict lookup of the same names, in the same process.

The call mix is a quarter each: a tool of an active toolset, a tool of an
inactive toolset, a core tool, and an unknown name with a known prefix. Call
names are fresh strings, as a JSON parser produces them. There are two working
sets:

- ``hot``: the calls name 64 tools spread over the whole index, like the tools
  a burst of conversations is using. This isolates the size of the index, and
  it is the scale-independence figure (expected within 2x);
- ``uniform``: the calls are spread over all 10,000 tools. The data then no
  longer fits in the CPU caches. The baseline's own ratio shows what the
  memory hierarchy alone costs, with no dispatch logic at all.

It also times ``parse_arguments`` against bare ``json.loads`` on a small
argument object.
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

SCALES = {"small": (1, 3), "large": (500, 20)}
WORKING_SETS = {"hot": 64, "uniform": None}
# CPU time of this process: other processes on the 2 shared cores do not count.
_CPU = time.process_time


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


def _calls(
    contributions: tuple[ToolsetContribution, ...], n: int, working_set: int | None
) -> list[ToolCall]:
    rng = random.Random(42)
    names = [t.name for c in contributions for t in c.tools]
    if working_set is not None and working_set < len(names):
        names = rng.sample(names, working_set)
    missing = [f"{name.partition('_')[0]}_missing" for name in names]
    calls = []
    for k in range(n):
        kind = k % 4
        if kind in (0, 1):
            name = rng.choice(names)
        elif kind == 2:
            name = "core_time"
        else:
            name = rng.choice(missing)
        # A fresh string, as a JSON parser would produce: not the tool's own name object.
        calls.append(ToolCall(f"c{k}", json.loads(json.dumps(name)), "{}"))
    return calls


def _runners(
    scale: tuple[int, int], working_set: int | None, n_calls: int, core: dict[str, NamedTool]
) -> dict[str, Callable[[], None]]:
    contributions = _toolsets(*scale)
    index = ToolsetIndex(contributions)
    active = frozenset(c.name for c in contributions[::2])
    calls = _calls(contributions, n_calls, working_set)
    lookup = {t.name: t for c in contributions for t in c.tools}

    def run_dispatch() -> None:
        for call in calls:
            dispatch(active, index, call, core)

    def run_index() -> None:
        for call in calls:
            index.dispatch(active, call, core)

    def run_baseline() -> None:
        for call in calls:
            lookup.get(call.name)

    return {"dispatch": run_dispatch, "index": run_index, "baseline": run_baseline}


def _fmt(samples: list[float]) -> str:
    ns = [s * 1e9 for s in samples]
    return f"min {min(ns):7.1f} ns/call, median {statistics.median(ns):7.1f}"


def _bench_dispatch(repeat: int, n_calls: int) -> None:
    core = {"core_time": NamedTool("core_time", "the time", {"type": "object"}, _answer)}
    keys = [(ws, scale) for ws in WORKING_SETS for scale in SCALES]
    runners = {key: _runners(SCALES[key[1]], WORKING_SETS[key[0]], n_calls, core) for key in keys}
    samples: dict[tuple[str, str, str], list[float]] = {}
    # Interleave everything, so a burst of outside load hits all variants alike.
    for _ in range(repeat):
        for key, variants in runners.items():
            for name, run in variants.items():
                elapsed = timeit.timeit(run, timer=_CPU, number=1)
                samples.setdefault((*key, name), []).append(elapsed / n_calls)
    for ws in WORKING_SETS:
        print(f"working set: {ws}")
        for scale, (count, each) in SCALES.items():
            print(f"  {scale}: {count} toolset(s) x {each} tools = {count * each} tools")
            for name in runners[(ws, scale)]:
                print(f"    {name:9s} {_fmt(samples[(ws, scale, name)])}")
        print("  ratio large / small (min per call):")
        for name in runners[(ws, "large")]:
            ratio = min(samples[(ws, "large", name)]) / min(samples[(ws, "small", name)])
            print(f"    {name:9s} {ratio:.2f}x")


def _bench_arguments(repeat: int) -> None:
    @tool
    async def weather(city: str, days: int = 1, unit: str | None = None) -> str:
        """Weather for a city."""
        return city

    raw = '{"city": "Paris", "days": 3, "unit": null}'
    number = 20_000
    parse = [
        t / number
        for t in timeit.repeat(
            lambda: parse_arguments(weather, raw), timer=_CPU, number=number, repeat=repeat
        )
    ]
    loads = [
        t / number
        for t in timeit.repeat(lambda: json.loads(raw), timer=_CPU, number=number, repeat=repeat)
    ]
    print(f"parse_arguments {_fmt(parse)}")
    print(f"json.loads      {_fmt(loads)}")
    print(f"ratio (min)     {min(parse) / min(loads):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--calls", type=int, default=10_000)
    options = parser.parse_args()
    _bench_dispatch(options.repeat, options.calls)
    _bench_arguments(min(options.repeat, 10))


if __name__ == "__main__":
    main()
