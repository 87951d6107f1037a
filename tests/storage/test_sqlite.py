"""What only the SQLite backend promises: group commit, savepoints, durability,
migrations, shutdown and cancellation, writer death.

Every test uses real database files under ``tmp_path``. To hold the writer at a
known point the tests take SQLite's write lock from a second, ordinary
connection (``BEGIN IMMEDIATE``): the writer's thread then waits in its busy
handler with the batch it already took, while the test queues more requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import apsw
import pytest
import trio
import trio.lowlevel
from trio.testing import wait_all_tasks_blocked

from agentik import Message, Role, Skill, StoreError, TokenUsage
from agentik.storage import (
    DuplicateKeyError,
    Pending,
    SchemaVersionError,
    StorageBundle,
    StoreClosedError,
    WriterStats,
    in_memory_storage,
    open_sqlite_storage,
    writer_stats,
)
from agentik.storage.sqlite._connect import check_sqlite_version, open_write_connection
from agentik.storage.sqlite._migrate import migrate, migrations, schema_version


def user(content: str) -> Message:
    return Message(role=Role.USER, content=content)


class WriteLock:
    """SQLite's write lock on a database, held by a second connection."""

    def __init__(self, path: Path) -> None:
        self._connection = apsw.Connection(str(path))
        self._connection.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")


@contextmanager
def write_lock(path: Path) -> Iterator[WriteLock]:
    lock = WriteLock(path)
    try:
        yield lock
    finally:
        lock.release()


def stats(bundle: StorageBundle) -> WriterStats:
    found = writer_stats(bundle)
    assert found is not None
    return found


async def writer_is_stuck() -> None:
    """Wait until the writer has taken what was queued and sits in its thread,
    blocked on the lock (every task is then blocked)."""
    await wait_all_tasks_blocked()


async def history(bundle: StorageBundle, conversation_id: str) -> list[Message]:
    return [m async for m in bundle.message_store.get_messages(conversation_id)]


