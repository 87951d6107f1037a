"""``agentik serve`` settings that reach past the config into the running
node (issue 33, item 7): ``[limits] keepalive_timeout`` is the idle timeout of
its HTTP connections, and ``[storage] readers`` the read connections its
storage opens.

The keep-alive test runs ``serve_agentik`` in the test's trio run under the
mock clock (``tests.server.rawconn``), which jumps after 50 ms of real
idleness: the timeout passes in no real time and is measured in virtual
seconds. The readers test counts the node's connections as PostgreSQL sees
them (``pg_stat_activity``), a real server in another process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from agentik.server import Limits, ServerConfig, serve_agentik
from tests.server.rawconn import RawClient, running_server
from tests.server.test_slow_clients import get_health


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


@pytest.mark.parametrize("seconds", [1.5, 30.0])
async def test_keepalive_timeout_closes_an_idle_connection(
    clock: trio.testing.MockClock, seconds: float
) -> None:
    """Idle after an answer, the connection stays open ``keepalive_timeout``
    seconds (not the fixed 5 s it was), then the server closes it."""
    async with running_server(Limits(keepalive_timeout=seconds)) as server:
        client = await RawClient.connect(server.port)
        assert await get_health(client) == 200
        idle_since = trio.current_time()
        await trio.sleep(seconds * 0.9)
        assert await get_health(client) == 200  # still open: the timer restarts
        idle_since = trio.current_time()
        with trio.fail_after(seconds * 10):
            assert await client.closed_by_server()
        assert seconds <= trio.current_time() - idle_since < seconds + 1
        client.sock.close()


async def test_readers_is_the_nodes_read_connections(postgres_dsn: str) -> None:
    """On PostgreSQL a node holds one read connection per reader asked for."""
    import psycopg

    from tests.postgres import fresh_database

    url = fresh_database(postgres_dsn)
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]

    def connections() -> int:
        # The readers' own connections: a count of every backend of the
        # database also saw the first server's, still exiting after it closed.
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name = 'agentik-reader'",
                (name,),
            ).fetchone()
        assert row is not None
        return int(row[0])

    held: dict[int, int] = {}
    for readers in (1, 5):
        stop = trio.Event()
        config = ServerConfig(port=0, database=url, readers=readers)
        async with trio.open_nursery() as inner:
            await inner.start(
                lambda task_status, config=config, stop=stop: serve_agentik(
                    config, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            held[readers] = await trio.to_thread.run_sync(connections)
            stop.set()
    assert held == {1: 1, 5: 5}, held


def test_shards_is_read_and_checked(tmp_path: Path) -> None:
    """``[storage] shards`` (``AGENTIK_STORAGE_SHARDS``): 256 unless set, a
    whole number from 1 to 65,536, anything else refused naming the setting."""
    from agentik.server import ConfigError, load_config

    assert load_config(None, env={}).shards == 256
    path = tmp_path / "agentik.toml"
    path.write_text("[storage]\nshards = 64\n")
    assert load_config(path, env={}).shards == 64
    assert load_config(path, env={"AGENTIK_STORAGE_SHARDS": "32"}).shards == 32
    with pytest.raises(ConfigError, match=r"^\[storage\] shards must be between 1 and 65536"):
        load_config(None, env={"AGENTIK_STORAGE_SHARDS": "65537"})
    for wrong in ("0", "-3", "many"):
        with pytest.raises(ConfigError, match=r"\[storage\] shards must be a positive integer"):
            load_config(None, env={"AGENTIK_STORAGE_SHARDS": wrong})
