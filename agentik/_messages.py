"""Value types of a conversation: roles, messages, tool calls, token counts.
(Content parts, images and files, are in ``_parts``.)

All are frozen attrs classes. Collections are tuples, so values are hashable
and safe to share between tasks. Stores fill ``seq`` and ``created_at``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime

import attrs

from agentik._parts import Part


class Role(enum.Enum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@attrs.frozen
class ToolCall:
    """A tool call as the model sent it."""

    id: str
    name: str
    arguments: str
    """The raw JSON text the model sent, kept verbatim so malformed arguments
    can be recorded and answered with an error."""


@attrs.frozen
class TokenUsage:
    """Tokens one model call used."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


@attrs.frozen
class TokenStats:
    """Token usage summed over a conversation."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    messages: int = 0
    """How many stored messages carried usage."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _tool_calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


def _parts(value: Iterable[Part]) -> tuple[Part, ...]:
    return tuple(value)


@attrs.frozen
class Message:
    """One message of a conversation's history."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_calls)
    """Tool calls of an assistant message, in the order the model sent them."""
    tool_call_id: str | None = None
    """For a tool message: the id of the call it answers."""
    usage: TokenUsage | None = None
    """Tokens of the model call that produced this (assistant) message."""
    seq: int | None = None
    """Position in the conversation, 1, 2, 3 …; assigned by the store."""
    created_at: datetime | None = None
    """Aware UTC time the store accepted the message."""
    parts: tuple[Part, ...] = attrs.field(default=(), converter=_parts)
    """The message's content other than its text (images, files), in the
    order they were sent; empty for a text-only message."""
