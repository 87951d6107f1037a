"""The SQLite writer's fast paths, checked against the slow, obvious ones.

- ``RequestQueue`` keeps a bounded trio memory channel's semantics (FIFO,
  backpressure, cancellation queues nothing, close refuses waiting senders);
- a run of appends inserted with multi-row statements, at every chunk
  boundary, stores exactly what one-by-one appends would, and a failure in
  any chunk rolls the run back and fails only the culprit;
- an error that ends the transaction early fails the whole batch;
- the ``tool_calls`` encoding equals cattrs' and the stored ``Message`` is
  built with ``Message``'s fields in their declared order;
- the shared writer's appends, cancelled at any step, lose no acknowledged
  write and store none twice (SQLite and PostgreSQL).
"""

from __future__ import annotations

import contextlib
import json
import threading
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import apsw
import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role, StoreError, TokenUsage, ToolCall
from agentik._serde import converter
from agentik.storage import (
    CommitInDoubt,
    DuplicateKeyError,
    Pending,
    StorageBundle,
    StoreClosedError,
    open_postgres_storage,
    open_sqlite_storage,
    writer_stats,
)
from agentik.storage._common import utc_now
from agentik.storage._queue import RequestQueue
from agentik.storage._sql_stores import SqlMessageStore
from agentik.storage._writer import LOST_IN_COMMIT, BatchFailed, Outcome, Writer
from agentik.storage.sqlite._queries import (
    _INSERT_ROWS,
    LARGEST_CHUNK,
    Session,
    tool_calls_json,
)
from tests.postgres import fresh_schema
from tests.storage.test_sqlite import history, write_lock, writer_is_stuck
from tests.strategies import tool_calls


