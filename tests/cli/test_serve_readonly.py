"""``agentik serve`` on a database file that is read-only (permissions, as
after a restore or a read-only mount): ``/health`` says degraded from the
start and names SQLite's error once a write fails, and SIGTERM still exits 0
(``PRAGMA optimize`` failing during close is not an error of the shutdown).

A real subprocess on a real file made read-only: with ``chmod``, or, when
the tests run as root (CI does), which ignores permissions, with the
immutable attribute (``chattr +i``), which root's writes obey too. SQLite
opens either the same way: its ``open`` for writing fails, it retries
read-only.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
import trio

from agentik import Message, Role
from agentik.storage import open_sqlite_storage

ROOT = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` cannot be opened for writing, by this process's user, root too."""
    if os.geteuid() != 0:
        path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        yield
        return
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("running as root, and chattr (e2fsprogs) is not installed")
    made = subprocess.run([chattr, "+i", str(path)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"running as root, and chattr +i failed: {made.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


async def read_lines(stream: trio.abc.ReceiveStream, lines: list[str], bound: trio.Event) -> None:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for raw in complete:
            lines.append(raw.decode(errors="replace"))
            if "serving url=" in lines[-1]:
                bound.set()


async def test_serve_on_a_read_only_database(tmp_path: Path) -> None:
    database = tmp_path / "agentik.db"
    async with open_sqlite_storage(database) as storage:
        # A finished turn: an unfinished one would be resumed at start (a write).
        await storage.message_store.append("kept", Message(Role.USER, "hello"))
        await storage.message_store.append("kept", Message(Role.ASSISTANT, "hi"))
    with read_only(database):
        code, lines, seen = await serve_and_stop(database)
    text = "\n".join(lines)
    assert code == 0, text
    assert "Traceback" not in text
    assert lines[-1].endswith("INFO agentik.server stopped"), text
    before, after = seen["health before"], seen["health after"]
    assert before.status_code == 503, before.text
    assert "read-only" in before.json()["storage_error"]["message"]
    assert seen["turn"].json()["error"]["code"] == "store_error"
    assert after.status_code == 503, after.text
    assert "attempt to write a readonly database" in after.json()["storage_error"]["message"]
    kept = seen["kept"].json()["messages"]
    assert [m["content"] for m in kept] == ["hello", "hi"]


async def serve_and_stop(
    database: Path,
) -> tuple[int, list[str], dict[str, httpx2.Response]]:
    """Serve ``database``; ask /health, run a turn, ask /health and read the
    kept conversation; SIGTERM. The exit code, the log lines, the answers."""
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "agentik.cli",
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database",
            str(database),
        ],
        stderr=subprocess.PIPE,
        cwd=database.parent,
        env=cli_env(),
    )
    lines: list[str] = []
    seen: dict[str, httpx2.Response] = {}
    bound = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            assert process.stderr is not None
            nursery.start_soon(read_lines, process.stderr, lines, bound)
            with trio.fail_after(60):
                await bound.wait()
            url = next(line for line in lines if "serving url=" in line).split("url=")[1].split()[0]
            async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
                seen["health before"] = await client.get("/health")
                seen["turn"] = await client.post(
                    "/agentik/conversations/new/turns", json={"text": "hi"}
                )
                seen["health after"] = await client.get("/health")
                seen["kept"] = await client.get("/agentik/conversations/kept/messages")
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(60):
                code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return code, lines, seen
