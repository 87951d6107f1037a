"""``Pending``: a write a store has accepted and will commit later.

Splitting "accepted" from "committed" lets a conversation submit each message
as it happens and wait once, at the end of its turn, for all of them.

It is on the hot path of every write (one per message), so it parks waiting
tasks directly instead of allocating a ``trio.Event`` per write. It is resolved
and awaited only from trio tasks of one run (the writer resolves it after its
thread returns), never from another thread.
"""

from __future__ import annotations

from typing import Generic, TypeVar, final

import outcome
import trio

T = TypeVar("T")


@final
class Pending(Generic[T]):
    """The future result of one accepted write.

    Cancelling ``wait()`` does not cancel the write: once accepted, it is
    committed or fails on its own.
    """

    __slots__ = ("_outcome", "_waiters")

    def __init__(self) -> None:
        self._outcome: outcome.Outcome[T] | None = None
        self._waiters: list[trio.lowlevel.Task] | None = None

    @classmethod
    def completed(cls, value: T) -> Pending[T]:
        """A write that is already committed (stores that apply at once)."""
        pending: Pending[T] = cls()
        pending._outcome = outcome.Value(value)
        return pending

    def set(self, result: outcome.Outcome[T]) -> None:
        """Record the write's result and wake its waiters (the store calls this)."""
        if self._outcome is not None:
            raise RuntimeError("a pending write was resolved twice")
        self._outcome = result
        waiters, self._waiters = self._waiters, None
        if waiters:
            for task in waiters:
                trio.lowlevel.reschedule(task)

    @property
    def done(self) -> bool:
        return self._outcome is not None

    def result(self) -> T:
        """The result of a finished write (raises its error); the write must be done."""
        result = self._outcome
        if isinstance(result, outcome.Value):
            value: T = result.value
            return value
        if isinstance(result, outcome.Error):
            raise result.error
        raise RuntimeError("the write is not finished yet; await wait() instead")

    async def wait(self) -> T:
        """Wait until the write is committed; return its result or raise its error.

        Not ``outcome.unwrap()``: an Outcome unwraps once, and a result may be
        read by several waiters, or again after a failure.
        """
        if self._outcome is not None:
            await trio.lowlevel.checkpoint()
            return self.result()
        task = trio.lowlevel.current_task()
        if self._waiters is None:
            self._waiters = []
        waiters = self._waiters
        waiters.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            waiters.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        return self.result()
