"""The ``agentik`` command: version, demo, inspection, configuration errors."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

import agentik
from agentik.cli import main
from agentik.cli._serve import LineFormatter


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentik.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"agentik {agentik.__version__}\n"


def test_demo_runs_turns(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo streams three turns, one of them through a toolset, and stores them."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "agent> You said: hello agentik" in out
    assert "[result] Toolset 'clock' activated." in out
    assert "[result] 12:00 UTC (a demo clock)" in out
    assert "10 messages stored" in out


def test_demo_names_no_database_it_deletes(tmp_path: Path) -> None:
    """Every database path the demo prints can be opened after it exits (it
    prints none: its database is temporary), and it says where chat keeps one."""
    result = run_cli("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    printed = [p for p in re.findall(r"\S+\.db\b", result.stdout) if p != "./agentik.db"]
    assert all(Path(tmp_path, path).is_file() for path in printed), printed
    assert "temporary and is deleted now" in result.stdout
    assert "./agentik.db" in result.stdout


def test_conversations_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inspection reads what the demo wrote; a missing database is refused, not created."""
    import trio

    from agentik.cli._demo import demo

    database = tmp_path / "d.db"
    trio.run(demo, database)
    capsys.readouterr()
    assert main(["conversations", "--database", str(database)]) == 0
    assert capsys.readouterr().out.startswith("demo\t")
    assert main(["show", "demo", "--database", str(database)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == "#1 user: hello agentik"
    assert any(line.startswith("    call ") and "enable_toolset" in line for line in shown)
    assert main(["show", "other", "--database", str(database)]) == 1
    assert main(["conversations", "--database", str(tmp_path / "none.db")]) == 1
    assert not (tmp_path / "none.db").exists()


def test_bad_config_file_exits_nonzero(tmp_path: Path) -> None:
    """A bad config gets a precise message naming the key and exit code 2."""
    (tmp_path / "agentik.toml").write_text("[limits]\nmax_queued_turns = 'many'\n")
    result = run_cli("serve", cwd=tmp_path)
    assert result.returncode == 2
    assert "[limits] max_queued_turns must be a positive integer, got 'many'" in result.stderr


def test_bad_toolset_entry_point(tmp_path: Path) -> None:
    result = run_cli("serve", "--toolset", "no_such_module_x:thing", cwd=tmp_path)
    assert result.returncode == 2
    assert "toolsets entry 'no_such_module_x:thing' cannot be loaded" in result.stderr


def test_bad_tool_entry_point(tmp_path: Path) -> None:
    result = run_cli("serve", "--tool", "no_such_module_x:thing", cwd=tmp_path)
    assert result.returncode == 2
    assert "[agent] tools entry 'no_such_module_x:thing' cannot be loaded" in result.stderr


def test_log_lines_carry_the_time_of_their_own_second() -> None:
    stock = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S")
    formatter = LineFormatter()
    for created in (1_800_000_000.2, 1_800_000_000.9, 1_800_000_001.0, 1_800_000_000.5):
        record = logging.makeLogRecord(
            {"name": "agentik.server", "levelname": "INFO", "msg": "turn", "created": created}
        )
        assert formatter.format(record) == stock.format(record)
