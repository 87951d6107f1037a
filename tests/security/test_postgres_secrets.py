"""A PostgreSQL password never leaves the DSN, in any form libpq accepts.

The forms: a URL's user-info with any bytes percent-encoded; ``password=`` in
a URL's query, in any case, at any position, repeated; a key=value string
with ``password='…'`` quoted and escaped; ``passfile=`` naming a file that
holds the password. libpq (through ``psycopg.conninfo``) is the parser and
the oracle: the tests build strings, never read them back themselves.

Each secret is planted between two markers (``Zq`` and ten hex digits: no
hex id, time or word holds them), so a secret cut in half is caught too. The
places checked: ``describe_location`` (the ``/health`` label and the start-up
log line), the error of a connection that fails (no server, a wrong
password), and a real server: ``/health`` and every log line, in process
(caplog at DEBUG) and as an ``agentik serve`` subprocess (its stderr). The
password that works is planted the same way, on a throwaway cluster that
demands it (SCRAM), so libpq really uses every form.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from urllib.parse import quote, quote_from_bytes

import httpx2
import psycopg
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from agentik._errors import StoreError
from agentik.server import ServerConfig, serve_agentik
from agentik.storage import open_postgres_storage
from agentik.storage._location import describe_location
from agentik.storage.postgres._dsn import describe
from tests import pgcluster

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "/nonexistent-agentik-socket-dir"
PASSFILES = Path(tempfile.mkdtemp(prefix="agentik-pgpass-"))
atexit.register(shutil.rmtree, PASSFILES, True)
_numbers = itertools.count()

markers = st.text("0123456789abcdef", min_size=10, max_size=10).map(lambda h: f"Zq{h}")
# Anything a password may hold: quotes, backslashes, spaces, %, @, /, ?, &, =, non-ASCII.
fillers = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)


def leaks(text: str, planted: list[str]) -> list[str]:
    return [marker for marker in planted if marker in text]


def chain(error: BaseException) -> str:
    """Everything an error shows: its text, its repr, and its causes'."""
    parts: list[str] = []
    seen: BaseException | None = error
    while seen is not None:
        parts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


def keyvalue_quoted(value: str) -> str:
    """``value`` as libpq's key=value syntax takes it: quoted, with ``\\`` and
    ``'`` escaped, or bare when nothing in it needs quoting."""
    if value and not any(c in value for c in " \t\n\r\f\v'\\"):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@st.composite
def secret(draw: st.DrawFn, planted: list[str]) -> str:
    first, last = draw(markers), draw(markers)
    planted += [first, last]
    return first + draw(fillers) + last


@st.composite
def dsn_forms(
    draw: st.DrawFn,
    host: str,
    port: str,
    user: str = "agentik",
    password: str | None = None,
    forms: tuple[str, ...] = ("userinfo", "query", "keyvalue", "passfile"),
    any_case: bool = True,
) -> tuple[str, list[str]]:
    """A DSN carrying secrets in one of ``forms``; the markers planted.
    ``password``: the one that works, put where libpq takes it from (last).
    ``any_case``: option names in any case (libpq refuses all but lowercase)."""
    planted: list[str] = []
    form = draw(st.sampled_from(forms))
    if form == "userinfo":
        if password is not None:
            raw = password.encode()
        else:
            first, last = draw(markers), draw(markers)
            planted += [first, last]
            raw = first.encode() + draw(st.binary(max_size=12)) + last.encode()
        encoded = quote_from_bytes(raw, safe="")
        where = draw(st.sampled_from(["query", "authority"]))
        if where == "authority":
            return f"postgresql://{user}:{encoded}@{quote(host, safe='')}:{port}/postgres", planted
        return f"postgresql://{user}:{encoded}@/postgres?host={host}&port={port}", planted
    decoys = draw(st.lists(secret(planted), max_size=2))
    values = [*decoys, password] if password is not None else decoys or [draw(secret(planted))]
    if form == "query":
        names = ["password", "password", "PASSWORD", "Password", "passWORD"]
        case = st.sampled_from(names if any_case else ["password"])
        params = [f"{draw(case)}={quote(value, safe='')}" for value in values]
        others = draw(st.permutations([f"host={quote(host, safe='/')}", f"port={port}"]))
        at = draw(st.integers(0, len(others)))
        query = "&".join([*others[:at], *params, *others[at:]])
        return f"postgresql://{user}@/postgres?{query}", planted
    if form == "keyvalue":
        case = st.sampled_from(["password", "password", "PASSWORD"] if any_case else ["password"])
        params = [f"{draw(case)}={keyvalue_quoted(value)}" for value in values]
        others = draw(
            st.permutations([f"host={keyvalue_quoted(host)}", f"port={port}", f"user={user}"])
        )
        at = draw(st.integers(0, len(others)))
        return " ".join([*others[:at], *params, *others[at:]]), planted
    return passfile_dsn(host, port, user, password or values[-1]), planted


