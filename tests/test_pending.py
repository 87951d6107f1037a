"""``Pending``: the accepted-now, committed-later result of a write."""

from __future__ import annotations

import outcome
import pytest
import trio
import trio.testing

from agentik.storage import Pending


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
