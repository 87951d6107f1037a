"""``agentik bench`` from the command line, in process and against a real
server on 127.0.0.1."""

from __future__ import annotations

import json
import re
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


def test_bench_command_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    """--prefix names the conversations; without it a random one is printed."""
    args = ["bench", "-n", "3", "-m", "1", "--storage", "memory", "--no-progress"]
    assert main([*args, "--prefix", "client-a"]) == 0
    assert "conversation ids                 client-a-0 .. client-a-2" in capsys.readouterr().out
    assert main(args) == 0
    printed = capsys.readouterr().out
    first = re.search(r"conversation ids +(bench-[0-9a-f]{6})-0 \.\. \1-2\n", printed)
    assert main(args) == 0
    second = re.search(r"conversation ids +(bench-[0-9a-f]{6})-0", capsys.readouterr().out)
    assert first is not None
    assert second is not None
    assert first[1] != second[1]


@pytest.mark.parametrize("prefix", ["", "a b", "a/b", "é", "x" * 65, "a?b"])
def test_bench_command_refuses_a_prefix_a_url_would_mangle(
    capsys: pytest.CaptureFixture[str], prefix: str
) -> None:
    assert main(["bench", "-n", "1", "--storage", "memory", "--prefix", prefix]) == 2
    assert "agentik bench: prefix must be 1..64 characters of A-Z a-z 0-9 . _ ~ -, got " in (
        capsys.readouterr().err
    )


async def test_bench_against_a_running_server(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Turns go over HTTP to the native API; every one is acknowledged and stored."""
    async for running in start_server(nursery, tmp_path):
        result = await run_bench(BenchConfig(conversations=8, turns=3, url=running.url))
        assert result.turns_ok == 24
        assert result.turns_failed == 0
        assert result.target == f"http {running.url}"
        listed = await running.client.get("/agentik/conversations", params={"limit": 100})
        assert listed.status_code == 200
        assert sorted(listed.json()["conversations"]) == sorted(
            f"{result.prefix}-{i}" for i in range(8)
        )
