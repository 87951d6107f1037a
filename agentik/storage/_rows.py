"""``MessageRow``: a message to append, encoded once for any SQL backend.

What could fail in Python (a role that is not a ``Role``, tool calls to encode
as JSON) is done when the row is built, in the caller's task; the writer's
thread only adds the seq and the batch's timestamp. Each backend inserts rows
its own way (SQLite: multi-row ``INSERT … VALUES``; PostgreSQL: one
``INSERT … SELECT FROM unnest(…)``), reading these fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from agentik._errors import StoreError
from agentik._json import dumps_ascii
from agentik._messages import Message, Role, ToolCall
from agentik._serde import converter
from agentik.storage._parts_column import parts_column

_unstructure_tool_calls = converter.get_unstructure_hook(tuple[ToolCall, ...])
"""The converter's own hook, looked up once: as fast as a hand-written
encoding was (docs/history/performance-log.md, "Per-turn cost against the bare
sketch"), and the converter stays the one source."""


def tool_calls_json(tool_calls: Sequence[ToolCall]) -> str:
    """The ``tool_calls`` column: the converter's unstructured calls, as JSON."""
    return dumps_ascii(_unstructure_tool_calls(tuple(tool_calls)))


class MessageRow:
    """Append a message with its conversation's next seq. A value, not a
    closure, so a writer can insert a run of them with a few statements; the
    writer's append request extends it."""

    __slots__ = (
        "blobs",
        "completion_tokens",
        "conversation_id",
        "idempotency_key",
        "message",
        "parts",
        "prompt_tokens",
        "role",
        "seq",
        "tool_calls",
    )

    def __init__(self, conversation_id: str, message: Message, idempotency_key: str | None) -> None:
        self.conversation_id = conversation_id
        self.message = message
        self.idempotency_key = idempotency_key
        role = message.role
        if type(role) is not Role:
            raise StoreError(f"message role must be a Role, got {role!r}")
        self.role: str = role._value_
        usage = message.usage
        if usage is None:
            self.prompt_tokens: int | None = None
            self.completion_tokens: int | None = None
        else:
            self.prompt_tokens = usage.prompt_tokens
            self.completion_tokens = usage.completion_tokens
        tool_calls = message.tool_calls
        self.tool_calls = tool_calls_json(tool_calls) if tool_calls else None
        """The ``tool_calls`` column (JSON), None when there are none."""
        parts = message.parts
        self.parts: str | None = None
        self.blobs: dict[str, bytes] | None = None
        if parts:
            self.parts, self.blobs = parts_column(parts)
        """The ``parts`` column (JSON), and the blobs it names (to store beside
        the message: ``MessageQueries.insert_blobs``); None without parts."""
        self.seq = 0
        """Set when the row is built, inside the writer's transaction."""

    def stored(self, now: datetime) -> Message:
        """The message as stored: with its seq and the batch's timestamp. The
        one place that builds it: every backend's single and multi-row
        inserts call it."""
        message = self.message
        # Positional (a third cheaper than keywords): a test pins Message's field order.
        return Message(
            message.role,
            message.content,
            message.tool_calls,
            message.tool_call_id,
            message.usage,
            self.seq,
            now,
            message.parts,
        )
