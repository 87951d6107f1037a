"""``agentik delete`` and ``agentik import`` beside a running ``agentik serve``:
refused, in one line naming the server, with nothing changed; ``delete --url``
deletes through it; once the server stops, cleanly or killed, they work again.

Real ``agentik serve`` subprocesses on a real SQLite file and on the tests'
PostgreSQL (a database of its own). Found from outside: on main a delete
beside a server went through, and the server's live conversation went on at
seq 3 with the deleted turn still in the model's prompt.

The PostgreSQL case after a SIGKILL waits, polling, for the killed node's
lease (5 s) to run out on the database's clock, which no mock clock drives.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import httpx2
import pytest
import trio

from agentik.cli import main
from agentik.storage._in_use import hold_sqlite_database, lock_path
from agentik.storage._location import open_storage
from tests.cli.test_serve_smoke import ROOT, _read_lines
from tests.postgres import fresh_database


@attrs.frozen
class Served:
    url: str
    process: trio.Process
    lines: list[str]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


@asynccontextmanager
async def serving(database: str, cwd: Path, **env: str) -> AsyncIterator[Served]:
    """``agentik serve`` on ``database`` until the block ends (the block may
    stop it first); SIGKILL at the end if it still runs."""
    command = [sys.executable, "-m", "agentik.cli", "serve", "--bind", "127.0.0.1:0"]
    process = await trio.lowlevel.open_process(
        [*command, "--database", database], stderr=subprocess.PIPE, cwd=cwd, env=_env(**env)
    )
    lines: list[str] = []
    bound = trio.Event()
    async with trio.open_nursery() as nursery:
        assert process.stderr is not None
        nursery.start_soon(_read_lines, process.stderr, lines, bound)
        try:
            with trio.fail_after(60):
                await bound.wait()
            url = next(line for line in lines if "serving url=" in line).split("url=")[1].split()[0]
            yield Served(url, process, lines)
        finally:
            if process.returncode is None:
                process.kill()
            with trio.move_on_after(30):
                await process.wait()


async def _turn(url: str, conversation: str, text: str) -> list[int]:
    """Run a turn; the seqs of the conversation's messages after it."""
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        reply = await client.post(
            f"/agentik/conversations/{conversation}/turns", json={"text": text}
        )
        assert reply.status_code == 200, reply.text
        messages = await client.get(f"/agentik/conversations/{conversation}/messages")
    return [m["seq"] for m in messages.json()["messages"]]


async def _cli(*args: str) -> int:
    return await trio.to_thread.run_sync(main, list(args))


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


async def _stop(served: Served) -> None:
    served.process.send_signal(signal.SIGTERM)
    with trio.fail_after(30):
        assert await served.process.wait() == 0, "\n".join(served.lines)


async def test_sqlite_commands_refuse_beside_a_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = str(tmp_path / "live.db")
    archive = tmp_path / "live.jsonl"
    async with serving(database, tmp_path) as served:
        await _turn(served.url, "live", "one")
        assert await _turn(served.url, "live", "two") == [1, 2, 3, 4]
        capsys.readouterr()
        assert await _cli("export", "live", "-d", database) == 0  # reads: allowed
        archive.write_text(capsys.readouterr().out, encoding="utf-8")
        assert await _cli("delete", "live", "-d", database) == 1
        err = _one_line(capsys)
        assert err.startswith(f"agentik delete: database {database!r} is in use by the agentik")
        assert f"server at {served.url} (pid {served.process.pid})" in err
        assert f"agentik delete ID --url {served.url}" in err
        assert await _cli("import", str(archive), "-d", database, "--as", "copy") == 1
        assert "is in use by the agentik server at" in _one_line(capsys)
        # Nothing changed: the conversation goes on where it was.
        assert await _turn(served.url, "live", "three") == [1, 2, 3, 4, 5, 6]
        # Through the server: its own conversation forgets the deleted turns.
        assert await _cli("delete", "live", "--url", served.url) == 0
        assert f"deleted conversation 'live' through {served.url}" in capsys.readouterr().out
        assert await _turn(served.url, "live", "again") == [1, 2]
        assert await _cli("delete", "nope", "--url", served.url) == 1
        assert "not found" in _one_line(capsys)
        await _stop(served)
    assert lock_path(database).read_text() == "", "a clean stop names no holder"
    assert await _cli("import", str(archive), "-d", database, "--as", "copy") == 0
    assert await _cli("delete", "live", "-d", database) == 0
    capsys.readouterr()
    # A server killed outright holds nothing: the kernel drops its lock with it.
    async with serving(database, tmp_path) as served:
        await _turn(served.url, "k", "hi")
        served.process.kill()
        with trio.fail_after(30):
            await served.process.wait()
    assert await _cli("delete", "copy", "-d", database) == 0
    assert await _cli("delete", "k", "-d", database) == 0


