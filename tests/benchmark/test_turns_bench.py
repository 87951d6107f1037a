"""``bench.turns`` against a model with latency: it waits as asked and measures
what it says, on trio's mock clock (so the figures are exact)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import trio.testing

from bench.turns import Latency, LatentWorkload, memory_backend, run_latency_load

ROOT = Path(__file__).resolve().parents[2]


async def test_a_turn_costs_two_model_calls_and_one_round_of_tools(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """0.5 s model calls, 3 tool calls of 0.2 s: a turn takes 1 s of model
    time plus its measured tool time, which is the serial 0.6 s or the
    parallel 0.2 s (whichever the agent does), and the report names both."""
    latency = Latency(model=0.5, tool=0.2, calls=3)
    figures = await run_latency_load(memory_backend, 4, 2, latency)
    assert figures["model_ms_per_turn"] == pytest.approx(1000)
    assert (figures["tool_ms_serial"], figures["tool_ms_parallel"]) == (600, 200)
    tool = figures["tool_ms_p50"]
    assert tool == pytest.approx(600) or tool == pytest.approx(200)
    assert figures["tool_ms_p99"] == pytest.approx(tool)
    assert figures["p50_ms"] == pytest.approx(1000 + tool)
    assert figures["turns_per_s"] == pytest.approx(8 / (2 * (1 + tool / 1000)))


async def test_one_call_costs_one_tool_latency(autojump_clock: trio.testing.MockClock) -> None:
    """With one call a turn's tool time is that call's, whatever the agent does."""
    figures = await run_latency_load(memory_backend, 3, 1, Latency(model=0.1, tool=0.7, calls=1))
    assert figures["tool_ms_p50"] == pytest.approx(700)
    assert figures["p50_ms"] == pytest.approx(900)


async def test_no_calls_is_a_text_answer(autojump_clock: trio.testing.MockClock) -> None:
    figures = await run_latency_load(memory_backend, 2, 1, Latency(model=0.3, calls=0))
    assert figures["tool_ms_p50"] == 0
    assert figures["p50_ms"] == pytest.approx(300)


async def test_log_normal_delays_have_the_median_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Log-normal model delays (seeded): their median is near the one asked,
    they spread, and the model time a turn reports is what was waited."""
    work = LatentWorkload(Latency(model=0.5, sigma=0.5, seed=7))
    delays = sorted(work.delay() for _ in range(2001))
    assert delays[1000] == pytest.approx(0.5, rel=0.1)
    assert delays[0] < 0.25 and delays[-1] > 1.0
    assert all(d > 0 and math.isfinite(d) for d in delays)
    figures = await run_latency_load(memory_backend, 5, 2, Latency(model=0.5, sigma=0.5, seed=7))
    assert figures["p50_ms"] > figures["tool_ms_p50"]
    assert figures["p99_ms"] > figures["p50_ms"]  # the spread reaches the turns


def test_the_command_line_reports_the_parallel_expectation() -> None:
    """``python -m bench.turns --model-latency … --tool-latency … --tool-calls …``
    prints turns/s, p50/p99 and the tool time against serial and parallel."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.turns",
            "--model-latency",
            "0.05",
            "--tool-latency",
            "0.02",
            "--tool-calls",
            "3",
            "-n",
            "2",
            "--turns",
            "1",
            "--repeat",
            "1",
            "--synchronous",
            "NORMAL",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("model 0.05 s a call (fixed); 3 tool calls of 0.02 s")
    assert "turn p50 / p99 ms" in lines[1] and "serial" in lines[1] and "parallel" in lines[1]
    rows = [line.split("|") for line in lines[2:]]
    assert [row[1].strip() for row in rows] == ["memory", "sqlite-NORMAL"]
    assert all((row[6].strip(), row[7].strip()) == ("60", "20") for row in rows)