def passfile_dsn(host: str, port: str, user: str, password: str) -> str:
    """A URL naming a passfile that holds ``password`` (0600, as libpq wants)."""
    escaped = password.replace("\\", "\\\\").replace(":", "\\:")
    path = PASSFILES / f"pgpass-{next(_numbers)}"
    path.write_text(f"*:*:*:*:{escaped}\n", encoding="utf-8")
    path.chmod(0o600)
    return f"postgresql://{user}@/postgres?host={host}&port={port}&passfile={quote(str(path))}"


def readable(dsn: str) -> bool:
    try:
        conninfo_to_dict(dsn)
    except (psycopg.ProgrammingError, UnicodeDecodeError):
        return False
    return True


@given(dsn_forms(NOWHERE, "5432"))
@settings(max_examples=400, deadline=None)
def test_the_label_shows_no_password(case: tuple[str, list[str]]) -> None:
    """``describe_location`` (the /health ``storage`` and the start-up log):
    the options libpq read, with ``***`` for each secret."""
    dsn, planted = case
    label = describe_location(dsn)
    shown = describe(dsn)
    assert not leaks(label + shown, planted), (dsn, label, shown)
    if readable(dsn) and dsn.startswith("postgresql://"):
        assert "port=5432" in label
        if "password" in conninfo_to_dict(dsn):
            assert "password=***" in label


@given(dsn_forms(NOWHERE, "5432"))
@settings(max_examples=150, deadline=None)
def test_a_failed_connection_names_no_password(case: tuple[str, list[str]]) -> None:
    """Nothing listens there: the error (and every cause) says so, or says
    the string is not valid, and holds no part of a secret."""
    dsn, planted = case

    async def open_it() -> None:
        async with open_postgres_storage(dsn, connect_timeout=1):
            raise AssertionError("opened a bundle on a server that does not exist")

    with pytest.raises(StoreError) as raised:
        trio.run(open_it)
    message = str(raised.value)
    assert message.startswith(("cannot connect to PostgreSQL at ", "the PostgreSQL ")), message
    assert not leaks(chain(raised.value), planted), (dsn, chain(raised.value))


# --- a server that demands the password -----------------------------------------

RIGHT_FIRST, RIGHT_LAST = "Zq5e1f0a9b2d", "Zq8c7b6a5f4e"
RIGHT = f"{RIGHT_FIRST} it's @/%:?&=\\ \"é{RIGHT_LAST}"
"""The cluster's password: what a URL or a key=value string must escape."""


@pytest.fixture(scope="module")
def scram() -> Iterator[tuple[str, str]]:
    """(socket directory, port) of a throwaway cluster that wants ``RIGHT``."""
    try:
        with pgcluster.cluster(password=RIGHT) as dsn:
            info = conninfo_to_dict(dsn)
            yield str(info["host"]), str(info["port"])
    except (RuntimeError, subprocess.CalledProcessError) as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no throwaway PostgreSQL cluster: {error}")


@given(data=st.data())
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_wrong_password_is_refused_without_showing_it(
    scram: tuple[str, str], data: st.DataObject
) -> None:
    """SCRAM refuses each planted password: libpq read it from the form,
    and the error names the user, never the password."""
    host, port = scram
    dsn, planted = data.draw(dsn_forms(host, port))

    async def open_it() -> None:
        async with open_postgres_storage(dsn, connect_timeout=5):
            raise AssertionError("a wrong password was accepted")

    with pytest.raises(StoreError) as raised:
        trio.run(open_it)
    assert not leaks(chain(raised.value), planted), (dsn, chain(raised.value))
    if readable(dsn):  # libpq took a password from the form, and the server said no
        assert "password authentication failed" in str(raised.value), raised.value