class TestGroupCommit:
    async def test_1000_appends_from_200_tasks_are_gapless(self, tmp_path: Path) -> None:
        """1,000 concurrent appends from 200 tasks get gapless seqs, few commits,
        and leave a database that passes ``PRAGMA integrity_check``."""
        path = tmp_path / "db"
        async with open_sqlite_storage(path) as bundle:
            store = bundle.message_store

            async def writer(task: int) -> None:
                for i in range(5):
                    await store.append(f"c{task % 7}", user(f"{task}:{i}"))
                    await store.append("shared", user(f"{task}:{i}"))

            async with trio.open_nursery() as nursery:
                for task in range(200):
                    nursery.start_soon(writer, task)
            counters = stats(bundle)
            assert counters.writes == 2000
            assert counters.batches < 2000 / 5, "requests were not committed in groups"
            shared = await history(bundle, "shared")
            assert [m.seq for m in shared] == list(range(1, 1001))
            for c in range(7):
                seqs = [m.seq for m in await history(bundle, f"c{c}")]
                assert seqs == list(range(1, len(seqs) + 1))
        connection = apsw.Connection(str(path))
        assert connection.execute("PRAGMA integrity_check").get == "ok"
        assert connection.execute("SELECT count(*) FROM message").get == 2000

    async def test_failing_requests_fail_alone_in_their_batch(self, tmp_path: Path) -> None:
        """A duplicate key and an out-of-range value fail with their own errors;
        their batch-mates commit in the same transaction, with gapless seqs."""
        path = tmp_path / "db"
        async with open_sqlite_storage(path) as bundle:
            store = bundle.message_store
            await store.append("c", user("first"), idempotency_key="k")
            before = stats(bundle)
            with write_lock(path) as lock:
                blocked = await store.submit("c", user("blocked"))
                await writer_is_stuck()
                ok1 = await store.submit("c", user("ok1"))
                dup = await store.submit("c", user("dup"), idempotency_key="k")
                huge = TokenUsage(prompt_tokens=2**70, completion_tokens=0)
                bad = await store.submit("c", Message(role=Role.ASSISTANT, content="x", usage=huge))
                ok2 = await store.submit("d", user("ok2"))
                assert stats(bundle).queue_depth == 4
                lock.release()
                assert (await blocked.wait()).seq == 2
                with pytest.raises(DuplicateKeyError, match=r"^idempotency key 'k' was already"):
                    await dup.wait()
                with pytest.raises(StoreError, match=r"^storage write failed: OverflowError"):
                    await bad.wait()
                assert (await ok1.wait()).seq == 3
                assert (await ok2.wait()).seq == 1
            after = stats(bundle)
            assert after.batches - before.batches == 2
            assert after.last_batch_size == 4
            assert after.failed_writes - before.failed_writes == 2
            assert [m.content for m in await history(bundle, "c")] == ["first", "blocked", "ok1"]
            assert (await store.append("c", user("next"))).seq == 4

    async def test_compact_of_foreign_ids_rolls_back_alone(self, tmp_path: Path) -> None:
        """A compact that must fail archives nothing, even when it ran in a batch."""
        path = tmp_path / "db"
        async with open_sqlite_storage(path) as bundle:
            memory = bundle.working_memory_store
            mine = await memory.append("c", "mine")
            theirs = await memory.append("d", "theirs")
            results: list[object] = []

            async def compact() -> None:
                try:
                    results.append(await memory.compact("c", [mine.id, theirs.id], "s"))
                except StoreError as error:
                    results.append(error)

            before = stats(bundle)
            with write_lock(path) as lock:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(memory.append, "c", "blocker")
                    await writer_is_stuck()
                    nursery.start_soon(compact)
                    nursery.start_soon(memory.append, "c", "other")
                    await wait_all_tasks_blocked()
                    lock.release()
            assert stats(bundle).batches - before.batches == 2, "compact had no batch-mate"
            assert isinstance(results[0], StoreError)
            assert [e.text for e in await memory.list("c")] == ["mine", "blocker", "other"]
            assert await memory.list("d") == [theirs]

    async def test_a_stale_seq_cache_heals_after_one_failure(self, tmp_path: Path) -> None:
        """If something else appends to the file behind the writer's back, the
        clashing append fails alone and the next one looks the seq up afresh."""
        path = tmp_path / "db"
        async with open_sqlite_storage(path) as bundle:
            store = bundle.message_store
            await store.append("c", user("one"))
            intruder = apsw.Connection(str(path))
            intruder.execute(
                "INSERT INTO message (conversation_id, seq, role, content, created_us)"
                " VALUES ('c', 2, 'user', 'intruder', 0)"
            )
            intruder.close()
            with pytest.raises(StoreError, match=r"^storage write failed: ConstraintError"):
                await store.append("c", user("clash"))
            assert (await store.append("c", user("three"))).seq == 3


