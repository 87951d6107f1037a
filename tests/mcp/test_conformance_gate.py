"""The README's test command passes on a machine with node but no ``npm ci``
(or no node at all): the MCP conformance tests then skip, and say so at the
end of the run; under CI (``CI`` set) the same run fails, naming the fix."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import trio

ROOT = Path(__file__).resolve().parents[2]


async def run_conformance(tmp_path: Path, *, ci: bool, node: bool) -> tuple[int, str]:
    """pytest on test_conformance.py with an empty ``node_modules`` (as before
    ``npm ci``), and with or without node on the PATH."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    empty = tmp_path / "node_modules"
    empty.mkdir()
    env["AGENTIK_NODE_MODULES"] = str(empty)
    if not node:
        env["PATH"] = str(tmp_path)  # a directory with no node in it
    if ci:
        env["CI"] = "true"
    with trio.fail_after(120):
        result = await trio.run_process(
            [
                sys.executable,
                "-m",
                "pytest",
                "-rs",
                "tests/mcp/test_conformance.py",
            ],
            cwd=ROOT,
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return result.returncode, result.stdout.decode() + result.stderr.decode()


@pytest.mark.skipif(shutil.which("node") is None, reason="the case of a machine with node")
async def test_node_without_npm_ci_skips_loudly(tmp_path: Path) -> None:
    code, out = await run_conformance(tmp_path, ci=False, node=True)
    assert code == 0, out
    assert "25 skipped" in out, out
    assert "MCP CONFORMANCE TESTS SKIPPED: the suite is not installed at" in out, out
    assert "run `npm ci`" in out


async def test_no_node_skips_loudly(tmp_path: Path) -> None:
    code, out = await run_conformance(tmp_path, ci=False, node=False)
    assert code == 0, out
    assert "MCP CONFORMANCE TESTS SKIPPED: node is not installed" in out, out


@pytest.mark.parametrize("node", [True, False])
async def test_under_ci_a_missing_suite_fails(tmp_path: Path, node: bool) -> None:
    code, out = await run_conformance(tmp_path, ci=True, node=node)
    assert code == 1, out
    assert "CI must run the MCP conformance tests" in out, out
    assert "SKIPPED" not in out