class TestRequestQueue:
    async def test_fifo_up_to_capacity_then_senders_wait(self) -> None:
        """Items come out in order; past capacity a sender waits, and its item
        follows the buffered ones once the consumer makes room."""
        queue: RequestQueue[int] = RequestQueue(2)
        assert queue.put_nowait(1) and queue.put_nowait(2)
        assert not queue.put_nowait(3)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queue.put, 3)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(queue.put, 4)
            await trio.testing.wait_all_tasks_blocked()
            assert len(queue) == 4
            assert not queue.put_nowait(5), "a new sender overtook the waiting ones"
            assert await queue.take(1) == [1]
            assert await queue.take(10) == [2, 3, 4]
        assert len(queue) == 0

    async def test_a_cancelled_sender_queues_nothing(self) -> None:
        queue: RequestQueue[str] = RequestQueue(1)
        queue.put_nowait("kept")
        with trio.move_on_after(1):
            await queue.put("dropped")
        assert len(queue) == 1
        assert await queue.take(10) == ["kept"]

    async def test_capacity_zero_hands_each_item_to_the_consumer(self) -> None:
        queue: RequestQueue[str] = RequestQueue(0)
        assert not queue.put_nowait("x")
        accepted: list[str] = []

        async def sender(item: str) -> None:
            await queue.put(item)
            accepted.append(item)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender, "a")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(sender, "b")
            await trio.testing.wait_all_tasks_blocked()
            assert accepted == []
            assert await queue.take(1) == ["a"]
            await trio.testing.wait_all_tasks_blocked()
            assert accepted == ["a"]
            assert await queue.take(1) == ["b"]
        assert accepted == ["a", "b"]

    async def test_a_sender_cancelled_after_waking_the_consumer_is_not_a_close(self) -> None:
        """With capacity 0 a sender wakes the waiting consumer; cancelled before
        the consumer runs, it takes its item back. The consumer must wait on,
        not return [] (which says "closed": the writer stopped for good)."""
        queue: RequestQueue[str] = RequestQueue(0)
        taken: list[list[str]] = []

        async def consumer() -> None:
            taken.append(await queue.take(10))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await trio.testing.wait_all_tasks_blocked()
            with trio.CancelScope() as scope:
                scope.cancel()  # put wakes the consumer, then its wait is aborted
                await queue.put("gone")
            assert len(queue) == 0
            await trio.testing.wait_all_tasks_blocked()
            assert taken == [], "take returned though nothing was queued and nothing closed"
            nursery.start_soon(queue.put, "next")
        assert taken == [["next"]]

    async def test_take_waits_for_the_first_item(self) -> None:
        queue: RequestQueue[int] = RequestQueue(5)
        taken: list[list[int]] = []

        async def consumer() -> None:
            taken.append(await queue.take(10))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await trio.testing.wait_all_tasks_blocked()
            queue.put_nowait(1)
            queue.put_nowait(2)
        assert taken == [[1, 2]]

    async def test_a_cancelled_take_leaves_the_queue_usable(self) -> None:
        queue: RequestQueue[int] = RequestQueue(5)
        with trio.move_on_after(1):
            await queue.take(10)
        assert queue.put_nowait(1)
        assert await queue.take(10) == [1]

    async def test_take_is_a_cancellation_point_even_with_items_queued(self) -> None:
        queue: RequestQueue[int] = RequestQueue(5)
        queue.put_nowait(1)
        with trio.CancelScope() as scope:
            scope.cancel()
            await queue.take(10)
        assert scope.cancelled_caught
        assert len(queue) == 1

    async def test_close_refuses_waiting_senders_and_drains(self) -> None:
        """Closed: waiting senders are refused, what was queued still comes
        out, then take returns [] and put_nowait refuses."""
        queue: RequestQueue[int] = RequestQueue(1)
        queue.put_nowait(1)
        refused: list[int] = []

        async def sender() -> None:
            with pytest.raises(trio.ClosedResourceError):
                await queue.put(2)
            refused.append(2)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender)
            await trio.testing.wait_all_tasks_blocked()
            queue.close()
        assert refused == [2]
        assert await queue.take(10) == [1]
        assert await queue.take(10) == []
        with pytest.raises(trio.ClosedResourceError):
            queue.put_nowait(3)

    async def test_close_wakes_a_waiting_consumer(self) -> None:
        queue: RequestQueue[int] = RequestQueue(1)
        taken: list[list[int]] = []

        async def consumer() -> None:
            taken.append(await queue.take(10))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer)
            await trio.testing.wait_all_tasks_blocked()
            queue.close()
        assert taken == [[]]

    async def test_drain_hands_back_what_is_queued(self) -> None:
        queue: RequestQueue[int] = RequestQueue(2)
        queue.put_nowait(1)
        queue.put_nowait(2)
        assert queue.drain() == [1, 2]
        assert len(queue) == 0
        with pytest.raises(trio.ClosedResourceError):
            await queue.put(3)


def varied(i: int) -> Message:
    """Messages with every optional column, in turn."""
    if i % 4 == 1:
        calls = (ToolCall(f"call-{i}", "search", '{"q": "é \\" \\u0000"}'),)
        return Message(Role.ASSISTANT, f"m{i}", tool_calls=calls, usage=TokenUsage(i, 2 * i))
    if i % 4 == 2:
        return Message(Role.TOOL, f"result {i} ✓", tool_call_id=f"call-{i - 1}")
    return Message(Role.USER, f"m{i}" * (i % 7))


async def submit_in_one_batch(
    bundle: StorageBundle, path: Path, requests: list[tuple[str, Message, str | None]]
) -> list[Pending[Message]]:
    """Queue ``requests`` behind a stuck writer so they commit as one batch."""
    store = bundle.message_store
    with write_lock(path) as lock:
        blocker = await store.submit("blocker", varied(0))
        await writer_is_stuck()
        pendings = [
            await store.submit(conversation, message, idempotency_key=key)
            for conversation, message, key in requests
        ]
        lock.release()
        await blocker.wait()
        for pending in pendings:
            with contextlib.suppress(StoreError):
                await pending.wait()
    return pendings


