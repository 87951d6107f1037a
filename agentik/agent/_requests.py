"""What the supervisor sends a conversation task: one frozen type per request.

``Request`` is a closed union; ``Conversation._serve`` matches it in one place.

- ``NewTurn``: a user message, a turn of its own (``send``, ``stream``);
- ``Decision``: a person's decision about a call waiting for approval; the
  paused turn runs on (``decide``, ``stream_decision``);
- ``Abandon``: end the paused turn carrying a key, cancelled (``cancel_paused``);
- ``StatusQuery``: run nothing, report the paused turn (``pending_approvals``);
  the conversation's load on the way recovers its last turn, which is how the
  agent resumes interrupted turns at start;
- ``Delete``: delete the conversation, in queue order (``delete_conversation``).

Cancelling a turn is no request: it cannot wait in the inbox behind the turn it
cancels. The supervisor cancels through the conversation's handle (``_handle``).

Each request carries a ``Reply``: where its outcome goes, and the two marks the
caller's side leaves on it before it runs (``left``: the caller stopped
waiting; ``cancelled``: ``ChatAgent.cancel`` reached it in the queue). Each of
those fields has one writer; the conversation only reads them (see
``_handle`` for why that is safe in trio).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

import attrs
import trio

from agentik._parts import Part
from agentik._sync import Pending
from agentik.agent._events import TurnEvent, TurnResult
from agentik.agent._turn_events import Decided

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from agentik.agent._output import OutputSpec

T = TypeVar("T")


@attrs.define(eq=False)
class Reply(Generic[T]):
    """A request's way back to its caller."""

    pending: Pending[T] = attrs.Factory(Pending)
    """The outcome; set once, by the conversation task."""
    events: trio.MemorySendChannel[TurnEvent] | None = None
    """Where a streaming caller reads events (the conversation owns this end
    once the request is sent, and closes it); None for a plain call."""
    left: bool = False
    """The caller stopped waiting before the outcome came (written by the
    caller's task only, as its wait ends)."""
    cancelled: bool = False
    """``ChatAgent.cancel`` reached the request while it was queued: it is
    answered ``cancelled`` without running (written by the supervisor only)."""

    async def wait(self) -> T:
        """The outcome, for a caller that does not stream. A caller that stops
        waiting first leaves ``left`` behind: a request nobody waits for any
        more is not started (its answer would reach no one)."""
        try:
            return await self.pending.wait()
        finally:
            if not self.pending.done:
                self.left = True

    @property
    def gone(self) -> bool:
        """Whether nobody waits for the outcome any more: the caller stopped
        waiting, or a streaming caller closed its end of the events."""
        if self.left:
            return True
        events = self.events
        return events is not None and events.statistics().open_receive_channels == 0


@attrs.frozen(kw_only=True, eq=False)
class NewTurn:
    text: str
    idempotency_key: str | None
    reply: Reply[TurnResult]
    parts: tuple[Part, ...] = ()
    """The user message's content parts (``send(content=[...])``)."""
    output: OutputSpec | None = None
    """A typed turn's output (``send(..., output=T)``)."""
    trace_context: Context | None = None
    """The caller's OpenTelemetry context, when the agent traces: the parent of
    the turn's span, carried over the hop into the conversation's task."""


@attrs.frozen(kw_only=True, eq=False)
class Decision:
    decided: Decided
    idempotency_key: str | None
    """The paused turn's key, when the caller names it (a call of another turn
    is then ``not_waiting``)."""
    reply: Reply[TurnResult]
    trace_context: Context | None = None


@attrs.frozen(kw_only=True, eq=False)
class Abandon:
    idempotency_key: str
    reply: Reply[TurnResult]
    trace_context: Context | None = None


@attrs.frozen(kw_only=True, eq=False)
class StatusQuery:
    reply: Reply[TurnResult]
    trace_context: Context | None = None
    idempotency_key: None = None


@attrs.frozen(kw_only=True, eq=False)
class Delete:
    idle_before: datetime | None
    """Only if the newest message is older (retention); None: whatever its age."""
    reply: Reply[bool]
    trace_context: Context | None = None
    idempotency_key: None = None


Request: TypeAlias = NewTurn | Decision | Abandon | StatusQuery | Delete
TurnRequest: TypeAlias = NewTurn | Decision
"""The requests that run a turn: what ``ChatAgent.cancel`` cancels in the queue."""
