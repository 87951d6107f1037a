"""``Pending``: a write a store has accepted and will commit later.

Splitting "accepted" from "committed" lets a conversation submit each message
as it happens and wait once, at the end of its turn, for all of them.

It is on the hot path of every write (one per message), so it is as cheap as
trio allows: no ``trio.Event`` and no stored ``Outcome`` per write; the one
waiting task (the usual case; several are kept in a list) is parked directly
and rescheduled with the result itself, so it wakes holding its value. It is
resolved and awaited only from trio tasks of one run (the writer resolves it
after its thread returns), never from another thread.

It is agentik's one waiting primitive for a result that comes later: every
store's writes, the shared writer's ``append`` (which once parked its caller
on the request itself) and each turn's reply to its caller. It keeps trio's
rules: ``wait()`` is a checkpoint on every call, a cancelled ``wait()`` leaves
the write and the other waiters alone, and ``statistics()`` says who waits.
"""

from __future__ import annotations

from typing import Generic, TypeVar, final

import attrs
import outcome
import trio

T = TypeVar("T")

_Waiters = trio.lowlevel.Task | list[trio.lowlevel.Task] | None


@final
@attrs.frozen(kw_only=True)
class PendingStatistics:
    """What ``Pending.statistics()`` reports (as trio's ``statistics()`` do)."""

    done: bool
    """The write is resolved (committed, or failed)."""
    tasks_waiting: int
    """Tasks blocked in ``wait()``."""


@final
class Pending(Generic[T]):
    """The future result of one accepted write.

    Cancelling ``wait()`` does not cancel the write: once accepted, it is
    committed or fails on its own.
    """

    __slots__ = ("_done", "_error", "_value", "_waiters")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._waiters: _Waiters = None

    @classmethod
    def completed(cls, value: T) -> Pending[T]:
        """A write that is already committed (stores that apply at once)."""
        pending: Pending[T] = cls()
        pending._done = True
        pending._value = value
        return pending

    @classmethod
    def failed(cls, error: BaseException) -> Pending[T]:
        """A write already refused (stores that check before they queue)."""
        pending: Pending[T] = cls()
        pending.set_error(error)
        return pending

    def set(self, result: outcome.Outcome[T]) -> None:
        """Record the write's result and wake its waiters (the store calls this)."""
        if isinstance(result, outcome.Value):
            self.set_value(result.value)
        else:
            assert isinstance(result, outcome.Error)
            self.set_error(result.error)

    def set_value(self, value: T) -> None:
        """``set(outcome.Value(value))``, without building the outcome."""
        if self._done:
            raise RuntimeError("a pending write was resolved twice")
        self._done = True
        self._value = value
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            # Each waiter gets its own Value: trio unwraps it, once, in that task.
            if isinstance(waiters, list):
                for task in waiters:
                    trio.lowlevel.reschedule(task, outcome.Value(value))
            else:
                trio.lowlevel.reschedule(waiters, outcome.Value(value))

    def set_error(self, error: BaseException) -> None:
        """``set(outcome.Error(error))``, without building the outcome."""
        if self._done:
            raise RuntimeError("a pending write was resolved twice")
        self._done = True
        self._error = error
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for task in waiters if isinstance(waiters, list) else (waiters,):
                trio.lowlevel.reschedule(task, outcome.Error(error))

    @property
    def done(self) -> bool:
        return self._done

    def statistics(self) -> PendingStatistics:
        """Whether the write is resolved, and how many tasks wait for it."""
        waiters = self._waiters
        waiting = 0 if waiters is None else len(waiters) if isinstance(waiters, list) else 1
        return PendingStatistics(done=self._done, tasks_waiting=waiting)

    def result(self) -> T:
        """The result of a finished write (raises its error); the write must be done."""
        if not self._done:
            raise RuntimeError("the write is not finished yet; await wait() instead")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set: done without an error

    async def wait(self) -> T:
        """Wait until the write is committed; return its result or raise its error.

        A checkpoint on every call, as trio's own waits are: a wait on a
        finished write still yields and raises ``Cancelled`` in a cancelled
        scope. A result may be read by several waiters, or again after a failure.
        """
        if self._done:
            await trio.lowlevel.checkpoint()
            return self.result()
        task = trio.lowlevel.current_task()
        waiters = self._waiters
        if waiters is None:
            self._waiters = task
        elif isinstance(waiters, list):
            waiters.append(task)
        else:
            self._waiters = [waiters, task]

        def abort(_: object) -> trio.lowlevel.Abort:
            self._forget(task)
            return trio.lowlevel.Abort.SUCCEEDED

        value: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return value

    def _forget(self, task: trio.lowlevel.Task) -> None:
        waiters = self._waiters
        if isinstance(waiters, list):
            waiters.remove(task)
        elif waiters is task:
            self._waiters = None
