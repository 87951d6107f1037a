"""The AG-UI npm client tests cannot be skipped silently: without node (or
without ``npm ci``) a run says so in its summary, and under CI they fail."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[2]


async def run_without_node(tmp_path: Path, *, ci: bool) -> tuple[int, str]:
    """pytest on test_agui_node.py with a PATH where no node can be found."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(tmp_path)  # empty: no node, no npm
    if ci:
        env["CI"] = "true"
    with trio.fail_after(120):
        result = await trio.run_process(
            [
                sys.executable,
                "-m",
                "pytest",
                "-n",  # one process: this run is a few tests, not worth workers
                "0",
                "-p",
                "no:cacheprovider",
                "-q",
                "-rs",
                "tests/server/test_agui_node.py",
            ],
            cwd=ROOT,
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return result.returncode, result.stdout.decode() + result.stderr.decode()


async def test_the_skip_is_in_the_summary(tmp_path: Path) -> None:
    code, out = await run_without_node(tmp_path, ci=False)
    assert code == 0, out
    assert "warnings summary" in out
    assert "the AG-UI npm client tests (tests/server/test_agui_node.py) are skipped" in out
    assert "node is not installed" in out


async def test_under_ci_a_missing_client_fails(tmp_path: Path) -> None:
    code, out = await run_without_node(tmp_path, ci=True)
    assert code == 1, out
    assert "CI must run the AG-UI npm client tests: node is not installed" in out
