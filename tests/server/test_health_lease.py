"""``/health`` of a node of several on PostgreSQL reports its lease, and is 503
while the node holds no valid lease.

A real ``serve_agentik`` on 127.0.0.1 over a real PostgreSQL bundle with a
60 s lease, a real HTTP client. The node's own measure of its lease runs on
trio's clock, so the test runs on a ``MockClock`` that keeps real time
(``rate=1``: the database calls and sockets are real) and is jumped past the
lease instead of waiting for it. Renewals are made to fail by renaming the
schema's node table (an error at once, in this test's schema only), and to
succeed again by renaming it back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest
import trio
from trio.testing import MockClock

from agentik.server import ServerConfig, serve_agentik
from agentik.storage import open_postgres_storage
from tests.postgres import fresh_schema

LEASE = 60.0
RENEWAL = LEASE / 3


@pytest.fixture
def clock() -> MockClock:
    """Real time, that the test can jump (pytest-trio runs the test on it)."""
    return MockClock(rate=1.0)


@asynccontextmanager
async def node(dsn: str, schema: str, tmp_path: Path) -> AsyncIterator[httpx2.AsyncClient]:
    # A turn refused for want of a lease waits ``takeover_wait`` for the
    # shard's next holder before its 503: 1 s here, not lease + 5 of real time.
    config = ServerConfig(port=0, database=str(tmp_path / "unused.db"), takeover_wait=1.0)
    stop = trio.Event()
    async with open_postgres_storage(dsn, schema=schema, readers=1, lease_seconds=LEASE) as bundle:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                partial(serve_agentik, config, storage=bundle, shutdown_trigger=stop.wait)
            )
            async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
                yield client
            stop.set()


def rename(dsn: str, schema: str, old: str, new: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"ALTER TABLE {schema}.{old} RENAME TO {new}")


def expire_all(dsn: str, schema: str, table: str) -> None:
    """What the database's clock says once the lease has passed (the test's
    jump moved only the node's clock)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            f"UPDATE {schema}.{table} SET expires_at = clock_timestamp() - interval '1 s'"
        )


async def health_until(
    client: httpx2.AsyncClient, done: Callable[[httpx2.Response], bool]
) -> httpx2.Response:
    """``/health`` once ``done`` holds of it (the lease task acts on its own)."""
    with trio.fail_after(15):
        while True:
            response = await client.get("/health")
            if done(response):
                return response
            await trio.sleep(0.05)


def lease(response: httpx2.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()["lease"]
    return body


async def test_health_reports_the_lease_and_is_503_while_it_holds_none(
    postgres_dsn: str, tmp_path: Path, clock: MockClock
) -> None:
    schema = fresh_schema()
    async with node(postgres_dsn, schema, tmp_path) as client:
        first = await client.get("/health")
        assert first.status_code == 200, first.text
        held = lease(first)
        assert held["valid"] is True and len(held["node_id"]) == 32
        assert held["lease_seconds"] == LEASE
        assert held["conversations"] == 0 and held["live_nodes"] == 1
        assert held["shards"] == held["total_shards"] == 256  # the only node: all of them
        assert held["releasing_shards"] == 0
        assert 0 <= held["renewed_seconds_ago"] < 5
        assert LEASE - 5 < held["valid_for_seconds"] <= LEASE
        assert held["last_renewal_error"] is None

        turn = await client.post("/agentik/conversations/c1/turns", json={"text": "hi"})
        assert turn.status_code == 200, turn.text
        assert lease(await client.get("/health"))["shards"] == 256

        # Renewals fail from now on: the lease still holds, and says so.
        await trio.to_thread.run_sync(rename, postgres_dsn, schema, "agentik_node", "parked")
        clock.jump(RENEWAL)
        failing = await health_until(client, lambda r: lease(r)["last_renewal_error"] is not None)
        assert failing.status_code == 200, "the lease is still valid"
        error = lease(failing)["last_renewal_error"]
        assert error["message"].startswith("renewal: ") and "agentik_node" in error["message"]
        assert lease(failing)["renewed_seconds_ago"] >= RENEWAL
        assert lease(failing)["shards"] == 256

        # Past the lease without a renewal: no valid lease, out of rotation.
        clock.jump(LEASE)
        lapsed = await health_until(client, lambda r: not lease(r)["valid"])
        assert lapsed.status_code == 503
        assert lapsed.headers["Retry-After"] == "1"
        assert lapsed.json()["status"] == "degraded"
        assert lease(lapsed)["shards"] == 0
        assert lease(lapsed)["valid_for_seconds"] == 0
        assert lease(lapsed)["renewed_seconds_ago"] >= LEASE
        refused = await client.post("/agentik/conversations/c1/turns", json={"text": "again"})
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"

        # The database answers again: the node joins under a new id, back in rotation.
        await trio.to_thread.run_sync(expire_all, postgres_dsn, schema, "parked")
        await trio.to_thread.run_sync(rename, postgres_dsn, schema, "parked", "agentik_node")
        back = await health_until(client, lambda r: r.status_code == 200)
        assert lease(back)["valid"] is True
        assert lease(back)["node_id"] != held["node_id"]
        assert lease(back)["renewed_seconds_ago"] < 5
        assert lease(back)["last_renewal_error"] is not None, "the last failure stays shown"
        again = await client.post("/agentik/conversations/c1/turns", json={"text": "again"})
        assert again.status_code == 200, again.text


async def test_health_of_a_single_node_has_no_lease(tmp_path: Path) -> None:
    config = ServerConfig(port=0, database=str(tmp_path / "one.db"))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_agentik, config, shutdown_trigger=stop.wait))
        async with httpx2.AsyncClient(base_url=url) as client:
            response = await client.get("/health")
        stop.set()
    assert response.status_code == 200
    assert "lease" not in response.json()
