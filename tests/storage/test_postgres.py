"""The PostgreSQL backend's own behaviour, beyond the shared contract: one bad
request fails alone in its batch; a connection lost mid-batch fails that
batch whole (callers told, nothing written) and the writer reconnects; a
connection lost while idle costs nothing; migrations run once, also when
several nodes open the same schema at once; errors name the server, never
its password.

Everything runs against a real PostgreSQL (tests/postgres.py). To hold the
writer at a chosen point, a second connection takes a table lock, and the
test waits until ``pg_stat_activity`` shows the writer waiting for it: that
wait is on another process, so it polls in real time (10 ms steps, bounded).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import psycopg
import pytest
import trio

from agentik import Message, Role, Skill, StoreError, TokenUsage
from agentik.storage import (
    DuplicateKeyError,
    Pending,
    StorageBundle,
    WriterStats,
    open_postgres_storage,
    writer_stats,
)
from agentik.storage.postgres._migrate import migrations
from tests.postgres import fresh_database, fresh_schema


def user(content: str) -> Message:
    return Message(role=Role.USER, content=content)


@pytest.fixture
def own_database(postgres_dsn: str) -> str:
    """A database of its own, for a test that watches or terminates the
    writer's backends (``pg_stat_activity`` by database): the tests of another
    pytest-xdist worker share the server, in other databases."""
    return fresh_database(postgres_dsn)


def stats(bundle: StorageBundle) -> WriterStats:
    found = writer_stats(bundle)
    assert found is not None
    return found


async def history(bundle: StorageBundle, conversation_id: str) -> list[Message]:
    return [m async for m in bundle.message_store.get_messages(conversation_id)]


@asynccontextmanager
async def bundle_in(dsn: str, schema: str) -> AsyncIterator[StorageBundle]:
    async with open_postgres_storage(dsn, schema=schema, readers=2) as bundle:
        yield bundle


@contextlib.contextmanager
def table_lock(dsn: str, schema: str, table: str) -> Iterator[psycopg.Connection]:
    """Hold an exclusive lock on ``table`` until the block ends (or the
    connection commits); the writer blocks on its next statement there."""
    with psycopg.connect(dsn) as connection:
        connection.execute(f"LOCK TABLE {schema}.{table} IN ACCESS EXCLUSIVE MODE")
        yield connection


def _writer_waits(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agentik-writer'"
            " AND wait_event_type = 'Lock' AND datname = current_database()"
        ).fetchone()
    return row is not None and row[0] > 0


async def writer_waits_for_a_lock(dsn: str) -> None:
    with trio.fail_after(10):
        # Another process's state: nothing to wait on but polling.
        while not await trio.to_thread.run_sync(_writer_waits, dsn):  # noqa: ASYNC110
            await trio.sleep(0.01)


def _terminate_writer(dsn: str, role: str = "writer") -> int:
    """Terminate the backends of ``role`` in ``dsn``'s database only: other
    tests (another pytest-xdist worker) use other databases of the server."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = %s AND datname = current_database()",
            (f"agentik-{role}",),
        ).fetchall()
    return len(rows)


async def failed(pending: Pending[object]) -> StoreError:
    with pytest.raises(StoreError) as raised:
        await pending.wait()
    return raised.value


async def compact_foreign_ids(bundle: StorageBundle, refused: list[StoreError]) -> None:
    try:
        await bundle.working_memory_store.compact("d", [99], "summary")
    except StoreError as error:
        refused.append(error)


