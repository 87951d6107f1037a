"""Every PostgreSQL connection agentik opens is bounded, and a PostgreSQL that
stops answering fails turns and ``/health`` in time instead of hanging them.

- The writer's, the readers' and the lease's connections carry the session
  timeouts and the keepalives (seen by the server, by libpq, and on the
  socket itself, over TCP), unless the DSN, the database or the role chose
  otherwise; migrations run with the timeouts lifted.
- The watchdog cuts a call that waits past its bound, and only that one.
- A throwaway cluster the test starts is frozen whole (SIGSTOP to the
  postmaster and every backend), as a paused VM or a stuck server would be:
  ``/health`` turns 503 within the probe's bound, turns fail with 503 within
  ``statement_timeout`` + the watchdog's grace, and everything works again
  after SIGCONT. The tests' shared cluster is never frozen.

The clocks here are real: the server and libpq are other processes and threads.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx2
import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from agentik.server import ServerConfig, serve_agentik
from agentik.server._health import PROBE_REUSE, PROBE_TIMEOUT
from agentik.storage import StorageBundle, open_postgres_storage
from agentik.storage.postgres._migrate import MIGRATION_LOCK
from agentik.storage.postgres._watchdog import GRACE, Watchdog
from tests import pgcluster
from tests.postgres import fresh_database, fresh_schema


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def tcp_cluster() -> Iterator[str]:
    """A throwaway cluster listening on 127.0.0.1; its TCP URL."""
    port = free_port()
    try:
        with pgcluster.cluster(tcp_port=port):
            yield f"postgresql://agentik@127.0.0.1:{port}/postgres"
    except (RuntimeError, subprocess.CalledProcessError) as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no throwaway PostgreSQL cluster: {error}")


def connections(bundle: StorageBundle) -> dict[str, psycopg.Connection]:
    """Each connection of the bundle, by role (the bundle's own, not copies)."""
    store = bundle.message_store
    found = {"writer": store._writer._engine.connection}  # type: ignore[attr-defined]
    for i, reader in enumerate(store._readers.connections):  # type: ignore[attr-defined]
        found[f"reader {i}"] = reader
    if bundle.ownership is not None:
        found["lease"] = bundle.ownership._link.connection  # type: ignore[attr-defined]
    return found


def settings_of(connection: psycopg.Connection) -> dict[str, str]:
    names = (
        "statement_timeout",
        "lock_timeout",
        "idle_in_transaction_session_timeout",
        "tcp_keepalives_idle",
        "tcp_keepalives_interval",
        "tcp_keepalives_count",
    )
    return {name: str(connection.execute(f"SHOW {name}").fetchone()[0]) for name in names}  # type: ignore[index]


def socket_options(connection: psycopg.Connection) -> tuple[int, int, int, int]:
    """The kernel's view of the client socket: keepalive on, idle, interval, user timeout."""
    with socket.socket(fileno=os.dup(connection.fileno())) as sock:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )


