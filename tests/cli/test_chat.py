"""``agentik chat``: streaming terminal chat, in-process and against a running server."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

from agentik.storage import open_sqlite_storage
from tests.server.approval_tools import RUNS
from tests.server.conftest import Running, start_server

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
    """Without --url the chat runs an agent on the database itself; with nothing
    configured, the docs' first tool call works (the demo clock toolset)."""
    database = tmp_path / "chat.db"
    typed = b'hi there\ncall enable_toolset {"name": "clock"}\ncall clock_now {"tz": "UTC"}\n'
    out = await chat("--database", str(database), stdin=typed, cwd=tmp_path)
    assert "scripted demo model" in out
    assert "agent> You said: hi there" in out
    assert "  [result] Toolset 'clock' activated.\n" in out
    assert "  [result] 12:00 UTC (a demo clock)\n" in out
    async with open_sqlite_storage(database) as storage:
        assert await storage.message_store.list_conversations() == ["cli"]


async def test_chat_reports_http_errors(server: Running, tmp_path: Path) -> None:
    out = await chat("--url", server.url, "--conversation", " ", stdin=b"hello\n", cwd=tmp_path)
    assert "[HTTP 422]" in out


PAY = b'call ledger_pay {"amount": 3}\n'
ASKED = '  approve ledger_pay({"amount": 3})? [y/N] '
RAN = '  [tool] ledger_pay({"amount": 3})\n  [result] paid 3\n'
"""What an approved call prints, remote and in process alike."""
REOPENED = "  1 tool call(s) wait for approval; a new message would deny them\n"


async def test_chat_asks_before_a_call_that_needs_approval(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A turn waiting for approval asks at the prompt; y runs the call, anything
    else denies it; Ctrl-D at the question leaves the call waiting."""
    RUNS.clear()
    async for server in start_server(
        nursery, tmp_path, tools=("tests.server.approval_tools:ledger_tools",)
    ):
        base = ("--url", server.url, "--conversation")
        out = await chat(*base, "yes", stdin=PAY + b"y\n", cwd=tmp_path)
        assert ASKED + RAN + "agent> ledger_pay returned: paid 3\n" in out
        assert RUNS == ["pay 3"]
        out = await chat(*base, "no", stdin=PAY + b"\n", cwd=tmp_path)
        assert ASKED + "  [error] denied\n" + "agent> ledger_pay returned: denied\n" in out
        out = await chat(*base, "later", stdin=PAY, cwd=tmp_path)
        assert out.endswith(ASKED), "Ctrl-D at the question ends the chat"
        waiting = await server.client.get("/agentik/conversations/later/approvals")
        assert [a["name"] for a in waiting.json()["approvals"]] == ["ledger_pay"]
        assert RUNS == ["pay 3"]


async def test_chat_in_process_asks_too(tmp_path: Path) -> None:
    database = tmp_path / "chat.db"
    config = tmp_path / "agentik.toml"
    config.write_text('[agent]\ntools = ["tests.server.approval_tools:ledger_tools"]\n')
    out = await chat(
        "--database", str(database), "--config", str(config), stdin=PAY + b"y\n", cwd=tmp_path
    )
    assert ASKED + RAN + "agent> ledger_pay returned: paid 3\n" in out


async def test_reopening_asks_about_calls_still_waiting(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A chat left at the question (Ctrl-D) leaves the call waiting; the next
    chat on the conversation shows it and asks before taking a message, so
    that message cannot deny it unseen. Remote and in process alike."""
    RUNS.clear()
    config = tmp_path / "agentik.toml"
    config.write_text('[agent]\ntools = ["tests.server.approval_tools:ledger_tools"]\n')
    async for server in start_server(
        nursery, tmp_path, tools=("tests.server.approval_tools:ledger_tools",)
    ):
        where = {
            "remote": ("--url", server.url, "--conversation", "again"),
            "in process": ("--database", str(tmp_path / "chat.db"), "--config", str(config)),
        }
        for mode, args in where.items():
            RUNS.clear()
            out = await chat(*args, stdin=PAY, cwd=tmp_path)
            assert out.endswith(ASKED), (mode, out)
            out = await chat(*args, stdin=b"y\nhello\n", cwd=tmp_path)
            rest = out.split("\n", 1)[1]  # after the banner
            assert rest.startswith(REOPENED + ASKED + RAN), (mode, out)
            assert "agent> You said: hello\n" in rest, (mode, out)
            # The in-process tool runs in the chat's process, not this one.
            assert (["pay 3"] if mode == "remote" else []) == RUNS, (mode, RUNS)
            out = await chat(*args, stdin=b"hello again\n", cwd=tmp_path)
            assert REOPENED not in out, (mode, out)


LOTS = b'call ledger_pay {"amount": "lots"}\n'
LOTS_ERROR = (
    "  [error] error: invalid arguments for tool 'ledger_pay': field 'amount' must be an"
    ' integer, got a string "lots"\n'
)


async def test_chat_never_asks_about_a_call_with_invalid_arguments(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Against a server and in process: the call's result is the schema's error,
    printed as any failed call's; no question is asked (the ``y`` typed next is
    a new message), nothing runs, nothing waits."""
    RUNS.clear()
    async for server in start_server(
        nursery, tmp_path, tools=("tests.server.approval_tools:ledger_tools",)
    ):
        out = await chat(
            "--url", server.url, "--conversation", "bad", stdin=LOTS + b"y\n", cwd=tmp_path
        )
        assert "approve" not in out
        assert LOTS_ERROR in out
        assert "agent> You said: y\n" in out
        waiting = await server.client.get("/agentik/conversations/bad/approvals")
        assert waiting.json()["approvals"] == []
    config = tmp_path / "agentik.toml"
    config.write_text('[agent]\ntools = ["tests.server.approval_tools:ledger_tools"]\n')
    out = await chat(
        "--database",
        str(tmp_path / "chat.db"),
        "--config",
        str(config),
        stdin=LOTS + b"y\n",
        cwd=tmp_path,
    )
    assert "approve" not in out
    assert LOTS_ERROR in out
    assert RUNS == []


async def test_chat_in_process_applies_the_configured_limits(tmp_path: Path) -> None:
    """The in-process chat opens its agent with the file's ``[limits]`` on notes
    and skills and its ``[model] context_tokens``, as ``agentik serve`` does."""
    config = tmp_path / "agentik.toml"
    config.write_text("[limits]\nmax_note = 5\n[model]\ncontext_tokens = 300\n")
    out = await chat(
        "--database",
        str(tmp_path / "chat.db"),
        "--config",
        str(config),
        stdin=b'call memory_add {"text": "too long"}\n' + b"word " * 400 + b"\n",
        cwd=tmp_path,
    )
    assert "  [error] error: the note has 8 characters; at most 5 are allowed (max_note)" in out
    assert "  [turn failed: context_exhausted] the message needs " in out