async def serve_and_look(dsn: str) -> list[str]:
    """``agentik serve``'s in-process server on ``dsn``: a turn, ``/health``;
    every body it answered."""
    config = ServerConfig(port=0, database=dsn)
    stop = trio.Event()
    seen: list[str] = []
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_agentik, config, shutdown_trigger=stop.wait))
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            turn = await client.post("/agentik/conversations/c/turns", json={"text": "hi"})
            assert turn.status_code == 200, turn.text
            health = await client.get("/health")
            assert health.status_code == 200, health.text
            assert health.json()["storage"].startswith("postgresql:")
            seen += [turn.text, health.text, str(dict(health.headers))]
        stop.set()
    return seen


@pytest.mark.parametrize("form", ["userinfo", "query", "passfile"])
@given(data=st.data())
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_the_password_that_works_shows_nowhere(
    scram: tuple[str, str], caplog: pytest.LogCaptureFixture, form: str, data: st.DataObject
) -> None:
    """A real server on the cluster, the right password in each URL form
    (after planted decoys): turns work, and neither ``/health`` nor any log
    line (DEBUG) holds it or a decoy."""
    host, port = scram
    dsn, planted = data.draw(dsn_forms(host, port, password=RIGHT, forms=(form,), any_case=False))
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        seen = trio.run(serve_and_look, dsn)
    everything = "\n".join([*seen, caplog.text])
    assert not leaks(everything, [*planted, RIGHT_FIRST, RIGHT_LAST]), everything


async def serve_process(dsn: str, tmp_path: Path) -> tuple[int, str, list[str]]:
    """``agentik serve --database dsn`` as a process: its exit code, its
    stderr, and what it answered (a turn, /health) if it started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "PG"))}
    env["PYTHONPATH"] = str(ROOT)
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agentik.cli", "serve", "--bind", "127.0.0.1:0", "--database", dsn],
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert process.stderr is not None
    output = b""
    seen: list[str] = []
    with trio.fail_after(60):
        while b"serving url=" not in output:
            chunk = await process.stderr.receive_some()
            if not chunk:
                return await process.wait(), output.decode(), seen
            output += chunk
    url = output.split(b"serving url=")[1].split()[0].decode()
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        turn = await client.post("/agentik/conversations/c/turns", json={"text": "hi"})
        assert turn.status_code == 200, turn.text
        health = await client.get("/health")
        assert health.status_code == 200, health.text
        seen += [turn.text, health.text]
    process.send_signal(signal.SIGTERM)
    with trio.fail_after(60):
        async for chunk in process.stderr:
            output += chunk
        code = await process.wait()
    return code, output.decode(), seen


@pytest.mark.parametrize(
    "form", ["userinfo", "query-repeated", "passfile", "query-uppercase", "keyvalue"]
)
async def test_agentik_serve_logs_no_password(
    scram: tuple[str, str], tmp_path: Path, form: str
) -> None:
    """``agentik serve`` as a process, the password in each form: its stderr
    (start-up, a turn, /health, shutdown) and its answers never hold it. A
    form libpq refuses (``PASSWORD=``) or agentik does not take (a key=value
    string) stops it at start-up with one line that names no secret."""
    host, port = scram
    decoy = "Zq0123456789 decoy"
    dsns = {
        "userinfo": f"postgresql://agentik:{quote(RIGHT, safe='')}@/postgres"
        f"?host={host}&port={port}",
        "query-repeated": f"postgresql://agentik@/postgres?password={quote(decoy)}"
        f"&host={host}&password={quote(RIGHT, safe='')}&port={port}",
        "passfile": passfile_dsn(host, port, "agentik", RIGHT),
        "query-uppercase": f"postgresql://agentik@/postgres?host={host}&port={port}"
        f"&PASSWORD={quote(RIGHT, safe='')}",
        "keyvalue": f"host={host} port={port} user=agentik password={keyvalue_quoted(RIGHT)}",
    }
    code, stderr, seen = await serve_process(dsns[form], tmp_path)
    everything = "\n".join([stderr, *seen])
    assert not leaks(everything, [RIGHT_FIRST, RIGHT_LAST, "Zq0123456789"]), everything
    if form in ("query-uppercase", "keyvalue"):
        assert code != 0 and not seen, stderr
        assert "Traceback" not in stderr, stderr
        expected = (
            'invalid URI query parameter: "PASSWORD"'
            if form == "query-uppercase"
            else "looks like a libpq key=value connection string"
        )
        assert expected in stderr, stderr
    else:
        assert code == 0, stderr
        assert "storage=postgresql:" in stderr, stderr
        assert ("passfile=" if form == "passfile" else "password=***") in stderr, stderr
