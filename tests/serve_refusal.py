"""``agentik serve`` run as a real process that is expected to refuse its
settings: it must exit 2, before binding anything, with its reason on
stderr (``refused_serve`` gives the lines)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]


async def refused_serve(cwd: Path, env: dict[str, str]) -> list[str]:
    """Run ``agentik serve`` in ``cwd`` with ``env`` on top of this process's
    environment less its ``AGENTIK_*`` variables; assert it exits 2 and
    prints nothing on stdout; its stderr lines."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    full |= {"PYTHONPATH": str(ROOT), **env}
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "agentik.cli", "serve"],
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            cwd=cwd,
            env=full,
            check=False,
        )
    assert done.returncode == 2, done.stderr.decode()
    assert done.stdout == b"", "a refused serve prints nothing on stdout"
    lines: list[str] = done.stderr.decode().splitlines()
    return lines
