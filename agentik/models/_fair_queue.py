"""Waiting items served fairly across keys: deficit round robin. Pure.

Each key (an owner, or a conversation) has a FIFO of items, each with a cost
(the tokens a model call is expected to take, or 1 a request). Keys with
items take turns in round-robin order; a key's turn adds ``quantum × weight``
to its deficit, and it is served while its first item costs no more than its
deficit (Shreedhar & Varghese, 1995). Over any stretch where keys keep items
waiting, each gets cost in proportion to its weight, however many items it
queues: one conversation or owner sending 100 times more than the others
gets its share, not 100 shares.

Invariants:

- ``head`` is the item ``pop`` returns next, and calling it again without a
  change returns the same item (it only tops up deficits and rotates).
- A key whose last item was served ends its turn and keeps what is left of
  its deficit until its next turn: back by then (a conversation that sends
  its next turn as soon as it has its answer), it goes on with it; still
  empty, it leaves the round and its deficit is dropped. So a key is never
  short-changed for having nothing queued for a moment, and an idle key
  hoards nothing (at most one quantum, for at most one round).
- ``quantum`` is the mean cost pushed so far, so a typical item is served in
  one turn of its key, and choosing the next item costs O(1) amortized.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar, final

import attrs

T = TypeVar("T")


@attrs.define(eq=False)
class _Flow(Generic[T]):
    key: str
    weight: float
    items: deque[tuple[T, float]] = attrs.Factory(deque)
    deficit: float = 0.0
    topped: bool = False
    """Its current turn's quantum was added."""
    cost: float = 0.0
    """Its items' costs, summed."""


@final
class FairQueue(Generic[T]):
    """Items by key, served by deficit round robin."""

    __slots__ = (
        "_active",
        "_busy",
        "_busy_weight",
        "_cost",
        "_costs_pushed",
        "_count",
        "_flows",
        "_pushed",
        "_weight",
    )

    def __init__(self, weight: Callable[[str], float]) -> None:
        self._weight = weight
        self._flows: dict[str, _Flow[T]] = {}
        self._active: deque[_Flow[T]] = deque()
        """Keys in the round (with items, or emptied since their last turn), in
        round-robin order; the first has the turn."""
        self._busy = 0
        """Keys with items."""
        self._busy_weight = 0.0
        self._count = 0
        self._cost = 0.0
        self._pushed = 0
        self._costs_pushed = 0.0

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    @property
    def cost(self) -> float:
        """Costs of every waiting item, summed."""
        return self._cost

    @property
    def active_weight(self) -> float:
        """Weights of the keys with items, summed."""
        return self._busy_weight

    @property
    def keys(self) -> int:
        """Keys with items."""
        return self._busy

    def queued(self, key: str) -> tuple[int, float]:
        """``(items, their cost)`` waiting for ``key``."""
        flow = self._flows.get(key)
        return (0, 0.0) if flow is None else (len(flow.items), flow.cost)

    @property
    def quantum(self) -> float:
        return self._costs_pushed / self._pushed if self._pushed else 1.0

    def push(self, key: str, item: T, cost: float, *, front: bool = False) -> None:
        """Queue ``item`` for ``key``: last, or ``front`` (a call retried after
        the provider refused it keeps its place)."""
        flow = self._flows.get(key)
        if flow is None:
            flow = self._flows[key] = _Flow(key, self._weight(key))
            self._active.append(flow)
        if not flow.items:
            self._busy += 1
            self._busy_weight += flow.weight
        if front:
            flow.items.appendleft((item, cost))
        else:
            flow.items.append((item, cost))
        flow.cost += cost
        self._count += 1
        self._cost += cost
        self._pushed += 1
        self._costs_pushed += cost

    def head(self) -> T | None:
        """The item served next, or None when nothing waits."""
        flow = self._select()
        return None if flow is None else flow.items[0][0]

    def pop(self) -> T:
        """Serve the next item (``head``); raises ``IndexError`` when empty."""
        flow = self._select()
        if flow is None:
            raise IndexError("pop from an empty FairQueue")
        item, cost = flow.items.popleft()
        flow.deficit -= cost
        self._took(flow, cost)
        if not flow.items:  # its turn is over; what is left of its deficit stays
            flow.topped = False
            self._active.rotate(-1)
        return item

    def refund(self, key: str, amount: float) -> None:
        """Give ``key`` back ``amount`` of what it was charged (negative: charge
        it more), while it is in the round: its items cost what they used,
        not what they were estimated to. A key out of the round is owed nothing."""
        flow = self._flows.get(key)
        if flow is not None:
            flow.deficit += amount

    def remove(self, key: str, item: T) -> bool:
        """Take ``item`` out of ``key``'s queue (a waiter cancelled); False if absent."""
        flow = self._flows.get(key)
        if flow is None:
            return False
        for index, (queued, cost) in enumerate(flow.items):
            if queued is item:
                del flow.items[index]
                self._took(flow, cost)
                return True
        return False

    def _took(self, flow: _Flow[T], cost: float) -> None:
        flow.cost -= cost
        self._count -= 1
        self._cost -= cost
        if not flow.items:
            self._busy -= 1
            self._busy_weight -= flow.weight
            if not self._busy:
                self._busy_weight = 0.0  # no float dust left behind

    def _select(self) -> _Flow[T] | None:
        active = self._active
        quantum = self.quantum
        while self._count:
            flow = active[0]
            if not flow.items:  # empty since its last turn: out of the round
                active.popleft()
                del self._flows[flow.key]
                continue
            if not flow.topped:
                flow.deficit += quantum * flow.weight
                flow.topped = True
            if flow.items[0][1] <= flow.deficit:
                return flow
            flow.topped = False  # its turn is over; the next key's begins
            active.rotate(-1)
        return None
