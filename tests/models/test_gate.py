"""FifoGate: at most ``capacity`` slots held, waiters served in arrival order,
a cancelled waiter leaves no trace, every slot freed however its holder leaves.

The property test plays random scripts of arrivals, cancellations of waiters
and releases against a plain list model of the queue, in one ``trio.run``
per script; each step settles with ``wait_all_tasks_blocked`` before the
gate is compared with the model.
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik._errors import ModelBackendError
from agentik._messages import Message, Role
from agentik.models import FifoGate, ModelRequest

REQUEST = ModelRequest(messages=[Message(role=Role.USER, content="hi")])


@attrs.define
class Caller:
    """One task that waits for a slot, holds it until told, then frees it."""

    number: int
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    release: trio.Event = attrs.field(factory=trio.Event)
    granted: bool = False
    finished: bool = False

    async def run(self, gate: FifoGate, grants: list[int]) -> None:
        with self.scope:
            async with gate.slot(REQUEST):
                self.granted = True
                grants.append(self.number)
                await self.release.wait()
        self.finished = True


Step = tuple[str, int]
steps = st.lists(
    st.tuples(
        st.sampled_from(["arrive", "arrive", "cancel", "release", "cancel_holder"]),
        st.integers(0, 50),
    ),
    max_size=60,
)


async def play(capacity: int, script: list[Step]) -> None:
    gate = FifoGate(capacity)
    grants: list[int] = []
    waiting: list[Caller] = []  # the model: arrival order
    holding: list[Caller] = []
    expected: list[int] = []
    async with trio.open_nursery() as nursery:
        for number, (action, pick) in enumerate(script):
            if action == "arrive":
                caller = Caller(number)
                nursery.start_soon(caller.run, gate, grants)
                waiting.append(caller)
            elif action == "cancel" and waiting:
                waiting.pop(pick % len(waiting)).scope.cancel()
            elif action in ("release", "cancel_holder") and holding:
                holder = holding.pop(pick % len(holding))
                if action == "release":
                    holder.release.set()
                else:  # a holder cancelled mid-call frees its slot too
                    holder.scope.cancel()
            while waiting and len(holding) < capacity:  # the model grants the oldest
                holding.append(waiting.pop(0))
                expected.append(holding[-1].number)
            await trio.testing.wait_all_tasks_blocked()
            assert grants == expected
            assert gate.in_use == len(holding) <= capacity
            assert gate.waiting == len(waiting)
        nursery.cancel_scope.cancel()  # holders and waiters alike
    assert gate.in_use == 0
    assert gate.waiting == 0


@given(st.integers(1, 4), steps)
@settings(deadline=None)
def test_fifo_bounded_and_cancel_safe(capacity: int, script: list[Step]) -> None:
    """Grants follow arrival order among callers not cancelled; never more than
    ``capacity`` held; cancelled waiters and holders leave nothing behind."""
    trio.run(play, capacity, script)


@pytest.mark.parametrize("capacity", [0, -1, True, 1.5, "8"])
def test_capacity_must_be_a_positive_integer(capacity: object) -> None:
    """A size that is not an integer >= 1 is refused, naming the setting."""
    with pytest.raises(ModelBackendError, match=r"^max_connections must be an integer >= 1, got "):
        FifoGate(capacity)  # type: ignore[arg-type]


async def test_a_slot_is_freed_when_its_holder_raises() -> None:
    """An error inside the ``async with`` frees the slot for the next caller."""
    gate = FifoGate(1)
    with pytest.raises(ValueError, match="boom"):
        async with gate.slot(REQUEST):
            raise ValueError("boom")
    assert gate.in_use == 0
    with trio.fail_after(1):
        async with gate.slot(REQUEST):
            assert gate.in_use == 1


async def test_thousands_of_waiters_cost_nothing_per_other_waiter() -> None:
    """A release hands its slot to the oldest waiter directly: the scheduler
    runs one task per hand-over, not one per waiter (no wake-fail-requeue)."""

    class Steps(trio.abc.Instrument):
        count = 0

        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            self.count += 1

    gate = FifoGate(1)
    release = trio.Event()
    grants: list[int] = []
    steps = Steps()

    async def call(number: int) -> None:
        async with gate.slot(REQUEST):
            grants.append(number)
            if number == 0:
                await release.wait()

    async with trio.open_nursery() as nursery:
        for number in range(2000):  # one at a time: trio starts tasks in random order
            nursery.start_soon(call, number)
            await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.add_instrument(steps)
        release.set()
    trio.lowlevel.remove_instrument(steps)
    assert grants == list(range(2000))
    assert steps.count < 5 * 2000  # a handful of steps per call, whatever the queue's length
