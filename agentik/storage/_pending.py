"""``Pending``: a write a store has accepted and will commit later.

Splitting "accepted" from "committed" lets a conversation submit each message
as it happens and wait once, at the end of its turn, for all of them.
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

    __slots__ = ("_done", "_outcome")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._outcome: outcome.Outcome[T] | None = None

    @classmethod
    def completed(cls, value: T) -> Pending[T]:
        """A write that is already committed (stores that apply at once)."""
        pending: Pending[T] = cls()
        pending.set(outcome.Value(value))
        return pending

    def set(self, result: outcome.Outcome[T]) -> None:
        """Record the write's result and wake its waiters (the store calls this)."""
        if self._outcome is not None:
            raise RuntimeError("a pending write was resolved twice")
        self._outcome = result
        self._done.set()

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
        """Wait until the write is committed; return its result or raise its error."""
        await self._done.wait()
        # Not ``unwrap()``: an Outcome unwraps once, and a result may be read
        # by several waiters, or again after a failure.
        return self.result()
