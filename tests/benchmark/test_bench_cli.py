"""``agentik bench`` from the command line, in process and against a real
server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from agentik.benchmark import BenchConfig, run_bench
from agentik.cli import main
from tests.server.conftest import start_server


def test_bench_command_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "-n", "10", "-m", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "turns ok / failed / overloaded   20 / 0 / 0" in out
    assert "writer batches" in out


def test_bench_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "-n", "4", "-m", "1", "--storage", "memory", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["turns_ok"] == 4
    assert data["target"] == "in-process (memory)"


def test_bench_command_refuses_bad_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "-n", "0"]) == 2
    assert "must be >= 1" in capsys.readouterr().err


async def test_bench_against_a_running_server(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Turns go over HTTP to the native API; every one is acknowledged and stored."""
    async for running in start_server(nursery, tmp_path):
        result = await run_bench(BenchConfig(conversations=8, turns=3, url=running.url))
        assert result.turns_ok == 24
        assert result.turns_failed == 0
        assert result.target == f"http {running.url}"
        listed = await running.client.get("/agentik/conversations", params={"limit": 100})
        assert listed.status_code == 200
        assert "bench-7" in listed.text
