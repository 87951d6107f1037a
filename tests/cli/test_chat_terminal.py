"""``agentik chat`` as a first user meets it: on a terminal (a real pty), with
line editing and Ctrl-C; against a server that is not there or refuses the
token; and ``agentik bench --url`` with a refused token.

The pty test types into a real ``agentik chat`` subprocess and reads its
screen; it waits for what the program prints, never for a fixed time (the
60 s bound only stops a hung run).
"""

from __future__ import annotations

import os
import pty
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from agentik.cli import main
from agentik.storage import open_sqlite_storage
from tests.server.conftest import Running
from tests.server.conftest import secured as secured

ROOT = Path(__file__).resolve().parents[2]


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    env["TERM"] = "xterm"
    env["INPUTRC"] = "/dev/null"  # the stock key bindings, whatever the machine's are
    return env


class Screen:
    """The master side of a pty: what the program wrote, read as it comes."""

    def __init__(self, master: int) -> None:
        self.stream = trio.lowlevel.FdStream(master)
        self.text = ""

    async def wait_for(self, pattern: str, count: int = 1) -> None:
        with trio.fail_after(60):
            while len(re.findall(pattern, self.text)) < count:
                try:
                    chunk = await self.stream.receive_some()
                except trio.BrokenResourceError:  # EIO: the program closed the pty
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"{pattern!r} never came; the screen:\n{self.text}")
                self.text += chunk.decode(errors="replace").replace("\r\n", "\n")

    async def type(self, keys: bytes) -> None:
        await self.stream.send_all(keys)

    async def drain(self) -> None:
        with trio.move_on_after(60):
            while True:
                try:
                    chunk = await self.stream.receive_some()
                except trio.BrokenResourceError:
                    return
                if not chunk:
                    return
                self.text += chunk.decode(errors="replace").replace("\r\n", "\n")


async def test_terminal_chat_edits_lines_recalls_history_and_quits_on_ctrl_c(
    tmp_path: Path,
) -> None:
    """Left arrow edits the line, up arrow recalls it, and no escape code reaches
    the stored message; Ctrl-C at the prompt quits at once, with no traceback."""
    database = tmp_path / "chat.db"
    master, slave = pty.openpty()
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agentik.cli", "chat", "--database", str(database)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=tmp_path,
        env=cli_env(),
        start_new_session=True,
    )
    os.close(slave)
    screen = Screen(master)
    try:
        await screen.wait_for(r"you> ")
        await screen.type(b"helo\x1b[Dl\r")  # "helo", left arrow, "l": "hello"
        await screen.wait_for(r"agent> You said: hello\n")
        await screen.wait_for(r"you> ", 2)
        await screen.type(b"\x1b[A\r")  # up arrow: the last line again
        await screen.wait_for(r"agent> You said: hello\n", 2)
        await screen.wait_for(r"you> ", 3)
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        with trio.fail_after(60):
            code = await process.wait()
        await screen.drain()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await screen.stream.aclose()
    assert code == 130, screen.text
    assert "Traceback" not in screen.text
    async with open_sqlite_storage(database) as storage:
        users = [
            m.content
            async for m in storage.message_store.get_messages("cli")
            if m.role.value == "user"
        ]
    assert users == ["hello", "hello"]


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def run_chat(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-m", "agentik.cli", "chat", *args],
            stdin=b"hello\n",
            capture_stdout=True,
            capture_stderr=True,
            cwd=cwd,
            env=cli_env(),
            check=False,
        )


async def test_chat_to_a_dead_port_fails_at_start(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = await run_chat("--url", url, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == b""  # no banner, no prompt: nothing was read
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith(f"agentik chat: cannot reach {url}: "), line


async def test_chat_with_a_refused_token_fails_at_start(secured: Running, tmp_path: Path) -> None:
    result = await run_chat("--url", secured.url, "--token", "not-the-token", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == b""
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith(f"agentik chat: {secured.url} answered 401 unauthorized"), line


async def test_bench_with_a_refused_token_says_401_and_stops(
    secured: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    """No table of 5 failed turns: one line naming the 401, before any turn."""
    argv = ["bench", "--url", secured.url, "--token", "not-the-token", "-n", "5", "-m", "1"]
    code = await trio.to_thread.run_sync(main, [*argv, "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"agentik bench: {secured.url} answered 401 unauthorized"), line
    listed = await secured.client.get(
        "/agentik/conversations", headers={"Authorization": "Bearer s3cret"}
    )
    assert listed.json()["conversations"] == []


async def test_bench_to_a_dead_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    argv = ["bench", "--url", url, "-n", "2", "-m", "1", "--no-progress"]
    code = await trio.to_thread.run_sync(main, argv)
    out, err = capsys.readouterr()
    assert out == ""
    assert code == 1
    (line,) = err.splitlines()
    assert line.startswith(f"agentik bench: cannot reach {url}: "), line