class TestEveryConnection:
    async def test_writer_readers_and_lease_are_bounded(self, tcp_cluster: str) -> None:
        async with open_postgres_storage(
            tcp_cluster, schema=fresh_schema(), readers=2, lease_seconds=30
        ) as bundle:
            found = connections(bundle)
            assert set(found) == {"writer", "reader 0", "reader 1", "lease"}
            lease = {  # the lease's own, tighter, well inside its 30 s (``lease_session``)
                "statement_timeout": "5s",
                "lock_timeout": "1s",
                "idle_in_transaction_session_timeout": "10s",
            }
            for role, connection in found.items():
                assert await trio.to_thread.run_sync(settings_of, connection) == {
                    "statement_timeout": "10s",
                    "lock_timeout": "5s",
                    "idle_in_transaction_session_timeout": "15s",
                    **(lease if role == "lease" else {}),
                    "tcp_keepalives_idle": "10",
                    "tcp_keepalives_interval": "5",
                    "tcp_keepalives_count": "3",
                }, role
                parameters = connection.info.get_parameters()
                assert {k: parameters.get(k) for k in ("keepalives_idle", "tcp_user_timeout")} == {
                    "keepalives_idle": "10",
                    "tcp_user_timeout": "25000",
                }, role
                assert socket_options(connection) == (1, 10, 5, 25000), role

    async def test_the_dsn_the_database_and_the_role_win(self, tcp_cluster: str) -> None:
        """A value anybody chose stays: the DSN's libpq options and its
        ``options=-c``, the database's and the role's ``SET``."""
        database = fresh_schema()
        with psycopg.connect(tcp_cluster, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {database}")
            admin.execute(f"ALTER DATABASE {database} SET lock_timeout = '7s'")
        url = tcp_cluster.rsplit("/", 1)[0] + f"/{database}"
        dsn = f"{url}?keepalives_idle=99&tcp_user_timeout=1234&options=-c%20statement_timeout%3D60s"
        async with open_postgres_storage(dsn, schema="s", readers=1, lease_seconds=30) as bundle:
            for role, connection in connections(bundle).items():
                shown = await trio.to_thread.run_sync(settings_of, connection)
                if role == "lease":  # its own bounds are tighter still (``lease_session``)
                    assert (shown["statement_timeout"], shown["lock_timeout"]) == ("5s", "1s")
                    continue
                assert shown["statement_timeout"] == "1min", role
                assert shown["lock_timeout"] == "7s", role
                assert shown["idle_in_transaction_session_timeout"] == "15s", role
                assert socket_options(connection)[1:] == (99, 5, 1234), role
            engine = bundle.message_store._writer._engine  # type: ignore[attr-defined]
            assert engine._watchdog.bound == 60 + GRACE

    async def test_migrations_wait_past_the_lock_timeout(self, postgres_dsn: str) -> None:
        """Another node holds the migration lock longer than ``lock_timeout``
        (here 200 ms): opening waits for it rather than fail, and the session
        has its ``lock_timeout`` back afterwards."""
        database = fresh_database(postgres_dsn)
        dsn = f"{database}&options=-c%20lock_timeout%3D200ms"
        with psycopg.connect(database, autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            async with trio.open_nursery() as nursery:
                opened: list[dict[str, str]] = []

                async def open_it() -> None:
                    async with open_postgres_storage(dsn, readers=1) as bundle:
                        writer = connections(bundle)["writer"]
                        opened.append(await trio.to_thread.run_sync(settings_of, writer))

                nursery.start_soon(open_it)
                with trio.fail_after(10):
                    # Another process's state: nothing to wait on but polling.
                    while not await trio.to_thread.run_sync(writer_waits, database):  # noqa: ASYNC110
                        await trio.sleep(0.05)
                await trio.sleep(0.5)  # well past lock_timeout
                other.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        assert opened[0]["lock_timeout"] == "200ms"
        assert opened[0]["statement_timeout"] == "10s"


def writer_waits(database: str) -> bool:
    """Whether agentik's writer waits for a lock in ``database`` (its own, so
    no other test's writer is mistaken for it)."""
    with psycopg.connect(database, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agentik-writer'"
            " AND wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return row is not None and row[0] > 0


class SilentServer:
    """Connected sockets whose far end answers when told to, or never."""

    def __init__(self) -> None:
        self.near, self.far = socket.socketpair()

    def fileno(self) -> int:
        return self.near.fileno()


def test_the_watchdog_cuts_only_the_call_past_its_bound() -> None:
    """Two calls wait on their sockets; one is answered in time, the other
    never: that one reads end-of-file at the bound and says so, the other is
    untouched; no descriptor is left behind."""
    watchdog = Watchdog()
    watchdog.bound = 0.3
    watchdog.start()
    before = len(os.listdir("/proc/self/fd"))
    answered, silent = SilentServer(), SilentServer()
    results: dict[str, tuple[bytes, bool, float]] = {}

    def call(name: str, server: SilentServer) -> None:
        began = time.monotonic()
        with watchdog.watch(server) as watch:  # type: ignore[arg-type]
            data = server.near.recv(10)
        results[name] = (data, watch.was_cut, time.monotonic() - began)

    try:
        threads = [
            threading.Thread(target=call, args=("answered", answered)),
            threading.Thread(target=call, args=("silent", silent)),
        ]
        for thread in threads:
            thread.start()
        time.sleep(0.1)
        answered.far.send(b"ok")
        for thread in threads:
            thread.join(5)
    finally:
        watchdog.stop()
    assert results["answered"][:2] == (b"ok", False)
    data, cut, took = results["silent"]
    assert (data, cut) == (b"", True)
    assert 0.3 <= took < 1.5, took
    for server in (answered, silent):
        server.near.close()
        server.far.close()
    assert len(os.listdir("/proc/self/fd")) <= before


# --- a frozen PostgreSQL ---------------------------------------------------------

STATEMENT_TIMEOUT = 2.0
BOUND = STATEMENT_TIMEOUT + GRACE
SLACK = 2.0
"""Seconds of scheduling on a busy 2-core machine allowed on top of each bound."""


def cluster_processes(directory: str) -> list[int]:
    """The postmaster and every process it started."""
    postmaster = int((Path(directory) / "data" / "postmaster.pid").read_text().split()[0])
    children = subprocess.run(
        ["pgrep", "-P", str(postmaster)], capture_output=True, text=True, check=False
    ).stdout.split()
    return [postmaster, *map(int, children)]


async def post_turn(client: httpx2.AsyncClient, conversation: str) -> tuple[httpx2.Response, float]:
    began = time.monotonic()
    path = f"/agentik/conversations/{conversation}/turns"
    response = await client.post(path, json={"text": "hi"})
    return response, time.monotonic() - began


async def test_a_frozen_postgresql_fails_fast_and_recovers(tmp_path: Path) -> None:
    try:
        cluster = pgcluster.cluster()
        dsn = cluster.__enter__()
    except (RuntimeError, subprocess.CalledProcessError) as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no throwaway PostgreSQL cluster: {error}")
    directory = str(conninfo_to_dict(dsn)["host"])
    frozen: list[int] = []
    try:
        url = f"{dsn}&options=-c%20statement_timeout%3D{int(STATEMENT_TIMEOUT)}s"
        config = ServerConfig(port=0, database=url)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            base = await nursery.start(partial(serve_agentik, config, shutdown_trigger=stop.wait))
            async with httpx2.AsyncClient(base_url=base, timeout=60) as client:
                assert (await post_turn(client, "a"))[0].status_code == 200
                health = await client.get("/health")
                assert health.status_code == 200 and health.json()["storage_probe"]["ok"]

                frozen = cluster_processes(directory)
                for pid in frozen:
                    os.kill(pid, signal.SIGSTOP)
                began = time.monotonic()
                with trio.fail_after(PROBE_REUSE + PROBE_TIMEOUT + SLACK):
                    # The last answer may be reused for PROBE_REUSE: ask until it is not.
                    while (health := await client.get("/health")).status_code == 200:  # noqa: ASYNC110
                        await trio.sleep(0.05)
                assert time.monotonic() - began <= PROBE_REUSE + PROBE_TIMEOUT + SLACK
                assert health.status_code == 503, health.text
                assert health.json()["status"] == "degraded"
                assert "has not answered a read" in health.json()["storage_probe"]["error"]

                turns: dict[str, tuple[httpx2.Response, float]] = {}

                async def turn(conversation: str) -> None:
                    turns[conversation] = await post_turn(client, conversation)

                async with trio.open_nursery() as clients:
                    clients.start_soon(turn, "a")  # known: its message waits for the writer
                    clients.start_soon(turn, "b")  # new: its claim waits for the lease
                for conversation, (response, took) in turns.items():
                    assert took <= BOUND + SLACK, (conversation, took)
                    assert response.status_code == 503, (conversation, response.text)
                    assert response.headers["Retry-After"] == "1"
                    assert f"PostgreSQL did not answer within {BOUND:g} s" in response.text
                began = time.monotonic()
                assert (await client.get("/health")).status_code == 503
                assert time.monotonic() - began <= PROBE_TIMEOUT + SLACK

                for pid in frozen:
                    os.kill(pid, signal.SIGCONT)
                frozen = []
                with trio.fail_after(30):
                    # The server's recovery is other threads' and processes': ask until it is back.
                    while (await client.get("/health")).json()["storage_probe"]["ok"] is not True:  # noqa: ASYNC110
                        await trio.sleep(0.2)
                    for conversation in ("a", "b", "c"):
                        while (await post_turn(client, conversation))[0].status_code != 200:  # noqa: ASYNC110
                            await trio.sleep(0.2)
                # Writes commit again, so the storage is no longer failing either.
                health = await client.get("/health")
                assert health.status_code == 200, health.text
            stop.set()
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        cluster.__exit__(None, None, None)