class TestRunsOfAppends:
    @pytest.mark.parametrize(
        "size", [2, 3, LARGEST_CHUNK - 1, LARGEST_CHUNK, LARGEST_CHUNK + 1, 2 * LARGEST_CHUNK + 7]
    )
    async def test_a_run_stores_what_one_by_one_appends_would(
        self, size: int, tmp_path: Path
    ) -> None:
        """Every chunk boundary: one batch, gapless seqs per conversation, and
        each stored message, as returned and as read back, is its input with
        its seq and the batch's timestamp."""
        path = tmp_path / "db"
        requests = [(f"c{i % 3}", varied(i), f"k{i}" if i % 5 == 0 else None) for i in range(size)]
        async with open_sqlite_storage(path, max_batch=4096, queue_size=4096) as bundle:
            before = writer_stats(bundle)
            pendings = await submit_in_one_batch(bundle, path, requests)
            after = writer_stats(bundle)
            assert before is not None and after is not None
            assert after.batches - before.batches == 2  # the blocker's, then this run's
            assert after.last_batch_size == size
            stored = [p.result() for p in pendings]
            created = {m.created_at for m in stored}
            assert len(created) == 1
            for (_, message, _), result in zip(requests, stored, strict=True):
                assert result == attrs.evolve(message, seq=result.seq, created_at=result.created_at)
            for c in range(3):
                mine = [
                    m
                    for (conversation, _, _), m in zip(requests, stored, strict=True)
                    if conversation == f"c{c}"
                ]
                assert [m.seq for m in mine] == list(range(1, len(mine) + 1))
                assert await history(bundle, f"c{c}") == mine

    async def test_a_failure_in_a_later_chunk_fails_only_its_request(self, tmp_path: Path) -> None:
        """A duplicate idempotency key past the first chunk: the run is rolled
        back and replayed one by one; only the duplicate fails, every other
        append commits in the same batch with gapless seqs."""
        path = tmp_path / "db"
        size = LARGEST_CHUNK + 100
        culprit = LARGEST_CHUNK + 40
        async with open_sqlite_storage(path, max_batch=4096, queue_size=4096) as bundle:
            await bundle.message_store.append("c", varied(3), idempotency_key="used")
            requests = [("c", varied(i), "used" if i == culprit else None) for i in range(size)]
            pendings = await submit_in_one_batch(bundle, path, requests)
            with pytest.raises(DuplicateKeyError, match=r"^idempotency key 'used' was already"):
                pendings[culprit].result()
            kept = [p.result() for i, p in enumerate(pendings) if i != culprit]
            assert [m.seq for m in kept] == list(range(2, size + 1))
            assert (await history(bundle, "c"))[1:] == kept
            stats = writer_stats(bundle)
            assert stats is not None and stats.last_batch_size == size

    async def test_a_value_sqlite_refuses_fails_alone(self, tmp_path: Path) -> None:
        """An integer SQLite cannot store fails its own append in a run."""
        path = tmp_path / "db"
        huge = Message(Role.ASSISTANT, "x", usage=TokenUsage(2**70, 0))
        requests = [("c", varied(i), None) for i in range(10)]
        requests[6] = ("c", huge, None)
        async with open_sqlite_storage(path) as bundle:
            pendings = await submit_in_one_batch(bundle, path, requests)
            with pytest.raises(StoreError, match=r"^storage write failed: OverflowError"):
                pendings[6].result()
            assert [p.result().seq for i, p in enumerate(pendings) if i != 6] == list(range(1, 10))

    async def test_a_role_that_is_not_a_role_is_refused_before_it_is_queued(
        self, tmp_path: Path
    ) -> None:
        async with open_sqlite_storage(tmp_path / "db") as bundle:
            store = bundle.message_store
            bad = Message("user", "x")  # type: ignore[arg-type]
            with pytest.raises(StoreError, match=r"^message role must be a Role, got 'user'$"):
                await store.append("c", bad)
            with pytest.raises(StoreError, match=r"^message role must be a Role"):
                await store.submit("c", bad)
            assert (await store.append("c", varied(0))).seq == 1
            stats = writer_stats(bundle)
            assert stats is not None and stats.running and stats.failed_writes == 0


