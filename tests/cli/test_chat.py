"""``agentik chat``: streaming terminal chat, in-process and against a running server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

from agentik.storage import open_sqlite_storage
from tests.server.conftest import Running

ROOT = Path(__file__).resolve().parents[2]


async def chat(*args: str, stdin: bytes, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    result = await trio.run_process(
        [sys.executable, "-m", "agentik.cli", "chat", *args],
        stdin=stdin,
        capture_stdout=True,
        capture_stderr=True,
        cwd=cwd,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


async def test_chat_against_a_server(server: Running, tmp_path: Path) -> None:
    """Lines typed go to the server's native SSE endpoint; answers and tool calls print."""
    out = await chat(
        "--url",
        server.url,
        "--conversation",
        "tty",
        stdin=b'hello\n\ncall enable_toolset {"name": "clock"}\n',
        cwd=tmp_path,
    )
    assert "agent> You said: hello\n" in out
    assert '  [tool] enable_toolset({"name": "clock"})\n' in out
    assert "  [result] Toolset 'clock' activated.\n" in out
    stored = (await server.client.get("/agentik/conversations/tty/messages")).json()
    roles = [m["role"] for m in stored["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant"]


async def test_chat_in_process(tmp_path: Path) -> None:
    """Without --url the chat runs an agent on the database itself."""
    database = tmp_path / "chat.db"
    out = await chat("--database", str(database), stdin=b"hi there\n", cwd=tmp_path)
    assert "scripted demo model" in out
    assert "agent> You said: hi there" in out
    async with open_sqlite_storage(database) as storage:
        assert await storage.message_store.list_conversations() == ["cli"]


async def test_chat_reports_http_errors(server: Running, tmp_path: Path) -> None:
    out = await chat("--url", server.url, "--conversation", " ", stdin=b"hello\n", cwd=tmp_path)
    assert "[HTTP 422]" in out
