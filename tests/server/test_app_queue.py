"""AppQueue: the request-body channel between a connection and its app."""

from __future__ import annotations

import trio
import trio.testing

from agentik.server._hypercorn import AppQueue


async def test_items_come_out_in_order_without_waiting_when_there_is_room() -> None:
    queue: AppQueue[int] = AppQueue(3)
    with trio.testing.assert_no_checkpoints():
        for i in range(3):
            await queue.put(i)
        assert [await queue.receive() for _ in range(3)] == [0, 1, 2]


async def test_a_waiting_receiver_gets_the_item_directly() -> None:
    queue: AppQueue[str] = AppQueue(1)
    got: list[str] = []
    async with trio.open_nursery() as nursery:

        async def receive() -> None:
            got.append(await queue.receive())

        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()
        with trio.testing.assert_no_checkpoints():
            await queue.put("body")
            await queue.put("disconnect")  # the buffer still has its one slot
    assert got == ["body"]
    assert await queue.receive() == "disconnect"


async def test_a_full_queue_makes_putters_wait_in_order() -> None:
    queue: AppQueue[int] = AppQueue(2)
    await queue.put(0)
    await queue.put(1)
    putting: list[int] = []
    async with trio.open_nursery() as nursery:

        async def put(i: int) -> None:
            await queue.put(i)
            putting.append(i)

        for i in (2, 3):
            nursery.start_soon(put, i)
            await trio.testing.wait_all_tasks_blocked()
        assert putting == []  # backpressure: both wait for room
        assert await queue.receive() == 0
        await trio.testing.wait_all_tasks_blocked()
        assert putting == [2]
        assert [await queue.receive() for _ in range(3)] == [1, 2, 3]
    assert putting == [2, 3]


async def test_a_cancelled_putter_queued_nothing() -> None:
    queue: AppQueue[int] = AppQueue(1)
    await queue.put(0)
    scope = trio.CancelScope()

    async def put_cancelled() -> None:
        with scope:
            await queue.put(99)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(put_cancelled)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(queue.put, 1)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert [await queue.receive() for _ in range(2)] == [0, 1]
    await queue.put(2)
    assert await queue.receive() == 2


async def test_a_cancelled_receiver_took_nothing() -> None:
    queue: AppQueue[int] = AppQueue(1)
    with trio.CancelScope() as scope:
        scope.cancel()
        await queue.receive()
    assert scope.cancelled_caught
    await queue.put(1)
    assert await queue.receive() == 1


async def test_capacity_zero_hands_each_item_over() -> None:
    queue: AppQueue[int] = AppQueue(0)
    done = trio.Event()
    async with trio.open_nursery() as nursery:

        async def put() -> None:
            await queue.put(7)
            done.set()

        nursery.start_soon(put)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()
        assert await queue.receive() == 7
        await done.wait()
