"""The values stores hand out beyond the root ones (``Message``, ``MemoryEntry`` …):
a turn's record, a summary, a keyed turn, a conversation's snapshot.

Frozen values with no behaviour, so the protocols (``_protocols``), the
archive records (``_archive``) and every backend can import them without
importing each other.
"""

from __future__ import annotations

from datetime import datetime

import attrs

from agentik._memory import MemoryEntry
from agentik._messages import Message


@attrs.frozen(kw_only=True)
class Summary:
    """What the model wrote to stand for a conversation's history up to a seq."""

    through_seq: int
    """The last message it covers: the next summary, or the window, starts after it."""
    text: str
    created_at: datetime | None = None


@attrs.frozen
class ConversationSnapshot:
    """A page of a conversation's history, its active notes and its latest
    summary, read together."""

    messages: tuple[Message, ...]
    """The first ``page_size`` messages after ``after_seq`` (all if fewer)."""
    memory: tuple[MemoryEntry, ...]
    summary: Summary | None = None
    """The latest summary, if the store keeps them."""


@attrs.frozen(kw_only=True)
class KeyedTurn:
    """A turn named by an idempotency key: the message stored with the key and
    the messages after it, up to (not including) the next user message."""

    key: str
    messages: tuple[Message, ...]
    """Oldest first; ``messages[0]`` carries the key. Never empty."""

    @property
    def seq(self) -> int:
        """The seq of the keyed message: where the turn sits in its conversation."""
        seq = self.messages[0].seq
        assert seq is not None, "stored messages carry their seq"
        return seq


@attrs.frozen(kw_only=True)
class Approval:
    """A tool call that needs a person's decision, as stored."""

    seq: int
    """The seq of the assistant message that made the call."""
    call_id: str
    approved: bool | None = None
    """None while it waits."""
    reason: str = ""


@attrs.frozen(kw_only=True)
class TurnRecord:
    """What storage knows of one turn beyond its messages."""

    approvals: tuple[Approval, ...] = ()
    """Calls of the turn that needed a decision, in the order they were recorded."""
    failure: str | None = None
    """The code the turn failed with; None if it has not failed (finished,
    running, waiting for a decision, or interrupted by a stop)."""
    output: bool = False
    """The turn answered with a typed output (``send(..., output=T)``): its
    last assistant message's text is the output's JSON."""
