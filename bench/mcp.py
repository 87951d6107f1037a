"""Latency an MCP tool call adds over stdio, next to a direct Python tool, in one run.

Run: /work/venv/bin/python bench/mcp.py [--calls 1000] [--repeat 3]

Three ways to add two integers, each called ``--calls`` times in turn
(interleaved per repeat, after a warm-up), timed with the wall clock since the
cost is mostly inter-process I/O:

- ``direct``: a ``NamedTool`` whose handler adds in Python (the baseline);
- ``sdk``: the bare ``mcp`` SDK ``Client.call_tool`` to the same server;
- ``agentik``: the ``NamedTool`` an ``McpToolset`` builds, as the agent calls it
  (timeout scope, state checks, result rendering on top of the SDK call).

The server is this script run with ``--serve`` (an ``MCPServer`` with one
``add`` tool). It prints median and p99 wall time per call in microseconds,
this process's CPU time per call (the client side alone: the servers are
other processes, so this column holds still when the machine is loaded), the
added latency (``agentik`` minus ``direct``), and ``agentik`` over ``sdk``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named mcp.py: drop its directory from the import path, or it
# would shadow the mcp package it benchmarks.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402

import trio  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

from agentik._json import JsonObject  # noqa: E402
from agentik.mcp import McpServerConfig, StdioServer, open_mcp_toolsets  # noqa: E402
from agentik.toolsets import NamedTool  # noqa: E402

Call = Callable[[], Awaitable[str]]


def serve() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    server.run()


async def _direct_add(arguments: JsonObject) -> str:
    a, b = arguments["a"], arguments["b"]
    assert isinstance(a, int)
    assert isinstance(b, int)
    return str(a + b)


async def _timed(call: Call, calls: int) -> tuple[list[float], float]:
    """Wall time of each call, and this process's CPU time for the whole batch."""
    samples = []
    cpu = time.process_time()
    for _ in range(calls):
        start = time.perf_counter()
        assert await call() == "5"
        samples.append(time.perf_counter() - start)
    return samples, time.process_time() - cpu


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


ME = str(Path(__file__).resolve())


async def main(calls: int, repeat: int) -> None:
    me = ME
    direct_tool = NamedTool("calc_add", "Add.", {"type": "object"}, _direct_add)
    config = McpServerConfig(
        transport=StdioServer(command=sys.executable, args=[me, "--serve"]), name="bench"
    )
    params = StdioServerParameters(command=sys.executable, args=[me, "--serve"])
    async with open_mcp_toolsets([config]) as (source,), Client(params, cache=None) as client:
        (mcp_tool,) = source.contribution.tools

        async def sdk() -> str:
            result = await client.call_tool("add", {"a": 2, "b": 3})
            text = result.content[0]
            assert text.type == "text"
            return text.text

        ways: dict[str, Call] = {
            "direct": lambda: direct_tool.handler({"a": 2, "b": 3}),
            "sdk": sdk,
            "agentik": lambda: mcp_tool.handler({"a": 2, "b": 3}),
        }
        for call in ways.values():
            await _timed(call, 50)  # warm-up
        samples: dict[str, list[float]] = {name: [] for name in ways}
        cpu: dict[str, float] = dict.fromkeys(ways, 0.0)
        for _ in range(repeat):
            for name, call in ways.items():
                wall, spent = await _timed(call, calls)
                samples[name] += wall
                cpu[name] += spent
    median = {name: statistics.median(s) * 1e6 for name, s in samples.items()}
    p99 = {name: _p(s, 0.99) for name, s in samples.items()}
    cpu_us = {name: spent / (calls * repeat) * 1e6 for name, spent in cpu.items()}
    print(f"{calls} calls x {repeat} repeats per way, stdio, microseconds per call")
    print(f"{'way':<8} {'median':>10} {'p99':>10} {'client CPU':>11}")
    for name in ways:
        print(f"{name:<8} {median[name]:>10.1f} {p99[name]:>10.1f} {cpu_us[name]:>11.1f}")
    added = median["agentik"] - median["direct"], p99["agentik"] - p99["direct"]
    print(
        f"added by an MCP call (agentik - direct): median {added[0]:.1f} us, p99 {added[1]:.1f} us"
    )
    print(
        f"agentik / sdk: median {median['agentik'] / median['sdk']:.3f}x,"
        f" p99 {p99['agentik'] / p99['sdk']:.3f}x,"
        f" client CPU {cpu_us['agentik'] / cpu_us['sdk']:.3f}x"
        f" ({cpu_us['agentik'] - cpu_us['sdk']:+.1f} us)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--serve", action="store_true", help="run as the benchmark's MCP server")
    args = parser.parse_args()
    if args.serve:
        serve()
    else:
        trio.run(main, args.calls, args.repeat)