class TestDurability:
    async def test_data_survives_close_and_reopen(self, tmp_path: Path) -> None:
        """Everything written is read back identically after reopening the file."""
        path = tmp_path / "db"
        async with open_sqlite_storage(path) as bundle:
            message = await bundle.message_store.append("c", user("kept"), idempotency_key="k")
            entry = await bundle.working_memory_store.append("c", "note")
            reflection = await bundle.reflection_store.insert("c", "lesson")
            skill = await bundle.skill_store.upsert(Skill(name="s", description="d", body="b"))
        async with open_sqlite_storage(path) as bundle:
            assert await history(bundle, "c") == [message]
            assert await bundle.message_store.find_idempotency_key("c", "k") == 1
            assert await bundle.working_memory_store.list("c") == [entry]
            assert await bundle.reflection_store.list_recent(5) == [reflection]
            assert await bundle.skill_store.all() == [skill]
            assert (await bundle.message_store.append("c", user("more"))).seq == 2

    async def test_synchronous_defaults_to_full_and_is_configurable(self, tmp_path: Path) -> None:
        """The write connection runs with synchronous=FULL unless told otherwise."""
        full = open_write_connection(tmp_path / "a", "FULL", 1.0)
        normal = open_write_connection(tmp_path / "b", "NORMAL", 1.0)
        assert (full.pragma("synchronous"), normal.pragma("synchronous")) == (2, 1)
        assert full.pragma("journal_mode") == "wal"
        assert full.pragma("foreign_keys") == 1
        with pytest.raises(ValueError, match=r"^synchronous must be one of OFF, NORMAL, FULL"):
            async with open_sqlite_storage(tmp_path / "c", synchronous="SOMETIMES"):  # type: ignore[arg-type]
                pass

    async def test_acknowledged_write_is_visible_to_later_reads(self, tmp_path: Path) -> None:
        """Each of many tasks reads its own message right after append returns."""
        async with open_sqlite_storage(tmp_path / "db", readers=2) as bundle:
            store = bundle.message_store

            async def check(task: int) -> None:
                stored = await store.append(f"c{task}", user(str(task)))
                assert [m async for m in store.get_messages(f"c{task}")] == [stored]
                assert await store.list_conversations(after=f"c{task}\x00", limit=0) == []

            async with trio.open_nursery() as nursery:
                for task in range(50):
                    nursery.start_soon(check, task)


class TestMigrations:
    def test_migrations_run_once(self, tmp_path: Path) -> None:
        """A new database gets every step; a current one gets none."""
        connection = open_write_connection(tmp_path / "db", "FULL", 1.0)
        assert migrate(connection) == [v for v, _ in migrations()]
        assert migrate(connection) == []
        assert schema_version(connection) == len(migrations())

    async def test_version_2_marks_the_last_turn_of_each_conversation_as_ended(
        self, tmp_path: Path
    ) -> None:
        """Turns of a version-1 database were never resumed: upgrading marks each
        conversation's last user message failed ``before_upgrade``, so an
        unfinished one is not resumed now; later turns are unmarked."""
        path = tmp_path / "db"
        connection = open_write_connection(path, "FULL", 1.0)
        version_1 = migrations()[0][1]
        connection.execute(version_1)
        connection.pragma("user_version", 1)
        rows = [("a", 1, "user"), ("a", 2, "assistant"), ("a", 3, "user"), ("b", 1, "user")]
        connection.executemany(
            "INSERT INTO message (conversation_id, seq, role, content, created_us)"
            " VALUES (?, ?, ?, 'x', 0)",
            rows,
        )
        assert migrate(connection) == list(range(2, len(migrations()) + 1))
        connection.close()
        async with open_sqlite_storage(path) as bundle:
            ledger = bundle.message_store
            assert (await ledger.turn_record("a", 3)).failure == "before_upgrade"
            assert (await ledger.turn_record("a", 1)).failure is None
            assert (await ledger.turn_record("b", 1)).failure == "before_upgrade"
            await bundle.message_store.append("a", Message(Role.USER, "after"))
            assert (await ledger.turn_record("a", 4)).failure is None

    async def test_a_newer_database_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "db"
        connection = apsw.Connection(str(path))
        connection.pragma("user_version", 99)
        connection.close()
        with pytest.raises(SchemaVersionError, match=r"^database schema version 99 is newer"):
            async with open_sqlite_storage(path):
                pass

    def test_an_old_sqlite_is_refused(self) -> None:
        """SQLite before 3.51.3 (the WAL-reset bug) is refused by name."""
        with pytest.raises(SchemaVersionError, match=r"^sqlite 3\.51\.2 is too old"):
            check_sqlite_version("3.51.2")
        for fine in ("3.51.3", "3.54.1", "4.0.0"):
            check_sqlite_version(fine)
        check_sqlite_version(apsw.sqlite_lib_version())


class CountingVFS(apsw.VFS):  # type: ignore[misc]
    """The ``unix`` VFS under another name, counting the main database files it opens."""

    NAME = "agentik-counting"

    def __init__(self) -> None:
        self.opened: list[int] = []
        """The open flags of each main database file opened through this VFS."""
        super().__init__(self.NAME, "unix", makedefault=False)

    def xOpen(self, name: object, flags: list[int]) -> apsw.VFSFile:
        if flags[0] & apsw.SQLITE_OPEN_MAIN_DB:
            self.opened.append(flags[0])
        return apsw.VFSFile("unix", name, flags)


