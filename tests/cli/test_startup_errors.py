"""Start-up failures a user can fix are one line on stderr and a non-zero
exit, never a traceback: a port in use, a database in a missing directory, a
file that is not a database (or a damaged one), for ``serve``, ``chat``,
``conversations`` and ``show``.

``serve`` runs as a real subprocess (it configures process-wide logging);
the others call the CLI's ``main`` in process, which is what the ``agentik``
script runs: an exception escaping it would be the traceback.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import StoreError
from agentik.cli import main
from agentik.cli._failures import first_reportable
from agentik.storage import open_sqlite_storage

ROOT = Path(__file__).resolve().parents[2]
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) ")
NOT_A_DATABASE = b"this is a text file, not an SQLite database\n" * 100


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


async def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-m", "agentik.cli", *args],
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            cwd=cwd,
            env=cli_env(),
            check=False,
        )


def the_error_line(stderr: str) -> str:
    """The one line that is not a log line; nothing else but log lines."""
    assert "Traceback" not in stderr and "Exception Group" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if not LOG_LINE.match(line)]
    assert len(lines) == 1, stderr
    return lines[0]


def run_main(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


def bad_databases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (path, what the error line must say)."""
    not_a_db = tmp_path / "notes.db"
    not_a_db.write_bytes(NOT_A_DATABASE)
    missing = tmp_path / "no-such-dir" / "x.db"
    return {
        "missing directory": (
            missing,
            f"cannot open the database {str(missing)!r}: unable to open database file"
            f" (the directory {str(missing.parent)!r} does not exist)",
        ),
        "not a database": (
            not_a_db,
            f"cannot open the database {str(not_a_db)!r}: file is not a database",
        ),
    }


async def test_serve_on_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = await run_cli(
            "serve", "--bind", f"127.0.0.1:{port}", "--database", "x.db", cwd=tmp_path
        )
    assert result.returncode == 1
    line = the_error_line(result.stderr.decode())
    assert line.startswith(f"agentik serve: cannot listen on 127.0.0.1:{port}: "), line
    assert "Address already in use" in line


@pytest.mark.parametrize("case", ["missing directory", "not a database"])
async def test_serve_on_a_bad_database(tmp_path: Path, case: str) -> None:
    path, expected = bad_databases(tmp_path)[case]
    result = await run_cli("serve", "--bind", "127.0.0.1:0", "--database", str(path), cwd=tmp_path)
    assert result.returncode == 1
    assert the_error_line(result.stderr.decode()) == f"agentik serve: {expected}"


@pytest.mark.parametrize("case", ["missing directory", "not a database"])
@pytest.mark.parametrize("command", [["chat"], ["conversations"], ["show", "demo"]])
def test_other_commands_on_a_bad_database(tmp_path: Path, command: list[str], case: str) -> None:
    path, expected = bad_databases(tmp_path)[case]
    code, stderr = run_main(*command, "--database", str(path))
    assert code == 1
    line = the_error_line(stderr)
    if command[0] != "chat" and case == "missing directory":
        expected = f"database {str(path)!r} does not exist"  # inspection never creates one
    assert line == f"agentik {command[0]}: {expected}"
    assert path.exists() is (case == "not a database")  # nothing created


@pytest.fixture(scope="module")
def valid_database(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a small database with one conversation in it."""
    from agentik import Message, Role

    path = tmp_path_factory.mktemp("valid") / "db"

    async def write() -> None:
        async with open_sqlite_storage(path) as storage:
            await storage.message_store.append("demo", Message(Role.USER, "hello"))

    trio.run(write)
    return path.read_bytes()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_damaged_database_is_one_line_or_works(
    tmp_path: Path, valid_database: bytes, data: st.DataObject
) -> None:
    """Garbage, or a real database with bytes overwritten anywhere: ``show``
    either works or fails with one line; no exception escapes."""
    if data.draw(st.booleans(), label="garbage"):
        content = data.draw(st.binary(min_size=1, max_size=4096), label="content")
    else:
        offset = data.draw(st.integers(0, len(valid_database) - 1), label="offset")
        patch = data.draw(st.binary(min_size=1, max_size=64), label="patch")
        content = valid_database[:offset] + patch + valid_database[offset + len(patch) :]
    path = tmp_path / f"damaged-{os.urandom(4).hex()}.db"
    path.write_bytes(content)
    code, stderr = run_main("show", "demo", "--database", str(path))
    assert code in (0, 1)
    if code == 1:
        line = the_error_line(stderr)
        assert line.startswith("agentik show: "), line


def groups(leaf: st.SearchStrategy[BaseException]) -> st.SearchStrategy[BaseException]:
    """Exceptions nested in exception groups of any shape, as nurseries make them."""
    return st.recursive(
        leaf,
        lambda inner: st.lists(inner, min_size=1, max_size=3).map(
            lambda errors: (
                ExceptionGroup("nursery", errors)
                if all(isinstance(e, Exception) for e in errors)
                else BaseExceptionGroup("nursery", errors)
            )
        ),
        max_leaves=8,
    )


LEAVES = st.sampled_from(
    [
        lambda: StoreError("cannot open the database 'x'"),
        lambda: OSError(98, "Address already in use"),
        lambda: RuntimeError("a bug"),
        lambda: KeyError("k"),
    ]
).map(lambda make: make())


@settings(max_examples=200, deadline=None)
@given(error=groups(LEAVES))
def test_the_first_reportable_error_is_found_at_any_depth(error: BaseException) -> None:
    """However nurseries nest the groups, the error reported is the first
    StoreError/OSError leaf in depth-first order, or none."""

    def flat(e: BaseException) -> list[BaseException]:
        if isinstance(e, BaseExceptionGroup):
            return [leaf for inner in e.exceptions for leaf in flat(inner)]
        return [e]

    expected = next((e for e in flat(error) if isinstance(e, StoreError | OSError)), None)
    assert first_reportable(error, (StoreError, OSError)) is expected


def test_a_damaged_page_found_while_reading_is_one_line(
    tmp_path: Path, valid_database: bytes
) -> None:
    """The database opens, but a page it reads is damaged (two zero bytes in
    the header of page 2, the message table's root; found by the property
    above): ``show`` fails with one line naming the database, no traceback."""
    offset, patch = 4099, b"\x00\x00"
    path = tmp_path / "damaged.db"
    path.write_bytes(valid_database[:offset] + patch + valid_database[offset + len(patch) :])
    code, stderr = run_main("show", "demo", "--database", str(path))
    assert code == 1
    line = the_error_line(stderr)
    assert line.startswith(f"agentik show: cannot read the database {str(path)!r}: "), line
