"""Storage health, as ``/health`` reads it: whether writes are failing for a
storage reason, and the last such error and when (``WriterStats.failing``,
``last_error``, ``last_error_at``); and closing a bundle whose database takes
no writes any more does not raise.

"Failing" means: the last write that reached SQLite failed for a reason of
the storage (a read-only database, an I/O error, a full disk, a lock held past
``busy_timeout``) and no write has committed since. A write refused for its
own sake (a reused idempotency key) says nothing about the storage.
"""

from __future__ import annotations

import logging
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role, StoreError
from agentik.storage import DuplicateKeyError, WriterStats, open_sqlite_storage, writer_stats
from agentik.storage.sqlite._connect import open_write_connection
from agentik.storage.sqlite._migrate import migrate
from agentik.storage.sqlite._open import _close_writer
from tests.reliability.conftest import faulty_vfs as faulty_vfs
from tests.reliability.faulty_vfs import FaultyVFS
from tests.storage.vfs_faults import DiskFullVFS, ReadOnlyVFS
from tests.storage.vfs_faults import disk_full_vfs as disk_full_vfs
from tests.storage.vfs_faults import readonly_vfs as readonly_vfs


def user(text: str) -> Message:
    return Message(Role.USER, text)


def stats_of(bundle: object) -> WriterStats:
    stats = writer_stats(bundle)  # type: ignore[arg-type]
    assert stats is not None
    return stats


async def test_a_read_only_database_is_failing_from_the_start(
    tmp_path: Path, readonly_vfs: ReadOnlyVFS
) -> None:
    """Opened read-only, the bundle reads, says so before any write, names
    SQLite's error once a write fails, and closes without raising."""
    path = tmp_path / "db"
    async with open_sqlite_storage(path) as bundle:
        await bundle.message_store.append("c", user("kept"))
        assert not stats_of(bundle).failing
    async with open_sqlite_storage(path, vfs=ReadOnlyVFS.NAME) as bundle:
        stats = stats_of(bundle)
        assert stats.failing
        assert stats.last_error is not None and "read-only" in stats.last_error
        with pytest.raises(StoreError, match="readonly"):
            await bundle.message_store.append("c", user("lost"))
        stats = stats_of(bundle)
        assert stats.failing
        assert stats.last_error is not None
        assert "ReadOnlyError: attempt to write a readonly database" in stats.last_error
        assert [m.content async for m in bundle.message_store.get_messages("c")] == ["kept"]


async def test_a_full_disk_fails_writes_until_one_commits(
    tmp_path: Path, faulty_vfs: FaultyVFS
) -> None:
    """A COMMIT the disk refuses marks the storage failing with the error and
    its time; the next write that commits clears it (the error stays readable)."""
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        store = bundle.message_store
        await store.append("c", user("kept"))
        stats = stats_of(bundle)
        assert (stats.failing, stats.last_error, stats.last_error_at) == (False, None, None)
        faulty_vfs.fail = "write"
        before = datetime.now(UTC)
        with pytest.raises(StoreError):
            await store.append("c", user("lost"))
        stats = stats_of(bundle)
        assert stats.failing
        assert stats.last_error is not None and "injected write failure" in stats.last_error
        assert stats.last_error_at is not None
        assert before <= stats.last_error_at <= datetime.now(UTC)
        faulty_vfs.fail = None
        await store.append("c", user("after"))
        recovered = stats_of(bundle)
        assert not recovered.failing
        assert recovered.last_error == stats.last_error
        assert recovered.last_error_at == stats.last_error_at


async def test_a_database_that_cannot_be_created_on_a_full_disk_is_a_store_error(
    tmp_path: Path, disk_full_vfs: DiskFullVFS
) -> None:
    """The schema cannot be written: a ``StoreError`` naming the file (the CLI's
    one line), not SQLite's own exception."""
    disk_full_vfs.fail = "write"
    path = tmp_path / "new.db"
    with pytest.raises(StoreError, match=r"database or disk is full") as caught:
        async with open_sqlite_storage(path, vfs=DiskFullVFS.NAME):
            pass
    assert repr(str(path)) in str(caught.value)


async def test_a_request_refused_for_its_own_sake_is_not_a_storage_failure(
    tmp_path: Path,
) -> None:
    async with open_sqlite_storage(tmp_path / "db") as bundle:
        store = bundle.message_store
        await store.append("c", user("once"), idempotency_key="k")
        with pytest.raises(DuplicateKeyError):
            await store.append("c", user("twice"), idempotency_key="k")
        stats = stats_of(bundle)
        assert (stats.failing, stats.last_error) == (False, None)


def test_closing_a_connection_that_stopped_taking_writes_logs_instead_of_raising(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``PRAGMA optimize`` on close may need to write; on a database that went
    read-only it fails, and that failure must not turn a clean shutdown into
    an error (``agentik serve`` exited 1 on SIGTERM)."""
    connection = open_write_connection(tmp_path / "db", "FULL", 1.0)
    migrate(connection)
    for _ in range(3):  # reads that leave ANALYZE something to do
        connection.execute("SELECT * FROM message WHERE conversation_id = ?", ("c",)).fetchall()
    connection.pragma("query_only", 1)  # what a read-only remount looks like to SQLite
    with caplog.at_level(logging.WARNING, logger="agentik.storage"):
        _close_writer(connection)
    assert "PRAGMA optimize failed" in caplog.text
    assert "ReadOnlyError" in caplog.text
    with pytest.raises(Exception, match="closed"):
        connection.execute("SELECT 1")


OPERATIONS = st.lists(st.sampled_from(["ok", "fault", "duplicate"]), max_size=12)


@settings(max_examples=25, deadline=None)
@given(operations=OPERATIONS)
async def test_failing_is_whether_the_last_storage_outcome_was_a_fault(
    operations: list[str],
) -> None:
    """Any sequence of committed writes, writes the disk refuses and writes
    refused for their own sake: ``failing`` is True exactly when the last write
    that was not refused for its own sake failed, and ``last_error`` is the
    latest fault's."""
    vfs = FaultyVFS()
    try:
        with tempfile.TemporaryDirectory() as directory:
            async with open_sqlite_storage(Path(directory) / "db", vfs=FaultyVFS.NAME) as bundle:
                store = bundle.message_store
                await store.append("c", user("first"), idempotency_key="used")
                failing, faults = False, 0
                for operation in operations:
                    if operation == "ok":
                        await store.append("c", user("ok"))
                        failing = False
                    elif operation == "fault":
                        vfs.fail = "write"
                        with pytest.raises(StoreError):
                            await store.append("c", user("lost"))
                        vfs.fail = None
                        failing, faults = True, faults + 1
                    else:
                        with pytest.raises(DuplicateKeyError):
                            await store.append("c", user("again"), idempotency_key="used")
                    stats = stats_of(bundle)
                    assert stats.failing is failing, operations
                    assert (stats.last_error is not None) is (faults > 0)
    finally:
        vfs.unregister()
