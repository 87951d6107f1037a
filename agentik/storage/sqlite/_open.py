"""``open_sqlite_storage``: connections, migrations, the writer task, the bundle.

Opening checks the SQLite version, opens the write connection, migrates the
schema and opens the readers, all off the event loop; any failure to open is a
``StoreError`` naming the file. Closing refuses new writes, lets the writer
drain what it accepted, then closes the connections (readers first, so the
writer's close checkpoints the WAL). Closing never raises for a database that
stopped taking writes (read-only, full disk): what was committed is
committed, so the failed ``PRAGMA optimize`` is logged, not raised. The writer runs in
a nursery hidden inside the context manager; an error from the body comes out
as itself, not wrapped in an exception group.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import apsw
import trio

from agentik._errors import StoreError
from agentik._groups import raise_lone_error
from agentik.storage._common import Clock, check_at_least, utc_now
from agentik.storage._protocols import Storage, StorageBundle
from agentik.storage._readers import ReaderPool
from agentik.storage._secrets import SqlSecretStore
from agentik.storage._sql_stores import (
    SqlMessageStore,
    SqlReflectionStore,
    SqlSkillStore,
    SqlWorkingMemoryStore,
)
from agentik.storage._writer import MAX_BATCH, QUEUE_SIZE, Writer, WriterStats
from agentik.storage.sqlite._connect import (
    Synchronous,
    check_synchronous,
    open_read_connection,
    open_write_connection,
)
from agentik.storage.sqlite._migrate import migrate
from agentik.storage.sqlite._queries import QUERIES
from agentik.storage.sqlite._writer import SqliteEngine

log = logging.getLogger("agentik.storage")


def _open_writer(
    path: str | os.PathLike[str], synchronous: Synchronous, busy_timeout: float, vfs: str | None
) -> apsw.Connection:
    try:
        connection = open_write_connection(path, synchronous, busy_timeout, vfs)
    except apsw.Error as error:
        raise StoreError(
            f"cannot open the database {os.fspath(path)!r}: {_why(path, error)}"
        ) from error
    migrated = False
    try:
        migrate(connection)
        migrated = True
    except apsw.Error as error:
        raise StoreError(
            f"cannot prepare the database {os.fspath(path)!r}: {_why(path, error)}"
        ) from error
    finally:
        if not migrated:
            connection.close()
    return connection


def _why(path: str | os.PathLike[str], error: apsw.Error) -> str:
    """SQLite's reason, plus the likely cause where SQLite's words are vague."""
    directory = os.path.dirname(os.path.abspath(os.fspath(path)))
    if isinstance(error, apsw.CantOpenError) and not os.path.isdir(directory):
        return f"{error} (the directory {directory!r} does not exist)"
    return str(error)


@asynccontextmanager
async def open_sqlite_storage(
    path: str | os.PathLike[str],
    *,
    synchronous: Synchronous = "FULL",
    readers: int = 4,
    max_batch: int = MAX_BATCH,
    queue_size: int = QUEUE_SIZE,
    busy_timeout: float = 5.0,
    clock: Clock = utc_now,
    vfs: str | None = None,
) -> AsyncIterator[Storage]:
    """Open (creating and migrating if needed) the SQLite database at ``path``.

    Args:
        synchronous: SQLite's durability level. FULL (the default) syncs the
            WAL on every commit, so an acknowledged write survives power loss;
            with group commit it costs little. NORMAL may lose the last
            commits on power loss (never on a process crash).
        readers: read-only connections, i.e. reads that can run at once.
        max_batch: the most requests one transaction commits (10,000: a
            burst of 5,000 turns' first two messages commit together).
        queue_size: requests the writer's queue holds before callers wait
            (40,000: 10,000 turns in lockstep, four messages each before
            they wait for their commit, fit without waiting for room).
        busy_timeout: seconds a connection waits for a lock another process
            holds. If the writer cannot begin or commit a transaction, that
            batch fails and the writer goes on (see ``docs/storage.md``).
        clock: where timestamps come from (aware UTC); read once per batch, in
            the writer's thread, so it must be thread-safe.
        vfs: the name of a registered SQLite VFS (``apsw.vfs_names()``) that
            every connection of the bundle, write and read, opens the file
            through; None (the default) is SQLite's default VFS. Lets a test
            inject faults without changing the process default.
    """
    check_synchronous(synchronous)
    check_at_least("readers", readers, 1)
    check_at_least("max_batch", max_batch, 1)
    check_at_least("queue_size", queue_size, 0)
    write_connection = await trio.to_thread.run_sync(
        _open_writer, path, synchronous, busy_timeout, vfs
    )
    read_connections: list[apsw.Connection] = []
    try:
        for _ in range(readers):
            read_connections.append(
                await trio.to_thread.run_sync(open_read_connection, path, busy_timeout, vfs)
            )
        pool = ReaderPool(read_connections)
        writer = Writer(
            SqliteEngine(write_connection, clock),
            clock=clock,
            max_batch=max_batch,
            queue_size=queue_size,
            read_only=write_connection.readonly("main"),
        )
        bundle = Storage(
            message_store=SqlMessageStore(writer, pool, QUERIES),
            working_memory_store=SqlWorkingMemoryStore(writer, pool, QUERIES),
            reflection_store=SqlReflectionStore(writer, pool, QUERIES),
            skill_store=SqlSkillStore(writer, pool, QUERIES),
            secret_store=SqlSecretStore(writer, pool, QUERIES),
        )
        # The writer and the readers never raise, so a group holds the body's error alone:
        # hand it out as itself, as if there were no nursery in here.
        with raise_lone_error():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.run)
                nursery.start_soon(pool.run)
                try:
                    yield bundle
                finally:
                    writer.close()
                    pool.refuse()
    finally:
        for connection in read_connections:
            connection.close()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_close_writer, write_connection)


def _close_writer(connection: apsw.Connection) -> None:
    """``PRAGMA optimize`` (it may write fresh statistics), then close. On a
    database that takes no writes it cannot succeed and is not needed for
    anything committed, so its failure is logged and the close goes on."""
    if not connection.readonly("main"):
        try:
            connection.pragma("optimize")
        except apsw.Error as error:
            log.warning(
                "PRAGMA optimize failed while closing the database (%s: %s);"
                " every acknowledged write was committed before",
                type(error).__name__,
                error,
            )
    connection.close()


def writer_stats(bundle: StorageBundle) -> WriterStats | None:
    """The writer's counters (batches, sizes, queue depth) of a SQLite or
    PostgreSQL bundle, or None for a backend without a writer (the in-memory one)."""
    store = bundle.message_store
    return store.writer_stats() if isinstance(store, SqlMessageStore) else None