class TestBatches:
    async def test_a_request_postgres_refuses_fails_alone_in_its_batch(
        self, own_database: str
    ) -> None:
        """In one batch: a value PostgreSQL refuses (a token count past bigint),
        a reused key, and a compact of ids that are not notes fail alone;
        every other request of the batch commits, seqs stay gapless."""
        schema = fresh_schema()
        async with bundle_in(own_database, schema) as bundle:
            store = bundle.message_store
            await store.append("c", user("first"), idempotency_key="k")
            refused: list[StoreError] = []
            async with trio.open_nursery() as nursery:
                with table_lock(own_database, schema, "skill"):
                    nursery.start_soon(
                        bundle.skill_store.upsert, Skill(name="s", description="d", body="b")
                    )
                    await writer_waits_for_a_lock(own_database)
                    ok1 = await store.submit("c", user("ok 1"))
                    huge = await store.submit(
                        "c", Message(Role.ASSISTANT, "x", usage=TokenUsage(2**63, 1))
                    )
                    duplicate = await store.submit("c", user("again"), idempotency_key="k")
                    ok2 = await store.submit("c", user("ok 2"))
                    compact = await store.submit("d", user("note owner"))
                    nursery.start_soon(compact_foreign_ids, bundle, refused)
            assert len(refused) == 1 and "are not all active entries" in str(refused[0])
        # Reopen: what committed is there, gapless.
        async with bundle_in(own_database, schema) as bundle:
            assert [m.content for m in await history(bundle, "c")] == ["first", "ok 1", "ok 2"]
            assert (await ok1.wait()).seq == 2 and (await ok2.wait()).seq == 3
            assert "out of range" in str(await failed(huge))
            with pytest.raises(DuplicateKeyError, match=r"^idempotency key 'k' was already used"):
                await duplicate.wait()
            assert (await compact.wait()).seq == 1

    async def test_a_connection_lost_mid_batch_fails_the_batch_and_the_writer_reconnects(
        self, own_database: str
    ) -> None:
        """The writer's backend is terminated while its batch has inserted two
        appends and waits on a lock for the third request: all three callers
        hear the batch failed, none of it is in the database, and the next
        write commits on a new connection, its seq following the last
        committed one."""
        schema = fresh_schema()
        async with bundle_in(own_database, schema) as bundle:
            store = bundle.message_store
            await store.append("c", user("before"))
            with table_lock(own_database, schema, "reflection") as first:
                with table_lock(own_database, schema, "skill"):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(
                            bundle.reflection_store.delete_older_than, datetime.now(UTC)
                        )
                        await writer_waits_for_a_lock(own_database)  # batch 0, on the first lock
                        x = await store.submit("c", user("x"))
                        y = await store.submit("c", user("y"))
                        upsert: list[BaseException] = []

                        async def upsert_skill() -> None:
                            try:
                                await bundle.skill_store.upsert(
                                    Skill(name="s", description="", body="")
                                )
                            except StoreError as error:
                                upsert.append(error)

                        nursery.start_soon(upsert_skill)
                        await trio.testing.wait_all_tasks_blocked()
                        first.commit()  # batch 0 ends; batch 1 inserts x, y, then waits
                        await writer_waits_for_a_lock(own_database)
                        assert await trio.to_thread.run_sync(_terminate_writer, own_database) == 1
                    for error in (await failed(x), await failed(y), upsert[0]):
                        assert str(error).startswith(
                            "the write was not committed: its batch failed (AdminShutdown"
                        ), error
            assert stats(bundle).failing
            assert [m.content for m in await history(bundle, "c")] == ["before"]
            assert (await store.append("c", user("after"))).seq == 2
            assert not stats(bundle).failing and stats(bundle).running
            assert stats(bundle).failed_batches == 1

    async def test_connections_lost_while_idle_cost_no_write_and_no_read(
        self, own_database: str
    ) -> None:
        """Every connection of the bundle is terminated between two uses (as a
        server restart would): the next write and the next reads succeed."""
        schema = fresh_schema()
        async with bundle_in(own_database, schema) as bundle:
            await bundle.message_store.append("c", user("one"))
            assert await trio.to_thread.run_sync(_terminate_writer, own_database, "writer") == 1
            assert await trio.to_thread.run_sync(_terminate_writer, own_database, "reader") == 2
            assert (await bundle.message_store.append("c", user("two"))).seq == 2
            for _ in range(3):  # every reader connection, whichever the pool hands out
                assert [m.content for m in await history(bundle, "c")] == ["one", "two"]
            assert stats(bundle).failed_batches == 0


class TestOpening:
    async def test_migrations_run_once_also_when_nodes_open_at_once(
        self, postgres_dsn: str
    ) -> None:
        """Three bundles open one fresh schema at the same time: the ladder is
        applied exactly once and every bundle works."""
        schema = fresh_schema()
        all_open = trio.Event()
        opened: list[int] = []

        async def open_one(i: int) -> None:
            async with bundle_in(postgres_dsn, schema) as bundle:
                opened.append(i)
                if len(opened) == 3:
                    all_open.set()
                await all_open.wait()
                await bundle.message_store.append(f"c{i}", user("works"))

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(open_one, i)
        with psycopg.connect(postgres_dsn) as connection:
            versions = connection.execute(
                f"SELECT version FROM {schema}.agentik_schema_version ORDER BY version"
            ).fetchall()
        assert [v for (v,) in versions] == [v for v, _ in migrations()]

    async def test_a_newer_database_is_refused(self, postgres_dsn: str) -> None:
        schema = fresh_schema()
        async with bundle_in(postgres_dsn, schema):
            pass
        with psycopg.connect(postgres_dsn) as connection:
            connection.execute(f"INSERT INTO {schema}.agentik_schema_version VALUES (999)")
        with pytest.raises(StoreError, match=r"^database schema version 999 is newer than"):
            async with bundle_in(postgres_dsn, schema):
                pass

    async def test_an_unreachable_server_is_a_store_error_without_the_password(self) -> None:
        with pytest.raises(StoreError, match=r"^cannot connect to PostgreSQL at ") as raised:
            async with open_postgres_storage(
                "postgresql://someone:s3cret@/agentik?host=/nonexistent", connect_timeout=1
            ):
                pass
        assert "s3cret" not in str(raised.value)

    async def test_data_survives_close_and_reopen(self, postgres_dsn: str) -> None:
        schema = fresh_schema()
        async with bundle_in(postgres_dsn, schema) as bundle:
            stored = await bundle.message_store.append("c", user("kept"), idempotency_key="k")
        async with bundle_in(postgres_dsn, schema) as bundle:
            assert await history(bundle, "c") == [stored]
            assert await bundle.message_store.find_idempotency_key("c", "k") == 1
