"""The A2A task ledger: what this process knows of tasks beyond stored history.

History stays the source of truth (a task is a turn, ``_views``); the ledger
only remembers which task ids this process is running, cancelled or
created, so GetTask can say WORKING and ListTasks has ids to list, and who
watches a task's updates (a streamed SendMessage, SubscribeToTask). Bounded:
``TASK_LEDGER_SIZE`` entries of each kind, oldest dropped first.

What it asks of the agent, it is given when built (``turn_runs``,
``turn_resumes``): the A2A door builds it from the agent's
``turn_in_progress`` and ``resumes_interrupted``.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterator
from typing import TypeAlias

import attrs
import trio

from agentik._json import JsonObject

TASK_LEDGER_SIZE = 10_000
WATCH_BUFFER = 32
"""Updates one watcher may have unread; a task sends a handful per run (WORKING,
its answer, how it ended), so only a watcher that stopped reading fills it,
and it is then dropped (its stream ends) rather than holding the task back."""

TaskKey: TypeAlias = tuple[str, str]
"""(stored context id, task id): the stored id carries the owner, so two owners'
tasks never share an entry even when their task ids are equal."""
TaskUpdate: TypeAlias = tuple[str | None, JsonObject]
"""What a task run publishes: the state it announces (None: an artifact), and
the A2A StreamResponse result object to send (``_tasks``)."""


def _bounded_add(entries: collections.OrderedDict[TaskKey, None], key: TaskKey) -> None:
    entries[key] = None
    entries.move_to_end(key)
    while len(entries) > TASK_LEDGER_SIZE:
        entries.popitem(last=False)


@attrs.define
class TaskLedger:
    """A2A tasks this process has seen, bounded; history stays the source of truth."""

    running: collections.OrderedDict[TaskKey, None] = attrs.field(factory=collections.OrderedDict)
    """While its turn runs (bounded: streams left early never saw their end)."""
    cancelled: collections.OrderedDict[TaskKey, None] = attrs.field(factory=collections.OrderedDict)
    created: collections.OrderedDict[TaskKey, None] = attrs.field(factory=collections.OrderedDict)
    """Oldest first."""

    def start(self, key: TaskKey) -> None:
        _bounded_add(self.running, key)
        _bounded_add(self.created, key)

    def finish(self, key: TaskKey) -> None:
        self.running.pop(key, None)

    watchers: dict[TaskKey, set[trio.MemorySendChannel[TaskUpdate]]] = attrs.field(factory=dict)
    """Per task, the channels its updates go to while someone watches."""
    draining: bool = False
    """The server is shutting down: a task nothing runs gets no more updates."""

    turn_runs: Callable[[TaskKey], bool] = attrs.field(
        default=lambda key: False, kw_only=True, on_setattr=attrs.setters.frozen
    )
    """Whether the agent runs the task's turn now though no run of this process
    has it: a decision over another transport ran it on (the agent's
    ``turn_in_progress``; never, for a ledger without an agent)."""

    turn_resumes: Callable[[str, int], bool] = attrs.field(
        default=lambda conversation_id, seq: False,
        kw_only=True,
        on_setattr=attrs.setters.frozen,
    )
    """Whether the agent will resume an interrupted turn (its stored context
    id, its user message's seq): such a task is WORKING, not FAILED (the
    agent's ``resumes_interrupted``; never, for a ledger without an agent)."""

    def runs(self, key: TaskKey) -> bool:
        """Whether the task's turn runs now (WORKING), however it was started."""
        return key in self.running or self.turn_runs(key)

    def mark_cancelled(self, key: TaskKey) -> None:
        _bounded_add(self.cancelled, key)

    @contextlib.contextmanager
    def watch(self, key: TaskKey) -> Iterator[trio.MemoryReceiveChannel[TaskUpdate]]:
        """Receive what ``publish`` sends about ``key`` from now until the block
        ends; the channel closes early if the watcher falls ``WATCH_BUFFER``
        updates behind."""
        sender, receiver = trio.open_memory_channel[TaskUpdate](WATCH_BUFFER)
        self.watchers.setdefault(key, set()).add(sender)
        if self.draining and key not in self.running:
            sender.close()
        try:
            with receiver:
                yield receiver
        finally:
            sender.close()
            watching = self.watchers.get(key)
            if watching is not None:
                watching.discard(sender)
                if not watching:
                    del self.watchers[key]

    def stop_idle_watchers(self) -> None:
        """Shutting down: end the watches of tasks that nothing runs (they would
        wait for a decision that cannot come); running ones still get their end."""
        self.draining = True
        for key, senders in self.watchers.items():
            if key not in self.running:
                for sender in senders:
                    sender.close()

    def publish(self, key: TaskKey, update: TaskUpdate) -> None:
        """Hand ``update`` to everyone watching ``key``, without waiting."""
        for sender in list(self.watchers.get(key, ())):
            try:
                sender.send_nowait(update)
            except trio.WouldBlock:
                sender.close()  # fell behind: its stream ends, the task goes on
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # left; ``watch`` removes it
