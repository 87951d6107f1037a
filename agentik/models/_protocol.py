"""The model seam: what the turn loop sends a model and what it gets back.

A ``ChatModel`` answers one request at a time; a ``StreamingChatModel`` can
also stream the answer as deltas, ending with the complete ``ModelResponse``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from agentik._json import JsonValue
from agentik._messages import Message, TokenUsage, ToolCall
from agentik.toolsets import NamedTool


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    return tuple(value)


def _tools(value: Iterable[NamedTool]) -> tuple[NamedTool, ...]:
    return tuple(value)


def _calls(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


RequestPurpose: TypeAlias = Literal["turn", "summary", "reflection"]

StructuredOutput: TypeAlias = Literal["response_format", "tool"]
"""How a backend is asked for a typed answer: OpenAI's ``response_format``
(``json_schema``), or a final-answer tool the model must call (a backend
that cannot take ``response_format``); a model says which by its
``structured_output`` attribute (``response_format`` when it has none)."""

STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("response_format", "tool")


def check_structured_output(value: object) -> StructuredOutput:
    """``value`` as a ``StructuredOutput``, or a clear ``ValueError``."""
    for mode in STRUCTURED_OUTPUTS:
        if value == mode:
            return mode
    raise ValueError(f"structured_output must be 'response_format' or 'tool', got {value!r}")


def structured_output_of(model: object) -> StructuredOutput:
    """How ``model`` is asked for a typed answer (its ``structured_output``,
    else ``response_format``)."""
    return check_structured_output(getattr(model, "structured_output", "response_format"))


PartKind: TypeAlias = Literal["image", "file"]
"""A kind of content part a model may take beyond text."""
PART_KINDS: tuple[PartKind, ...] = ("image", "file")


def check_accepts_parts(value: Iterable[object]) -> frozenset[PartKind]:
    """``value`` as a set of ``PartKind``, or a clear ``ValueError``."""
    if isinstance(value, str):
        raise ValueError(f"accepts_parts must be a collection of 'image', 'file', got {value!r}")
    kinds: set[PartKind] = set()
    for kind in value:
        if kind == "image":
            kinds.add("image")
        elif kind == "file":
            kinds.add("file")
        else:
            raise ValueError(f"accepts_parts takes 'image' and 'file', got {kind!r}")
    return frozenset(kinds)


def accepts_parts_of(model: object) -> frozenset[PartKind]:
    """The kinds of part ``model`` takes beyond text: its ``accepts_parts``,
    else none (a model that does not say is text-only)."""
    return check_accepts_parts(getattr(model, "accepts_parts", ()))


@attrs.frozen
class ModelRequest:
    """One model call. ``messages[0]`` is the system message, built afresh for
    every request and never stored."""

    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    tools: tuple[NamedTool, ...] = attrs.field(default=(), converter=_tools)
    purpose: RequestPurpose = "turn"
    """Why the agent asks: ``turn`` (a conversation's turn), ``summary`` (to
    compact history), ``reflection`` (a lesson after a turn)."""
    output_schema: dict[str, JsonValue] | None = attrs.field(default=None, kw_only=True)
    """The JSON Schema the final answer must match (a typed turn: ``send(...,
    output=T)``), else None. A backend answers with the JSON as its text,
    unless ``output_tool`` is set."""
    output_tool: str | None = attrs.field(default=None, kw_only=True)
    """A typed turn asked in ``structured_output="tool"`` mode: the name of the
    offered tool (in ``tools``, its parameters the output schema, or the schema
    wrapped as the property ``answer`` when it is not an object) the model must
    call to give its answer; the backend then sends no ``response_format``."""


@attrs.frozen
class ModelResponse:
    """What the model answered: text, tool calls, or both."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_calls)
    usage: TokenUsage | None = None
    finish_reason: str | None = None
    """As the backend reported it (``stop``, ``tool_calls``, ``length`` …), if it did."""


@attrs.frozen
class TextDelta:
    """A piece of the answer's text, as it streams."""

    text: str


@attrs.frozen
class ToolCallDelta:
    """A piece of a streamed tool call. ``id`` and ``name`` come with the first
    piece of each ``index``; ``arguments`` is a fragment of the JSON text."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


ModelStreamEvent: TypeAlias = TextDelta | ToolCallDelta | ModelResponse
"""A stream yields deltas and ends with the complete ``ModelResponse``."""


@runtime_checkable
class ChatModel(Protocol):
    """A model backend."""

    async def complete(self, request: ModelRequest) -> ModelResponse: ...


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A model backend that can also stream its answer."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Yield deltas, then exactly one final ``ModelResponse``."""
        ...
