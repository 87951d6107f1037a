"""Smoke test: ``agentik serve`` as a real subprocess on a temporary database.

Waits for /health, runs one turn through each transport (native, AG-UI,
A2A), stops the server with SIGTERM, and checks the exit code and the
history the server left in the database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx2
import trio

from agentik.storage import open_sqlite_storage
from tests.server.agui_rules import check_events, parse_sse

ROOT = Path(__file__).resolve().parents[2]


async def _read_lines(stream: trio.abc.ReceiveStream, lines: list[str], bound: trio.Event) -> None:
    buffer = b""
    async for chunk in stream:
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace")
            lines.append(line)
            if "serving url=" in line:
                bound.set()


async def test_serve_subprocess(tmp_path: Path) -> None:
    database = tmp_path / "smoke.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    command = [
        sys.executable,
        "-m",
        "agentik.cli",
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--database",
        str(database),
        "--toolset",
        "tests.server.sample_toolsets:clock",
    ]
    process = await trio.lowlevel.open_process(
        command, stderr=subprocess.PIPE, cwd=tmp_path, env=env
    )
    lines: list[str] = []
    bound = trio.Event()
    async with trio.open_nursery() as nursery:
        assert process.stderr is not None
        nursery.start_soon(_read_lines, process.stderr, lines, bound)
        with trio.fail_after(60):
            await bound.wait()
        url = next(line for line in lines if "serving url=" in line).split("url=")[1].split()[0]
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            health = (await client.get("/health")).json()
            assert health["status"] == "ok"
            assert health["demo_model"] is True
            assert "scripted demo model" in health["warning"]

            native = await client.post("/agentik/conversations/native/turns", json={"text": "hi"})
            assert native.json()["text"] == "You said: hi"

            agui = await client.post(
                "/agui",
                json={
                    "threadId": "agui",
                    "runId": "r1",
                    "messages": [{"id": "u1", "role": "user", "content": "hey"}],
                },
                headers={"Accept": "text/event-stream"},
            )
            events = parse_sse(agui.text)
            check_events(events)
            assert events[-1]["type"] == "RUN_FINISHED"

            a2a = await client.post(
                "/a2a",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {
                        "message": {
                            "messageId": "m1",
                            "role": "ROLE_USER",
                            "parts": [{"text": "yo"}],
                            "contextId": "a2a",
                        }
                    },
                },
                headers={"A2A-Version": "1.0"},
            )
            task = a2a.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"

        process.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            code = await process.wait()
    assert code == 0, "\n".join(lines)
    text = "\n".join(lines)
    assert "SIGTERM received" in text
    assert "NO MODEL CONFIGURED" in text
    assert text.count(" turn transport=") == 3
    assert "hi" not in [w for line in lines for w in line.split()]  # no message text in logs
    async with open_sqlite_storage(database) as storage:
        store = storage.message_store
        assert await store.list_conversations() == ["a2a", "agui", "native"]
        for conversation_id in ("a2a", "agui", "native"):
            messages = [m async for m in store.get_messages(conversation_id)]
            assert [m.role.value for m in messages] == ["user", "assistant"]
