"""What a store keeps about one conversation, as records: the unit of
``FullMessageStore`` export and import, and of the JSON Lines file
``agentik export`` writes (``agentik.storage._jsonl``).

Every record is a frozen value; a conversation's records are its messages
(with their seq, time, usage and idempotency key), its working-memory notes
(archived ones too), the reflections drawn from it, its turn ledger
(approvals, failed turns) and its chain of summaries. Notes and reflections
are numbered by the store that holds them (ids are unique across conversations), so an import gives
them new ids, keeping their order, text, times and archived flag; everything
else comes back exactly. A record kind added later is a new class
in ``ArchiveRecord`` and a new ``type`` in the file; readers refuse a type
they do not know rather than drop it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeAlias

import attrs

from agentik._memory import MemoryEntry, Reflection
from agentik._messages import Message
from agentik.storage._values import Approval, Summary


@attrs.frozen(kw_only=True)
class ArchivedMessage:
    """A stored message (``seq`` and ``created_at`` set) and its idempotency key."""

    message: Message
    idempotency_key: str | None = None


@attrs.frozen(kw_only=True)
class ArchivedNote:
    """A working-memory note; ``archived`` ones are compacted away but kept."""

    entry: MemoryEntry
    archived: bool = False


@attrs.frozen(kw_only=True)
class ArchivedReflection:
    reflection: Reflection


@attrs.frozen(kw_only=True)
class ArchivedApproval:
    """A tool call that needed a decision, with when it was asked and decided."""

    approval: Approval
    created_at: datetime
    decided_at: datetime | None = None


@attrs.frozen(kw_only=True)
class ArchivedFailure:
    """A turn that failed: its user message's seq and the failure code."""

    seq: int
    code: str
    created_at: datetime


@attrs.frozen(kw_only=True)
class ArchivedOutput:
    """A turn that answered with a typed output (``TurnRecord.output``): its
    user message's seq."""

    seq: int
    created_at: datetime


@attrs.frozen(kw_only=True)
class ArchivedSummary:
    """One summary of the chain a context policy asked for (``FullMessageStore.submit_summary``)."""

    summary: Summary


ArchiveRecord: TypeAlias = (
    ArchivedMessage
    | ArchivedNote
    | ArchivedReflection
    | ArchivedApproval
    | ArchivedFailure
    | ArchivedOutput
    | ArchivedSummary
)
"""One record of a conversation's archive."""
