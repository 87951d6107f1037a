"""``ConversationHandle``: all the supervisor may do to a conversation task.

A ``Conversation`` is touched only by its own task (and by the summary and
reflection tasks it starts beside itself, which read snapshots and send their
results back). The supervisor (``ChatAgent``) never holds one: it holds this
handle, whose every field has exactly one writer.

Why that is enough: every task of an agent runs in one trio run, on one
thread, and a task gives way only at a checkpoint, so no field is ever seen
half-written, and a run of writes with no ``await`` between them is seen
whole. What could still go wrong is two tasks each writing the same state
on the assumption it is theirs (the supervisor bumping a counter the
conversation also decrements, clearing a flag the conversation sets); one
writer per field rules that out. Cancelling a ``trio.CancelScope`` is the one
operation on another task's objects allowed here: trio makes it safe from any
task of the run (it is how a nursery cancels its children), it takes effect
at the target's next checkpoint, and the target sees it as ``Cancelled`` at a
point where it holds no half-done state (``Turn`` records what it must,
shielded).

=================  ==============================  =============================
field              written by                      read by
=================  ==============================  =============================
``mailbox``        supervisor (sends, closes)      (the conversation's ``inbox``)
``outstanding``    supervisor                      supervisor
``notes_version``  supervisor                      conversation
``interrupted``    supervisor                      conversation, its turn
``tenure``         supervisor (at spawn)           conversation, its turn
``scope``          conversation                    supervisor: may ``cancel()``
``running``        conversation                    supervisor
``running_key``    conversation                    supervisor
``optional``       conversation (its own tasks)    supervisor: may ``cancel()``
``last_active``    conversation                    supervisor (the reaper)
``keep_until``     conversation                    supervisor (the reaper)
``toolsets``       conversation                    supervisor (``toolset_status``)
=================  ==============================  =============================

The supervisor calls the methods below from any task of the agent's run (a
caller's task in ``send``, ``cancel``..., the reaper, the task closing the
agent); never from another thread. Each reads the conversation's fields,
writes only the supervisor's, and cancels scopes. Cancelling a running turn is
immediate: it does not wait in the inbox behind the turn it cancels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import final

import attrs
import trio

from agentik.agent._requests import Decision, NewTurn, Request, TurnRequest

NO_TOOLSETS: Mapping[str, float] = MappingProxyType({})


@final
@attrs.define(eq=False)
class ConversationHandle:
    """The supervisor's side of one conversation task."""

    conversation_id: str
    mailbox: trio.MemorySendChannel[Request]
    """The inbox's send end: the supervisor sends, and closes it to retire the task."""

    # --- written by the supervisor --------------------------------------------------
    outstanding: tuple[TurnRequest, ...] = ()
    """Turns sent whose callers wait for them, oldest first: what ``cancel``
    may reach (the running one among them is reached through ``scope``)."""
    notes_version: int = 0
    """Bumped when the conversation's notes change from outside its task
    (``ChatAgent.archive_memory``): it reads them again before its next turn."""
    interrupted: bool = False
    """The agent is shutting down and its grace is over: the running turn is
    cancelled as interrupted (resumed at the next start) and no request that
    is still queued runs."""
    tenure: str | None = None
    """Several nodes: the hold on the conversation's shard the task was
    started under (``ConversationOwnership.tenure``); the task serves nothing
    once the node's tenure is another (the shard moved, even if it came
    back): its cached history may be behind. None on a single node."""

    # --- written by the conversation task ---------------------------------------------
    scope: trio.CancelScope | None = None
    """What cancels the work running now (a turn, a decision's run, a resume,
    the denial of calls whose approval timed out); None between them."""
    running: Request | None = None
    """The request running now (None between requests, or while the
    conversation denies timed-out calls on its own)."""
    running_key: str | None = None
    """The idempotency key of the turn running now: its request's, or the
    paused turn's that a decision runs on."""
    optional: tuple[trio.CancelScope, ...] = ()
    """The scopes of the summary and reflection running beside the conversation."""
    last_active: float = attrs.field(factory=trio.current_time)
    keep_until: float = -math.inf
    """The task must live until then: its last active toolset expires then (it
    must not forget it), or never (``inf``) while calls wait for a decision
    that may time out."""
    toolsets: Mapping[str, float] = NO_TOOLSETS
    """Active toolsets and when each expires unless used (``trio.current_time``
    clock), as of the end of the last request."""

    # --- the supervisor's operations --------------------------------------------------
    @property
    def backlog(self) -> int:
        """Requests sent and not yet taken by the conversation (queued, or
        waiting for room in the inbox)."""
        stats = self.mailbox.statistics()
        return stats.current_buffer_used + stats.tasks_waiting_send

    def sent(self, request: Request) -> None:
        """``request`` goes into the inbox: a turn is ``outstanding`` until
        its caller is done with it (``forget``)."""
        if isinstance(request, NewTurn | Decision):
            self.outstanding = (*self.outstanding, request)

    def forget(self, request: Request) -> None:
        """``request``'s caller is done with it (it has the outcome, or left),
        or it never went in: nothing here keeps it (nor its result) alive."""
        if isinstance(request, NewTurn | Decision) and request in self.outstanding:
            self.outstanding = tuple(r for r in self.outstanding if r is not request)

    def cancel(self, key: str | None = None) -> int:
        """Cancel the running turn and the queued ones (with ``key``: only
        those carrying it); return how many. The running one stops at its next
        checkpoint; a queued one is answered ``cancelled`` when its turn
        comes, without running."""
        count = 0
        scope, running = self.scope, self.running
        mine = key is None or self.running_key == key
        if scope is not None and not scope.cancel_called and mine:
            scope.cancel()
            count = 1
        for request in self.outstanding:
            reply = request.reply
            if request is running or reply.cancelled or reply.pending.done:
                continue
            if key is None or request.idempotency_key == key:
                reply.cancelled = True
                count += 1
        return count

    def cancel_running(self) -> None:
        """Cancel whatever runs now (the node lost the conversation)."""
        if self.scope is not None:
            self.scope.cancel()

    def interrupt(self) -> None:
        """The shutdown's grace is over: stop the running turn (it ends
        interrupted), the summary or reflection under way, and every request
        still queued."""
        self.interrupted = True
        self.cancel_running()
        for scope in self.optional:
            scope.cancel()

    def in_progress(self, key: str) -> bool:
        """Whether the turn carrying ``key`` runs, or waits in the queue."""
        if self.scope is not None and self.running_key == key:
            return True
        running = self.running
        return any(
            r.idempotency_key == key
            and r is not running
            and not r.reply.cancelled
            and not r.reply.pending.done
            for r in self.outstanding
        )

    def idle_for(self, now: float) -> float:
        """Seconds the conversation has had nothing to do; 0 while it runs or
        has queued work, while a summary or reflection runs beside it, while
        one of its toolsets is active (it must not forget it) or while calls
        wait for a decision that may time out."""
        if self.scope is not None or self.running is not None or self.optional:
            return 0.0
        if now < self.keep_until or self.backlog:
            return 0.0
        return now - self.last_active

    def expires_in(self, name: str, now: float) -> float | None:
        """Seconds until toolset ``name`` expires unless used; None when inactive."""
        at = self.toolsets.get(name)
        if at is None or at <= now:
            return None
        return at - now
