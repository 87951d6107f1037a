"""``Pending``: the accepted-now, committed-later result of a write."""

from __future__ import annotations

import outcome
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.storage import Pending, PendingStatistics


async def test_every_waiter_gets_the_value() -> None:
    """Several tasks waiting on one write all wake with its value."""
    pending: Pending[int] = Pending()
    got: list[int] = []

    async def waiter() -> None:
        got.append(await pending.wait())

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert not pending.done
        pending.set(outcome.Value(7))
    assert got == [7, 7, 7]
    assert await pending.wait() == 7
    assert pending.result() == 7


async def test_error_is_raised_to_every_reader_every_time() -> None:
    """A failed write raises its error on each wait (not only the first)."""
    pending: Pending[int] = Pending()
    pending.set(outcome.Error(ValueError("bad row")))
    for _ in range(2):
        with pytest.raises(ValueError, match="bad row"):
            await pending.wait()


async def test_cancelled_waiter_leaves_the_others_waiting() -> None:
    """Cancelling one wait neither resolves nor disturbs the write."""
    pending: Pending[str] = Pending()
    got: list[str] = []

    async def waiter() -> None:
        got.append(await pending.wait())

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as scope:
            nursery.start_soon(waiter)
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()

            async def cancelled_waiter() -> None:
                with trio.CancelScope() as own:
                    own.cancel()
                    await pending.wait()

            await cancelled_waiter()
        assert not scope.cancelled_caught
        pending.set(outcome.Value("ok"))
    assert got == ["ok", "ok"]


async def test_a_write_resolves_once() -> None:
    pending: Pending[int] = Pending.completed(1)
    with pytest.raises(RuntimeError, match="resolved twice"):
        pending.set(outcome.Value(2))


def test_result_before_done_is_refused() -> None:
    with pytest.raises(RuntimeError, match="not finished yet"):
        Pending[int]().result()


async def test_wait_on_a_finished_write_is_a_checkpoint() -> None:
    """Like every trio async function, wait() can be cancelled even when done."""
    pending = Pending.completed(1)
    with trio.CancelScope() as scope:
        scope.cancel()
        await pending.wait()
    assert scope.cancelled_caught


class TestStatistics:
    async def test_counts_the_waiting_tasks_and_resolution(self) -> None:
        """statistics() says how many tasks wait, and whether the write is done."""
        pending: Pending[int] = Pending()
        assert pending.statistics() == PendingStatistics(done=False, tasks_waiting=0)
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(pending.wait)
            await trio.testing.wait_all_tasks_blocked()
            assert pending.statistics() == PendingStatistics(done=False, tasks_waiting=3)
            pending.set_value(1)
            assert pending.statistics() == PendingStatistics(done=True, tasks_waiting=0)

    async def test_a_cancelled_waiter_is_no_longer_counted(self) -> None:
        pending: Pending[int] = Pending()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pending.wait)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(pending.wait)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        assert pending.statistics() == PendingStatistics(done=False, tasks_waiting=0)


@settings(max_examples=80, deadline=None)
@given(
    plan=st.lists(
        st.tuples(st.integers(0, 3), st.none() | st.integers(0, 6)), min_size=1, max_size=6
    ),
    resolve_at=st.integers(0, 6),
    fails=st.booleans(),
)
def test_waiters_cancelled_at_any_point(
    plan: list[tuple[int, int | None]], resolve_at: int, fails: bool
) -> None:
    """Waiters start after a few schedule points; the main task resolves the
    write at one step and cancels some waiters at others (before they wait,
    while parked, after the result came). Each waiter ends exactly once: with
    the one result (or error), or with ``Cancelled`` if it was cancelled
    before the result reached it; nobody is left parked."""

    async def main() -> None:
        pending: Pending[int] = Pending()
        error = ValueError("refused")
        ended: list[object] = []
        scopes = [trio.CancelScope() for _ in plan]

        async def waiter(i: int, delay: int) -> None:
            with scopes[i]:
                for _ in range(delay):
                    await trio.lowlevel.checkpoint()
                try:
                    ended.append((i, await pending.wait()))
                except ValueError as exc:
                    ended.append((i, exc))
                return
            ended.append((i, "cancelled"))

        async with trio.open_nursery() as nursery:
            for i, (delay, _) in enumerate(plan):
                nursery.start_soon(waiter, i, delay)
            for step in range(8):
                if step == resolve_at:
                    if fails:
                        pending.set_error(error)
                    else:
                        pending.set_value(7)
                for i, (_, cancel_at) in enumerate(plan):
                    if cancel_at == step:
                        scopes[i].cancel()
                await trio.lowlevel.checkpoint()
        assert sorted(i for i, _ in ended) == list(range(len(plan)))
        expected = error if fails else 7
        for i, got in ended:
            if got == "cancelled":
                assert plan[i][1] is not None, "a waiter nobody cancelled was cancelled"
            else:
                assert got is expected or got == expected
        assert pending.statistics() == PendingStatistics(done=True, tasks_waiting=0)

    trio.run(main)