async def test_a_server_does_not_start_while_a_command_holds_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The lock works both ways: ``agentik serve`` refuses, in one line, to
    open a database an import or delete is changing (and two servers never
    share one SQLite file)."""
    database = str(tmp_path / "busy.db")
    async with open_storage(database):
        pass
    command = [sys.executable, "-m", "agentik.cli", "serve", "--bind", "127.0.0.1:0"]
    with hold_sqlite_database(database, "import"):
        refused = await trio.run_process(
            [*command, "--database", database],
            env=_env(),
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert refused.returncode == 1
    err = refused.stderr.decode()
    assert re.fullmatch(
        rf"agentik serve: database {re.escape(repr(database))} is in use by agentik import"
        rf" \(pid {os.getpid()}\)\n",
        err,
    ), err
    async with serving(database, tmp_path) as served:
        second = await trio.run_process(
            [*command, "--database", database],
            env=_env(),
            cwd=tmp_path,
            capture_stderr=True,
            check=False,
        )
        assert second.returncode == 1
        assert f"is in use by the agentik server at {served.url}" in second.stderr.decode()
        await _stop(served)


async def test_postgres_commands_refuse_while_a_node_is_live(
    postgres_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    archive = tmp_path / "pg.jsonl"
    async with serving(url, tmp_path) as served:
        assert await _turn(served.url, "pg", "one") == [1, 2]
        capsys.readouterr()
        assert await _cli("export", "pg", "-d", url) == 0
        archive.write_text(capsys.readouterr().out, encoding="utf-8")
        assert await _cli("delete", "pg", "-d", url) == 1
        err = _one_line(capsys)
        assert f"is in use by the agentik server at {served.url}" in err
        assert f"agentik delete ID --url {served.url}" in err
        assert await _cli("import", str(archive), "-d", url, "--as", "copy") == 1
        assert "is in use by the agentik server" in _one_line(capsys)
        assert await _turn(served.url, "pg", "two") == [1, 2, 3, 4]
        await _stop(served)  # a clean stop leaves: free at once
    assert await _cli("import", str(archive), "-d", url, "--as", "copy") == 0
    capsys.readouterr()
    async with serving(url, tmp_path, AGENTIK_LEASE_SECONDS="5") as served:
        await _turn(served.url, "k", "hi")
        served.process.kill()
        with trio.fail_after(30):
            await served.process.wait()
    # Killed, its lease stays until it runs out on the database's clock.
    assert await _cli("delete", "copy", "-d", url) == 1
    assert re.search(r"frees it when its lease runs out, in [1-5] s\n", _one_line(capsys))
    with trio.fail_after(20):
        while await _cli("delete", "copy", "-d", url) != 0:
            capsys.readouterr()
            await trio.sleep(0.2)
    assert await _cli("delete", "pg", "-d", url) == 0


async def test_an_in_process_chat_holds_its_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentik chat --database`` caches its conversation as a server does:
    a delete beside it refuses, naming the chat; a chat refuses beside a
    server; once the chat has quit the delete goes through."""
    database = str(tmp_path / "chat.db")
    chat = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agentik.cli", "chat", "--database", database],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        env=_env(),
    )
    assert chat.stdin is not None and chat.stdout is not None
    await chat.stdin.send_all(b"hello\n")
    seen = b""
    with trio.fail_after(60):
        while b"agent> " not in seen:  # the answer: the chat holds the file now
            seen += await chat.stdout.receive_some()
    capsys.readouterr()
    assert await _cli("delete", "cli", "-d", database) == 1
    assert re.fullmatch(
        rf"agentik delete: database {re.escape(repr(database))} is in use by agentik chat"
        rf" \(pid {chat.pid}\)\n",
        _one_line(capsys),
    )
    await chat.stdin.aclose()  # Ctrl-D: the chat quits
    with trio.fail_after(30):
        assert await chat.wait() == 0
    async with serving(database, tmp_path) as served:
        refused = await trio.run_process(
            [sys.executable, "-m", "agentik.cli", "chat", "--database", database],
            stdin=b"hi\n",
            env=_env(),
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert refused.returncode == 1
        assert "is in use by the agentik server at" in refused.stderr.decode()
        await _stop(served)
    assert await _cli("delete", "cli", "-d", database) == 0
