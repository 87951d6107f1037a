"""``agentik bench``'s engine: it runs the workload it is asked for and
reports what happened, on both backends."""

from __future__ import annotations

import json

import pytest
import trio.testing

from agentik import Message, Role
from agentik._serde import converter
from agentik.benchmark import BenchConfig, format_table, run_bench, workload_responder
from agentik.models import ModelRequest


async def test_in_process_sqlite_run_counts_every_turn() -> None:
    """N x M turns all succeed; the writer batched them (mean batch > 1)."""
    result = await run_bench(BenchConfig(conversations=40, turns=3))
    assert result.turns_ok == 120
    assert result.turns_failed == result.turns_overloaded == 0
    assert result.turns_per_s > 0
    assert result.latency_ms_p50 <= result.latency_ms_p95 <= result.latency_ms_p99
    assert result.writer_batches is not None
    assert result.writer_mean_batch is not None
    assert result.writer_mean_batch > 1
    assert result.peak_rss_mb >= result.rss_mb > 0


async def test_model_time_is_told_apart(autojump_clock: trio.testing.MockClock) -> None:
    """With a 1 s scripted model and 2 tool calls per turn, model time is 3 s
    per turn (3 model calls), summed over every turn."""
    result = await run_bench(
        BenchConfig(conversations=5, turns=2, storage="memory", latency=1.0, tool_calls=2)
    )
    assert result.turns_ok == 10
    assert result.model_seconds is not None
    assert result.model_seconds == pytest.approx(30.0, rel=0.01)
    assert result.writer_batches is None  # no writer in memory


def test_workload_makes_the_asked_number_of_calls() -> None:
    """tool_calls calls per turn, then text of reply_chars characters."""
    respond = workload_responder(2, 10)
    history: list[Message] = [Message(Role.USER, "go")]
    answers = []
    for _ in range(3):
        response = respond(ModelRequest([Message(Role.SYSTEM, "s"), *history]))
        answers.append(response)
        if response.tool_calls:
            call = response.tool_calls[0]
            history += [
                Message(Role.ASSISTANT, "", (call,)),
                Message(Role.TOOL, "x", tool_call_id=call.id),
            ]
    assert [bool(a.tool_calls) for a in answers] == [True, True, False]
    assert answers[-1].text == "ok ok ok o"


async def test_table_and_json_report_the_same_run() -> None:
    result = await run_bench(BenchConfig(conversations=3, turns=1, storage="memory"))
    table = format_table(result)
    assert "turns/s" in table
    assert "3 x 1" in table
    data = json.loads(json.dumps(converter.unstructure(result)))
    assert data["turns_ok"] == 3


async def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        await run_bench(BenchConfig(conversations=0))
    with pytest.raises(ValueError, match="storage must be"):
        await run_bench(BenchConfig(storage="postgres"))
