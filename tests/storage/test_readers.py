"""The reader pool: group reads, each caller its own result, cancellation, close."""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role, open_sqlite_storage
from agentik.storage import StoreClosedError
from agentik.storage._readers import MAX_BATCH, ReaderPool


async def _serving(pool: ReaderPool[object], body: Callable[[], object]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.run)
        try:
            await body()  # type: ignore[misc]
        finally:
            pool.refuse()


async def test_a_burst_of_reads_takes_few_thread_hops(tmp_path: os.PathLike[str]) -> None:
    """1,000 conversations opening at once: their history reads share hops."""
    async with open_sqlite_storage(os.path.join(tmp_path, "db")) as storage:
        store = storage.message_store
        for i in range(20):
            await store.append(f"c{i % 5}", Message(Role.USER, f"m{i}"))
        pool = store._readers  # type: ignore[attr-defined]
        before = pool.hops
        results: dict[int, int] = {}

        async def load(i: int) -> None:
            snapshot = await store.load_conversation(f"c{i % 7}")  # type: ignore[attr-defined]
            results[i] = len(snapshot.messages)

        async with trio.open_nursery() as nursery:
            for i in range(1000):
                nursery.start_soon(load, i)
        hops = pool.hops - before
        assert hops <= 1000 // MAX_BATCH + 2 * len(pool.connections)
        # each caller got its own conversation's history: c0..c4 hold 4 each, c5, c6 none
        assert results == {i: 4 if i % 7 < 5 else 0 for i in range(1000)}


async def test_each_error_goes_to_its_own_caller() -> None:
    pool: ReaderPool[object] = ReaderPool([object()], max_batch=8)
    outcomes: dict[int, object] = {}

    def query(i: int) -> Callable[[object], int]:
        def run(_: object) -> int:
            if i % 3 == 0:
                raise ValueError(f"bad {i}")
            return i * 10

        return run

    async def reader(i: int) -> None:
        try:
            outcomes[i] = await pool.read(query(i))
        except ValueError as error:
            outcomes[i] = str(error)

    async def body() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(reader, i)

    await _serving(pool, body)
    assert outcomes == {i: f"bad {i}" if i % 3 == 0 else i * 10 for i in range(30)}
    assert pool.hops <= 30 // 8 + 2


async def test_a_read_runs_in_a_worker_thread_not_the_event_loop() -> None:
    pool: ReaderPool[object] = ReaderPool([object(), object()])
    seen: list[threading.Thread] = []

    async def body() -> None:
        await pool.read(lambda _: seen.append(threading.current_thread()))

    await _serving(pool, body)
    assert seen and seen[0] is not threading.main_thread()


async def test_a_cancelled_caller_skips_its_read_and_leaves_the_others() -> None:
    gate = threading.Event()
    ran: list[str] = []
    pool: ReaderPool[object] = ReaderPool([object()], max_batch=1)

    def blocking(_: object) -> str:
        gate.wait(10)
        ran.append("first")
        return "first"

    def named(name: str) -> Callable[[object], str]:
        def run(_: object) -> str:
            ran.append(name)
            return name

        return run

    got: dict[str, str] = {}

    async def body() -> None:
        async with trio.open_nursery() as nursery:

            async def read(name: str, query: Callable[[object], str]) -> None:
                got[name] = await pool.read(query)

            nursery.start_soon(read, "first", blocking)
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0.01) as scope:  # queued behind "first": cancelled
                await pool.read(named("cancelled"))
            assert scope.cancelled_caught
            nursery.start_soon(read, "last", named("last"))
            await trio.testing.wait_all_tasks_blocked()
            gate.set()

    await _serving(pool, body)
    assert got == {"first": "first", "last": "last"}
    assert ran == ["first", "last"]


def _gated_reader(
    pool: ReaderPool[object], gate: threading.Event, outcomes: list[object]
) -> Callable[[str], Awaitable[None]]:
    """A task body that reads ``name`` once ``gate`` opens, recording the
    result or a ``StoreClosedError``'s text in ``outcomes``."""

    async def read(name: str) -> None:
        def run(_: object) -> str:
            gate.wait(10)
            return name

        try:
            outcomes.append(await pool.read(run))
        except StoreClosedError as error:
            outcomes.append(str(error))

    return read


async def test_after_refuse_reads_fail_and_what_was_queued_still_runs() -> None:
    gate = threading.Event()
    pool: ReaderPool[object] = ReaderPool([object()], max_batch=1)
    got: list[object] = []
    read = _gated_reader(pool, gate, got)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.run)
        nursery.start_soon(read, "a")
        nursery.start_soon(read, "b")
        await trio.testing.wait_all_tasks_blocked()
        pool.refuse()
        with pytest.raises(StoreClosedError):
            await pool.read(lambda _: "late")
        gate.set()
    assert len(got) == 2 and set(got) == {"a", "b"}