@pytest.fixture
def counting_vfs() -> Iterator[CountingVFS]:
    vfs = CountingVFS()
    try:
        yield vfs
    finally:
        vfs.unregister()


class TestVfs:
    async def test_every_connection_opens_through_the_named_vfs(
        self, counting_vfs: CountingVFS, tmp_path: Path
    ) -> None:
        """``vfs=`` reaches the write connection and every reader; the process
        default VFS stays what it was."""
        default = apsw.vfs_names()[0]
        async with open_sqlite_storage(tmp_path / "db", readers=3, vfs=CountingVFS.NAME) as bundle:
            stored = await bundle.message_store.append("c", user("hello"))
            assert await history(bundle, "c") == [stored]
        writable = [f for f in counting_vfs.opened if f & apsw.SQLITE_OPEN_READWRITE]
        read_only = [f for f in counting_vfs.opened if f & apsw.SQLITE_OPEN_READONLY]
        assert (len(writable), len(read_only)) == (1, 3)
        assert apsw.vfs_names()[0] == default != CountingVFS.NAME

    async def test_without_vfs_the_default_is_used(
        self, counting_vfs: CountingVFS, tmp_path: Path
    ) -> None:
        async with open_sqlite_storage(tmp_path / "db") as bundle:
            await bundle.message_store.append("c", user("hello"))
        assert counting_vfs.opened == []

    async def test_an_unknown_vfs_is_refused(self, tmp_path: Path) -> None:
        with pytest.raises(StoreError, match=r"^cannot open the database .*no such vfs: nope"):
            async with open_sqlite_storage(tmp_path / "db", vfs="nope"):
                pass


class TestShutdown:
    async def test_close_drains_accepted_writes(self, tmp_path: Path) -> None:
        """Writes accepted before close are committed, then later ones are refused."""
        path = tmp_path / "db"
        pendings: list[Pending[Message]] = []
        async with open_sqlite_storage(path, queue_size=100) as bundle:
            for i in range(100):
                pendings.append(await bundle.message_store.submit("c", user(str(i))))
        assert [(await p.wait()).seq for p in pendings] == list(range(1, 101))
        with pytest.raises(StoreClosedError, match=r"^the storage bundle is closed"):
            await bundle.message_store.append("c", user("late"))
        with pytest.raises(StoreClosedError, match=r"^the storage bundle is closed"):
            await bundle.skill_store.all()
        assert stats(bundle).running is False
        async with open_sqlite_storage(path) as reopened:
            assert len(await history(reopened, "c")) == 100

    async def test_body_errors_come_out_unwrapped(self, tmp_path: Path) -> None:
        """An error in the ``async with`` body is not wrapped in an exception group."""
        with pytest.raises(KeyError):
            async with open_sqlite_storage(tmp_path / "db"):
                raise KeyError("boom")

    async def test_in_memory_bundle_has_no_writer_stats(self) -> None:
        assert writer_stats(in_memory_storage()) is None