class TestTransactionLost:
    async def test_an_error_that_ends_the_transaction_fails_the_whole_batch(
        self, tmp_path: Path
    ) -> None:
        """If a request's error leaves no transaction open (SQLite rolls back by
        itself on some I/O and full-disk errors; here a request ends it on
        purpose), nothing of the batch is written, every caller hears it, and
        no batch-mate is committed on its own afterwards."""
        path = tmp_path / "db"
        async with open_sqlite_storage(path) as bundle:
            store = bundle.message_store
            assert isinstance(store, SqlMessageStore)
            writer = store._writer

            def end_the_transaction(session: Session) -> None:
                session.connection.execute("ROLLBACK")

            with write_lock(path) as lock:
                blocker = await store.submit("c", varied(0))
                await writer_is_stuck()
                before = await store.submit("c", varied(1))
                killer = await writer.submit(end_the_transaction)
                after = await store.submit("c", varied(2))
                lock.release()
                await blocker.wait()
                for pending in (before, killer, after):
                    with pytest.raises(StoreError, match=r"^the write was not committed"):
                        await pending.wait()
            assert await history(bundle, "c") == [blocker.result()]
            assert (await store.append("c", varied(3))).seq == 2
            stats = writer_stats(bundle)
            assert stats is not None and stats.failed_batches == 1 and stats.running


@attrs.define
class SilentEngine:
    """An engine whose batch waits in the writer's thread, as on a server
    that never answers, until the writer interrupts it; then it fails the
    batch as a cut COMMIT does."""

    entered: threading.Event = attrs.Factory(threading.Event)
    interrupted: threading.Event = attrs.Factory(threading.Event)

    def run_batch(self, batch: list[object]) -> Outcome:
        self.entered.set()
        if not self.interrupted.wait(10):  # the test's bug, not a hang
            return Outcome()
        raise BatchFailed(doubt=LOST_IN_COMMIT) from StoreError("the connection was cut")

    def interrupt(self) -> None:
        self.interrupted.set()


class TestCancelledWriter:
    async def test_a_cancelled_writer_interrupts_the_batch_its_thread_waits_on(self) -> None:
        """Cancelled while its batch waits in the thread, the writer tells the
        engine to stop waiting (instead of waiting as long as the database
        does), and the batch's caller hears that its write is in doubt."""
        engine = SilentEngine()
        writer = Writer(engine, clock=utc_now, max_batch=10, queue_size=10)  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            pending = await writer.submit(lambda session: None)
            await trio.to_thread.run_sync(engine.entered.wait)
            nursery.cancel_scope.cancel()
        assert engine.interrupted.is_set()
        with pytest.raises(CommitInDoubt, match="outcome is unknown"):
            await pending.wait()
        with pytest.raises(StoreClosedError):
            await writer.submit(lambda session: None)

    async def test_a_writer_that_stops_by_itself_interrupts_nothing(self) -> None:
        """Closed and drained, the writer ends without interrupting its engine:
        the bundle's later calls (a lease's leave) keep their own bound."""
        engine = SilentEngine()
        writer = Writer(engine, clock=utc_now, max_batch=10, queue_size=10)  # type: ignore[arg-type]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            writer.close()
        assert not engine.interrupted.is_set()


@given(st.lists(tool_calls, min_size=1, max_size=4))
def test_tool_calls_json_is_what_cattrs_gives(calls: list[ToolCall]) -> None:
    expected = json.dumps(converter.unstructure(tuple(calls), tuple[ToolCall, ...]))
    assert tool_calls_json(calls) == expected


