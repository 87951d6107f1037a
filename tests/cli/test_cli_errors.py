"""Every command's failures are one line on stderr in one format,
``agentik COMMAND: message`` (argparse's usage line may come before it), with
exit code 2 for a usage or configuration error and 1 for a failure; never a
traceback, never argparse's ``error:`` word, never ``agentik: …`` alone when
a command was given. ``conversations`` says when ``--limit`` cut the list
short, and a reader that goes away (``| head -1``) ends it quietly."""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from agentik.agent import open_chat_agent
from agentik.cli import main
from agentik.models import ScriptedModel, demo_responder
from agentik.storage import open_sqlite_storage
from tests.cli.test_chat_terminal import cli_env, free_port

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d (INFO|WARNING) agentik")
"""``agentik serve``'s log lines (it logs to stderr), which may come before its error."""
BAD_TOML = "[limits]\nmax_queued_turns = 'many'\n"


@contextlib.contextmanager
def listening() -> Iterator[int]:
    """A port something listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def cases(tmp: Path, busy: int, dead: str) -> list[tuple[str, tuple[str, ...], int]]:
    """(command as the error line names it, argv, exit code): every command's
    failure paths a user can reach from a shell."""
    db = str(tmp / "chat.db")  # exists (the fixture makes it), holds conversation 'c'
    missing = str(tmp / "missing.db")
    bad = str(tmp / "bad.toml")
    return [
        ("serve", ("serve", "--config", bad), 2),
        ("serve", ("serve", "--bind", "nope"), 2),
        ("serve", ("serve", "--toolset", "no_such_module_x:t"), 2),
        ("serve", ("serve", "--tool", "no_such_module_x:t"), 2),
        ("serve", ("serve", "--bind", f"127.0.0.1:{busy}", "--database", db), 1),
        ("serve", ("serve", "--database", str(tmp)), 1),
        ("serve", ("serve", "--no-such-flag"), 2),
        ("chat", ("chat", "--url", dead), 1),
        ("chat", ("chat", "--config", bad), 2),
        ("chat", ("chat", "--database", str(tmp)), 1),
        ("conversations", ("conversations", "--database", missing), 1),
        ("conversations", ("conversations", "--database", db, "--limit", "0"), 2),
        ("conversations", ("conversations", "--database", db, "--limit", "-1"), 2),
        ("conversations", ("conversations", "--database", db, "--limit", "x"), 2),
        ("show", ("show", "nobody", "--database", db), 1),
        ("show", ("show", "c", "--database", missing), 1),
        ("show", ("show",), 2),
        ("export", ("export", "c", "--database", missing), 1),
        ("delete", ("delete", "c", "--database", missing), 1),
        ("import", ("import", str(tmp / "none.jsonl"), "--database", db), 1),
        ("bench", ("bench", "-n", "0"), 2),
        ("bench", ("bench", "--url", dead, "-n", "1", "-m", "1", "--no-progress"), 1),
        ("mcp", ("mcp",), 2),
        ("mcp login", ("mcp", "login", "nothing"), 2),
        ("mcp login", ("mcp", "login", "nothing", "--config", bad), 2),
        ("demo", ("demo", "--no-such-flag"), 2),
    ]


async def make_database(path: Path, conversations: int = 1) -> None:
    """Conversations ``c``, ``c1`` … (one turn each) in a SQLite file."""
    async with (
        open_sqlite_storage(path) as storage,
        open_chat_agent(model=ScriptedModel(demo_responder), storage=storage) as agent,
    ):
        for n in range(conversations):
            await agent.send(f"c{n or ''}", "hello")


async def run(*argv: str, cwd: Path, stdout: int | None = None) -> tuple[int, str, str]:
    where = {"stdout": stdout} if stdout is not None else {"capture_stdout": True}
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "agentik.cli", *argv],
            stdin=b"",
            **where,  # type: ignore[arg-type]
            capture_stderr=True,
            cwd=cwd,
            env=cli_env(),
            check=False,
        )
    out = done.stdout.decode() if done.stdout else ""
    return done.returncode, out, done.stderr.decode()


async def test_every_failure_is_one_line_in_one_format(tmp_path: Path) -> None:
    await make_database(tmp_path / "chat.db")
    (tmp_path / "bad.toml").write_text(BAD_TOML)
    results: dict[tuple[str, ...], tuple[int, str]] = {}
    with listening() as busy:
        table = cases(tmp_path, busy, f"http://127.0.0.1:{free_port()}")
        limiter = trio.CapacityLimiter(4)
        async with trio.open_nursery() as nursery:
            for _, argv, _ in table:

                async def one(argv: tuple[str, ...] = argv) -> None:
                    async with limiter:
                        code, _, err = await run(*argv, cwd=tmp_path)
                    results[argv] = (code, err)

                nursery.start_soon(one)
    for command, argv, expected in table:
        code, err = results[argv]
        lines = [line for line in err.splitlines() if line.strip()]
        said = [
            line
            for line in lines
            if not line.startswith(("usage:", " ")) and not LOG_LINE.match(line)
        ]
        assert code == expected, (argv, err)
        assert len(said) == 1, (argv, err)
        assert said[0].startswith(f"agentik {command}: "), (argv, said[0])
        assert not said[0].startswith(f"agentik {command}: error:"), (argv, said[0])
        assert "Traceback" not in err, (argv, err)


@given(
    text=st.one_of(st.integers(max_value=0).map(str), st.integers().map(str), st.text(max_size=8))
)
def test_limit_must_be_a_positive_integer(text: str) -> None:
    """Zero, negatives and anything but ASCII digits are refused before any work."""
    valid = text.isascii() and text.isdigit() and int(text) >= 1
    argv = ["conversations", "--database", "/nonexistent/x.db", f"--limit={text}"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        if valid:  # accepted: the missing database is what fails
            assert main(argv) == 1
            assert "does not exist" in err.getvalue()
            return
        with pytest.raises(SystemExit) as exited:
            main(argv)
    assert exited.value.code == 2
    assert err.getvalue().splitlines()[-1] == (
        f"agentik conversations: argument --limit: must be a positive integer, got {text!r}"
    )


async def test_conversations_says_when_there_are_more(tmp_path: Path) -> None:
    database = tmp_path / "three.db"
    await make_database(database, conversations=3)
    code, out, err = await run("conversations", "-d", str(database), "--limit", "2", cwd=tmp_path)
    assert code == 0, err
    assert [line.split("\t")[0] for line in out.splitlines()] == ["c", "c1"]
    assert err == "agentik conversations: 2 listed; there are more (raise --limit to see them)\n"
    code, out, err = await run("conversations", "-d", str(database), "--limit", "3", cwd=tmp_path)
    assert (code, len(out.splitlines()), err) == (0, 3, "")


@pytest.mark.parametrize("argv", [("conversations",), ("show", "c")])
async def test_a_reader_that_goes_away_ends_the_output_quietly(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """stdout is a real pipe whose reader has gone (as ``| head -1`` leaves it):
    nothing on stderr, no traceback, exit 1 (the Python docs' recipe)."""
    database = tmp_path / "chat.db"
    await make_database(database)
    read, write = os.pipe()
    os.close(read)
    try:
        code, _, err = await run(*argv, "--database", str(database), cwd=tmp_path, stdout=write)
    finally:
        os.close(write)
    assert (code, err) == (1, "")


async def test_head_reads_the_first_line(tmp_path: Path) -> None:
    """The shell pipeline as a user types it."""
    database = tmp_path / "chat.db"
    await make_database(database, conversations=3)
    command = f"{sys.executable} -m agentik.cli conversations -d {database} | head -1"
    done = await trio.run_process(
        ["bash", "-o", "pipefail", "-c", command],
        capture_stdout=True,
        capture_stderr=True,
        cwd=tmp_path,
        env=cli_env(),
        check=False,
    )
    assert done.stdout.decode().startswith("c\t")
    assert done.stderr == b""
