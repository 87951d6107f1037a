"""``open_postgres_storage``: connections, migrations, the writer task, the bundle.

Opening connects the writer, migrates the schema and connects the readers,
all off the event loop; any failure to open is a ``StoreError`` naming the
server (never its password). Closing refuses new writes, lets the writer drain
what it accepted, then closes the connections. The writer runs in a nursery
hidden inside the context manager; an error from the body comes out as
itself, not wrapped in an exception group.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING

import trio

from agentik._groups import raise_lone_error
from agentik.storage._common import Clock, check_at_least, utc_now
from agentik.storage._protocols import Storage
from agentik.storage._readers import ReaderPool
from agentik.storage._secrets import SqlSecretStore
from agentik.storage._shards import DEFAULT_SHARDS, check_shards
from agentik.storage._sql_stores import (
    SqlMessageStore,
    SqlReflectionStore,
    SqlSkillStore,
    SqlWorkingMemoryStore,
)
from agentik.storage._writer import MAX_BATCH, QUEUE_SIZE, Writer

if TYPE_CHECKING:
    from collections.abc import Callable

    import psycopg

    from agentik.storage.postgres._leases import NodeLease
    from agentik.storage.postgres._watchdog import Watchdog
    from agentik.storage.postgres._writer import PostgresEngine

DEFAULT_SCHEMA = "agentik"


async def _renew(lease: NodeLease, scope: trio.CancelScope) -> None:
    with scope:
        await lease.run()


@asynccontextmanager
async def open_postgres_storage(
    dsn: str,
    *,
    schema: str = DEFAULT_SCHEMA,
    readers: int = 4,
    max_batch: int = MAX_BATCH,
    queue_size: int = QUEUE_SIZE,
    connect_timeout: float = 10.0,
    clock: Clock = utc_now,
    lease_seconds: float | None = None,
    advertise_url: str | None = None,
    shards: int = DEFAULT_SHARDS,
) -> AsyncIterator[Storage]:
    """Open (creating and migrating if needed) agentik's tables in PostgreSQL.

    Args:
        dsn: a libpq connection string or URL (``postgresql://user@host/db``).
        schema: the PostgreSQL schema that holds agentik's tables, created if
            missing; several bundles (or tests) can share one database in
            different schemas.
        readers: read connections, i.e. reads that can run at once.
        max_batch: the most requests one transaction commits (10,000: a
            burst of 5,000 turns' first two messages commit together).
        queue_size: requests the writer's queue holds before callers wait
            (40,000: 10,000 turns in lockstep, four messages each before
            they wait for their commit, fit without waiting for room).
        connect_timeout: seconds to wait for the server when connecting (and
            reconnecting after a lost connection).
        clock: where timestamps come from (aware UTC); read once per batch, in
            the writer's thread, so it must be thread-safe.
        lease_seconds: turn on conversation ownership, for several nodes
            sharing the database (docs/scale-out.md): the bundle joins as a
            node with this lease and holds its share of the shards
            (``bundle.ownership``), and the writer refuses messages for
            conversations of shards this node does not hold. A node that dies
            loses its shards this long after its last renewal. None (the
            default): one node, no ownership.
        advertise_url: where other nodes redirect requests for this node's
            conversations (``bundle.ownership.advertise`` can set it later,
            once the server knows its port).
        shards: the shards the database is split into (``[storage] shards``),
            fixed at the first open with ``lease_seconds``: a later one with
            another number is a ``StoreError`` (an open without a lease, one
            process alone or a CLI command, neither sets nor checks it). A
            conversation lives in shard ``crc32(id) % shards``; nodes lease
            shards, not conversations.
    """
    check_at_least("readers", readers, 1)
    check_at_least("max_batch", max_batch, 1)
    check_at_least("queue_size", queue_size, 0)
    check_shards(shards)
    try:  # psycopg is the optional extra agentik[postgres]: imported when asked for
        from agentik.storage.postgres._connect import connect, open_writer
        from agentik.storage.postgres._leases import NodeLease
        from agentik.storage.postgres._watchdog import Watchdog
        from agentik.storage.postgres._writer import PostgresEngine
    except ImportError as error:
        raise ImportError(
            f"open_postgres_storage needs psycopg 3 ({error}); install agentik[postgres]"
        ) from error
    watchdog = Watchdog()
    watchdog.start()
    try:
        make = partial(connect, dsn, schema=schema, timeout=connect_timeout, watchdog=watchdog)
        make_writer = partial(make, role="writer")
        make_reader = partial(make, role="reader")
        lease = None
        if lease_seconds is not None:
            lease = NodeLease(
                partial(make, role="lease"),
                lease_seconds,
                advertise_url or "",
                watchdog=watchdog,
                shards=shards,
            )
        write_connection = await trio.to_thread.run_sync(
            open_writer, make_writer, schema, dsn, watchdog, None if lease is None else shards
        )
        engine = PostgresEngine(write_connection, make_writer, clock, lease, watchdog=watchdog)
        async with _serving(
            engine, make_reader, lease, readers, max_batch, queue_size, clock, watchdog
        ) as bundle:
            yield bundle
    finally:
        watchdog.stop()  # last: closing (a lease's leave) is bounded too


@asynccontextmanager
async def _serving(
    engine: PostgresEngine,
    make_reader: Callable[[], psycopg.Connection],
    lease: NodeLease | None,
    readers: int,
    max_batch: int,
    queue_size: int,
    clock: Clock,
    watchdog: Watchdog,
) -> AsyncIterator[Storage]:
    """The bundle over an open write connection: readers, the writer task, the
    lease's renewals; on the way out the writer drains, then everything closes."""
    from agentik.storage.postgres._connect import Reconnecting
    from agentik.storage.postgres._queries import QUERIES

    read_connections: list[psycopg.Connection] = []
    lease_scope = trio.CancelScope()
    try:
        if lease is not None:
            await lease.join()
        for _ in range(readers):
            read_connections.append(await trio.to_thread.run_sync(make_reader))
        pool = ReaderPool(read_connections, Reconnecting(make_reader, watchdog))
        writer = Writer(engine, clock=clock, max_batch=max_batch, queue_size=queue_size)
        bundle = Storage(
            message_store=SqlMessageStore(writer, pool, QUERIES),
            working_memory_store=SqlWorkingMemoryStore(writer, pool, QUERIES),
            reflection_store=SqlReflectionStore(writer, pool, QUERIES),
            skill_store=SqlSkillStore(writer, pool, QUERIES),
            ownership=lease,
            secret_store=SqlSecretStore(writer, pool, QUERIES),
        )
        try:
            # The writer and the readers never raise, so a group holds the body's error alone:
            # hand it out as itself, as if there were no nursery in here.
            with raise_lone_error():
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(writer.run)
                    nursery.start_soon(pool.run)
                    if lease is not None:
                        nursery.start_soon(_renew, lease, lease_scope)
                    try:
                        yield bundle
                    finally:
                        writer.close()
                        pool.refuse()
                        lease_scope.cancel()
        finally:
            read_connections = pool.connections
    finally:
        for connection in read_connections:
            connection.close()
        with trio.CancelScope(shield=True):
            if lease is not None:  # after the writer drained: nothing of ours is in flight
                await lease.leave()
            await trio.to_thread.run_sync(engine.close)