async def test_a_cancelled_read_raises_before_queueing() -> None:
    pool: ReaderPool[object] = ReaderPool([object()])
    ran: list[int] = []

    async def body() -> None:
        with trio.CancelScope() as scope:
            scope.cancel()
            await pool.read(lambda _: ran.append(1))
        await trio.testing.wait_all_tasks_blocked()

    await _serving(pool, body)
    assert ran == []


@settings(max_examples=60, deadline=None)
@given(
    plan=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=60),
    connections=st.integers(1, 4),
    max_batch=st.integers(1, 40),
)
def test_every_caller_gets_exactly_its_own_outcome(
    plan: list[tuple[bool, bool]], connections: int, max_batch: int
) -> None:
    """Random failing reads and random cancellations: every caller that waits
    hears its own result once; a cancelled one hears Cancelled; the pool stays up."""

    async def main() -> None:
        pool: ReaderPool[list[int]] = ReaderPool(
            [[] for _ in range(connections)], max_batch=max_batch
        )
        outcomes: dict[int, object] = {}

        def query(i: int, fails: bool) -> Callable[[list[int]], int]:
            def run(connection: list[int]) -> int:
                connection.append(i)
                if fails:
                    raise KeyError(i)
                return i

            return run

        async def reader(i: int, fails: bool, cancel: bool) -> None:
            with trio.CancelScope() as scope:
                if cancel:
                    scope.cancel()
                try:
                    outcomes[i] = await pool.read(query(i, fails))
                except KeyError as error:
                    outcomes[i] = ("error", error.args[0])
            if scope.cancelled_caught:
                outcomes[i] = "cancelled"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pool.run)
            async with trio.open_nursery() as readers:
                for i, (fails, cancel) in enumerate(plan):
                    readers.start_soon(reader, i, fails, cancel)
            pool.refuse()
        expected = {
            i: "cancelled" if cancel else ("error", i) if fails else i
            for i, (fails, cancel) in enumerate(plan)
        }
        assert outcomes == expected
        ran = sorted(i for connection in pool.connections for i in connection)
        assert ran == [i for i, (_, cancel) in enumerate(plan) if not cancel]

    trio.run(main)


async def _read_all_together(
    group: Callable[[object, list[int]], list[int]], count: int
) -> dict[int, object]:
    """``count`` reads of ``group`` at once, through a one-connection pool:
    each one's result, or ``"error …"`` for a ValueError."""
    pool: ReaderPool[object] = ReaderPool([object()], max_batch=64)
    got: dict[int, object] = {}

    async def one(i: int) -> None:
        try:
            got[i] = await pool.read_together(group, i)
        except ValueError as error:
            got[i] = f"error {error}"

    async def body() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(one, i)

    await _serving(pool, body)
    return got


async def test_reads_together_share_one_call_and_keep_their_own_results() -> None:
    calls: list[list[int]] = []

    def group(_: object, arguments: list[int]) -> list[int]:
        calls.append(list(arguments))
        return [a * 10 for a in arguments]

    assert await _read_all_together(group, 50) == {i: i * 10 for i in range(50)}
    assert len(calls) <= 2  # a burst: one call per hop
    assert sorted(a for call in calls for a in call) == list(range(50))


async def test_a_failing_group_is_run_again_one_by_one() -> None:
    """One bad argument fails its own read only; the others are answered."""

    def group(_: object, arguments: list[int]) -> list[int]:
        if 13 in arguments:
            raise ValueError("13")
        return arguments

    got = await _read_all_together(group, 20)
    assert got == {i: "error 13" if i == 13 else i for i in range(20)}


async def test_a_group_giving_the_wrong_count_fails_rather_than_misanswers() -> None:
    def group(_: object, arguments: list[int]) -> list[int]:
        return arguments[:1]  # a bug: drops results

    # one by one, each gets its own
    assert await _read_all_together(group, 5) == {i: i for i in range(5)}


async def test_reads_queued_when_the_readers_are_cancelled_fail_rather_than_hang() -> None:
    gate = threading.Event()
    pool: ReaderPool[object] = ReaderPool([object()], max_batch=1)
    outcomes: list[object] = []
    read = _gated_reader(pool, gate, outcomes)
    with trio.fail_after(10):  # a regression hangs the queued caller: fail, not hang
        await _cancel_the_readers_with_a_read_queued(pool, read, gate)
    assert outcomes == ["running", "the storage bundle closed before this read ran"]
    with pytest.raises(StoreClosedError):
        await pool.read(lambda _: "late")


async def _cancel_the_readers_with_a_read_queued(
    pool: ReaderPool[object], read: Callable[[str], Awaitable[None]], gate: threading.Event
) -> None:
    async with trio.open_nursery() as callers:
        async with trio.open_nursery() as readers:
            readers.start_soon(pool.run)
            callers.start_soon(read, "running")
            await trio.testing.wait_all_tasks_blocked()
            callers.start_soon(read, "queued")
            await trio.testing.wait_all_tasks_blocked()
            readers.cancel_scope.cancel()  # the bundle's body failed
            gate.set()  # the hop under way finishes, shielded