class TestCancellation:
    async def test_cancelled_callers_lose_or_duplicate_nothing(self, tmp_path: Path) -> None:
        """Callers cancelled while waiting for room or for the commit: every write
        that was accepted commits once, none that was refused appears, and the
        writer keeps working."""
        path = tmp_path / "db"
        async with open_sqlite_storage(path, max_batch=10, queue_size=20) as bundle:
            store = bundle.message_store
            accepted: set[str] = set()
            with write_lock(path) as lock:
                async with trio.open_nursery() as nursery:

                    async def caller(i: int) -> None:
                        pending = await store.submit("c", user(str(i)))
                        accepted.add(str(i))
                        await pending.wait()

                    for i in range(100):
                        nursery.start_soon(caller, i)
                    await writer_is_stuck()
                    assert stats(bundle).queue_depth > 20, "no caller waits for room"
                    nursery.cancel_scope.cancel()
                lock.release()
            assert 0 < len(accepted) < 100
            after = await store.append("c", user("after"))
            contents = [m.content for m in await history(bundle, "c")]
            assert sorted(contents[:-1], key=int) == sorted(accepted, key=int)
            assert contents[-1] == "after"
            assert after.seq == len(accepted) + 1

    async def test_cancelling_the_bundle_fails_queued_writes_explicitly(
        self, tmp_path: Path
    ) -> None:
        """When the bundle's own scope is cancelled, writes still queued are
        failed with StoreClosedError, never left hanging."""
        path = tmp_path / "db"
        queued: list[Pending[Message]] = []
        with trio.CancelScope() as scope:
            async with open_sqlite_storage(path) as bundle:
                with write_lock(path) as lock:
                    first = await bundle.message_store.submit("c", user("first"))
                    await writer_is_stuck()
                    for i in range(5):
                        queued.append(await bundle.message_store.submit("c", user(str(i))))
                    scope.cancel()
                    lock.release()
                    await trio.lowlevel.checkpoint()
        assert (await first.wait()).seq == 1, "the batch in flight was not committed"
        for pending in queued:
            with pytest.raises(StoreClosedError, match=r"^the storage writer stopped before"):
                await pending.wait()


class TestFailedTransactions:
    async def test_a_failed_transaction_fails_its_batch_and_the_writer_goes_on(
        self, tmp_path: Path
    ) -> None:
        """If the writer cannot begin its transaction (another process holds the
        lock past the busy timeout), that batch's callers get a StoreError naming
        the cause and nothing of it is written; once the lock is gone, the same
        bundle writes again."""
        path = tmp_path / "db"
        async with open_sqlite_storage(path, busy_timeout=0.05) as bundle:
            store = bundle.message_store
            await store.append("c", user("kept"))
            with write_lock(path):
                doomed = [await store.submit("c", user(str(i))) for i in range(3)]
                for pending in doomed:
                    with pytest.raises(
                        # Queued behind the first failed batch, the rest fail with it.
                        StoreError,
                        match=r"^the write was not committed: (its batch failed|a write of"
                        r" conversation 'c' queued before it failed) \(Busy",
                    ):
                        await pending.wait()
            assert stats(bundle).running is True
            assert stats(bundle).failed_batches >= 1
            later = await store.append("c", user("later"))
            assert later.seq == 2
            assert [m.content for m in await history(bundle, "c")] == ["kept", "later"]


def test_timestamps_are_utc() -> None:
    """The epoch helpers round-trip microseconds exactly."""
    from agentik.storage._common import from_micros, to_micros

    moment = datetime(2026, 12, 2, 18, 0, 0, 123456, tzinfo=UTC)
    assert from_micros(to_micros(moment)) == moment
    with pytest.raises(ValueError, match=r"must be timezone-aware$"):
        to_micros(datetime(2026, 1, 1))


async def test_load_conversation_is_history_and_notes_in_one_read(tmp_path: Path) -> None:
    """The one-read load (``load_conversation``) returns what get_messages and
    the working-memory list return, the history cut at page_size."""
    async with open_sqlite_storage(tmp_path / "db") as bundle:
        store = bundle.message_store
        for i in range(5):
            await store.append("c", user(f"m{i}"))
        note = await bundle.working_memory_store.append("c", "remember")
        await bundle.working_memory_store.append("other", "not mine")
        snapshot = await store.load_conversation("c", page_size=3)
        assert [m.content for m in snapshot.messages] == ["m0", "m1", "m2"]
        assert snapshot.memory == (note,)
        whole = await store.load_conversation("c")
        assert list(whole.messages) == [m async for m in store.get_messages("c")]
        empty = await store.load_conversation("new")
        assert empty.messages == () and empty.memory == ()
        with pytest.raises(ValueError, match="page_size"):
            await store.load_conversation("c", page_size=0)