def test_message_fields_are_in_the_order_the_writer_builds_them() -> None:
    """The writer builds stored messages positionally (it is a third cheaper):
    adding a field to ``Message`` means updating ``MessageRow.stored``."""
    names = [field.name for field in attrs.fields(Message)]
    assert names == [
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "usage",
        "seq",
        "created_at",
        "parts",
    ]


def test_the_largest_chunk_fits_sqlite_and_the_statement_cache() -> None:
    """Its bindings are within SQLite's limit, and apsw keeps it prepared."""
    connection = apsw.Connection(":memory:")
    assert connection.limit(apsw.SQLITE_LIMIT_VARIABLE_NUMBER, -1) >= LARGEST_CHUNK * 10
    largest = len(_INSERT_ROWS[LARGEST_CHUNK].encode())
    assert largest <= connection.cache_stats()["max_cacheable_bytes"]


_PLANS = st.lists(
    st.tuples(st.sampled_from(["append", "submit"]), st.none() | st.integers(0, 5)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=20, deadline=None)
@given(plan=_PLANS, queue_size=st.integers(0, 3))
def test_appends_cancelled_at_any_point(
    tmp_path_factory: pytest.TempPathFactory,
    plan: list[tuple[str, int | None]],
    queue_size: int,
) -> None:
    """SQLite: see ``_appends_cancelled_at_any_point``."""
    path = tmp_path_factory.mktemp("cancel") / "db"
    trio.run(
        _appends_cancelled_at_any_point, open_sqlite_storage(path, queue_size=queue_size), plan
    )


@settings(max_examples=10, deadline=None)
@given(plan=_PLANS, queue_size=st.integers(0, 3))
def test_appends_cancelled_at_any_point_postgres(
    postgres_dsn: str, plan: list[tuple[str, int | None]], queue_size: int
) -> None:
    """PostgreSQL (the same shared writer, another engine): see
    ``_appends_cancelled_at_any_point``."""
    opened = open_postgres_storage(
        postgres_dsn, schema=fresh_schema(), readers=1, queue_size=queue_size
    )
    trio.run(_appends_cancelled_at_any_point, opened, plan)


async def _appends_cancelled_at_any_point(
    opened: AbstractAsyncContextManager[StorageBundle], plan: list[tuple[str, int | None]]
) -> None:
    """Tasks append (``append``: submit and wait; ``submit`` then ``wait``) to
    one conversation through a small queue, and some are cancelled at a step
    of the main task: before they call, while they wait for room, while they
    wait for the commit. Whatever the step: every acknowledged message is
    stored with the seq it was given, nothing is stored twice, seqs stay
    gapless, and a cancelled write is stored at most once (it may commit:
    accepted writes are not taken back)."""
    async with opened as bundle:
        store = bundle.message_store
        acknowledged: dict[str, int] = {}
        scopes = [trio.CancelScope() for _ in plan]

        async def writer(i: int, how: str) -> None:
            text = f"m{i}"
            with scopes[i]:
                message = Message(Role.USER, text)
                if how == "append":
                    stored = await store.append("c", message)
                else:
                    stored = await (await store.submit("c", message)).wait()
                assert stored.seq is not None
                acknowledged[text] = stored.seq

        async with trio.open_nursery() as nursery:
            for i, (how, _) in enumerate(plan):
                nursery.start_soon(writer, i, how)
            for step in range(6):
                for i, (_, cancel_at) in enumerate(plan):
                    if cancel_at == step:
                        scopes[i].cancel()
                await trio.lowlevel.checkpoint()
        stored = await history(bundle, "c")
    texts = [m.content for m in stored]
    assert len(texts) == len(set(texts)), "a write was stored twice"
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
    by_text = {m.content: m.seq for m in stored}
    for text, seq in acknowledged.items():
        assert by_text.get(text) == seq, f"acknowledged {text!r} is not stored as seq {seq}"
    for i, (_, cancel_at) in enumerate(plan):
        if cancel_at is None:
            assert f"m{i}" in acknowledged
