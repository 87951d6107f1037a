"""The agent-tool calls an agent's conversations are running (``agent_tool``),
kept so a person sees and decides what their child turns wait for.

A parent turn runs an agent tool's call by running a turn of another
conversation (its child) and holds the call open until that turn is over.
When the child turn pauses for approval, the parent turn waits in the call
(as a tool that asks a person a question does), and the child's waiting
calls are the parent's to decide: ``ChatAgent.pending_approvals(parent)``
lists them and ``ChatAgent.decide(parent, call_id)`` forwards the decision
to the child conversation holding ``call_id``, however deep.

Each agent keeps one ``ChildCalls`` (on its runtime); a conversation's task
makes it current (``current_children``), so a tool running there finds the
registry of the agent that runs its turn. The child may run on another agent:
an entry then points at that agent's registry, whose own running calls (a
grandchild's wait) count too. Everything here is touched by tasks of one trio
run, between checkpoints.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import attrs
import trio

from agentik.agent._events import ApprovalRequest, TurnEvent, TurnResult


class ChildAgent(Protocol):
    """What a parent's agent asks of the agent running a child turn (a ``ChatAgent``)."""

    async def decide(
        self,
        conversation_id: str,
        call_id: str,
        *,
        approve: bool,
        reason: str = "",
        idempotency_key: str | None = None,
    ) -> TurnResult: ...

    def stream_decision(
        self, conversation_id: str, call_id: str, *, approve: bool, reason: str = ""
    ) -> AbstractAsyncContextManager[AsyncIterator[TurnEvent]]: ...


@attrs.define(eq=False)
class ChildCall:
    """One agent-tool call running in a parent conversation."""

    conversation_id: str
    """The child conversation."""
    children: ChildCalls
    """The registry of the agent that runs the child turn."""
    agent: ChildAgent
    """The agent that runs the child turn: a decision goes there."""
    approvals: tuple[ApprovalRequest, ...] = ()
    """The child turn's calls that wait for a person (empty while it runs)."""


@attrs.define(eq=False)
class ChildCalls:
    """An agent's running agent-tool calls, by parent conversation, and who
    waits to hear that a conversation's paused turn moved on."""

    running: dict[str, dict[str, ChildCall]] = attrs.Factory(dict)
    """Parent conversation id -> parent call id -> its child call."""
    watchers: dict[str, list[trio.Event]] = attrs.Factory(dict)
    """Conversation id -> events set at its next change (``moved``)."""
    parents: dict[str, tuple[ChildCalls, str]] = attrs.Factory(dict)
    """Child conversation id (run here) -> the registry and id of the parent
    conversation whose call runs it: a change here is the parent's too."""

    @contextlib.contextmanager
    def holding(self, parent_id: str, call_id: str, call: ChildCall) -> Iterator[ChildCall]:
        """``call`` runs in ``parent_id`` as its call ``call_id`` for the block."""
        calls = self.running.setdefault(parent_id, {})
        calls[call_id] = call
        below = call.children.parents
        below[call.conversation_id] = (self, parent_id)
        try:
            yield call
        finally:
            if below.get(call.conversation_id) == (self, parent_id):
                del below[call.conversation_id]
            if calls.get(call_id) is call:
                del calls[call_id]
            if not calls and self.running.get(parent_id) is calls:
                del self.running[parent_id]

    def waiting(self, parent_id: str) -> tuple[ApprovalRequest, ...]:
        """The calls the child turns of ``parent_id`` (and theirs) wait on."""
        out: list[ApprovalRequest] = []
        for call in tuple(self.running.get(parent_id, {}).values()):
            out.extend(call.approvals or call.children.waiting(call.conversation_id))
        return tuple(out)

    def holder(self, parent_id: str, call_id: str) -> ChildCall | None:
        """The child call whose turn waits on ``call_id`` (a descendant's
        included), or None."""
        for call in tuple(self.running.get(parent_id, {}).values()):
            if any(a.call.id == call_id for a in call.approvals):
                return call
            deeper = call.children.holder(call.conversation_id, call_id)
            if deeper is not None:
                return deeper
        return None

    def watch(self, conversation_id: str) -> trio.Event:
        """An event set at the next decision about ``conversation_id`` taken
        through this agent (``moved``)."""
        event = trio.Event()
        self.watchers.setdefault(conversation_id, []).append(event)
        return event

    def unwatch(self, conversation_id: str, event: trio.Event) -> None:
        events = self.watchers.get(conversation_id)
        if events is not None and event in events:
            events.remove(event)
            if not events:
                del self.watchers[conversation_id]

    def moved(self, conversation_id: str) -> None:
        """What ``conversation_id`` waits on changed (a decision about it was
        taken, or a child turn of it began or stopped waiting): wake its
        watchers, and its parent's, up the chain."""
        registry: ChildCalls | None = self
        for _ in range(_MAX_CHAIN):
            if registry is None:
                return
            for event in registry.watchers.pop(conversation_id, ()):
                event.set()
            registry, conversation_id = registry.parents.get(conversation_id, (None, ""))


_MAX_CHAIN = 1000
"""Longer than any chain ``max_agent_depth`` lets grow: a bound, not a limit."""


current_children: contextvars.ContextVar[ChildCalls | None] = contextvars.ContextVar(
    "agentik_child_calls", default=None
)
"""The registry of the agent whose conversation task runs here (set once per task)."""
