"""What a turn reports as it runs: its events and its result.

A streamed turn yields, in order: text and tool-call deltas as the model
streams them (or one ``TextDelta`` with the whole text when the model does
not stream), ``ToolCallStarted`` before a tool runs, ``ToolCallFinished`` after
(between them, ``ElicitationAsked`` when the tool asks the person a question),
and finally exactly one ``TurnFinished`` or ``TurnFailed``. Transports (native
SSE, AG-UI, A2A) only translate these; they hold no conversation state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeAlias

import attrs

from agentik._messages import Message, TokenUsage, ToolCall
from agentik.agent._elicitation import ElicitationRequest
from agentik.models import TextDelta, ToolCallDelta


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    return tuple(value)


def _names(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class ApprovalRequest:
    """A tool call that waits for a person's decision (``ChatAgent.decide``)."""

    conversation_id: str
    call: ToolCall


TurnStatus: TypeAlias = Literal["finished", "awaiting_approval"]


@attrs.frozen
class TurnResult:
    """A turn that finished, or paused for a person's approval: its final text
    (empty while paused), the messages it added so far (the user's message
    first, all committed), and the tokens it used."""

    text: str
    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    usage: TokenUsage = TokenUsage()
    status: TurnStatus = "finished"
    """``awaiting_approval``: the calls in ``approvals`` wait for ``decide``;
    every other call of the turn has its result."""
    approvals: tuple[ApprovalRequest, ...] = ()
    """The calls waiting for a decision (a tuple: no converter on the hot path)."""
    output: object = attrs.field(default=None, kw_only=True)
    """A typed turn's answer (``send(..., output=T)``): a ``T``, or for a JSON
    Schema the JSON value; None otherwise. ``text`` is its JSON."""


@attrs.frozen
class ToolCallStarted:
    """The turn is about to run a tool call (the call is already recorded)."""

    call: ToolCall


@attrs.frozen
class ToolCallFinished:
    """A tool call has its result (an error result when ``is_error``)."""

    call: ToolCall
    content: str
    is_error: bool = False


@attrs.frozen
class ElicitationAsked:
    """A running tool call asks the person a question (MCP elicitation); the turn
    waits in the call until ``ChatAgent.answer_elicitation`` (or the timeout)."""

    request: ElicitationRequest


@attrs.frozen
class TurnFinished:
    """The turn ended with an answer; every message of it is committed."""

    result: TurnResult
    active_toolsets: tuple[str, ...] = attrs.field(default=(), converter=_names)
    """The conversation's active toolsets when the turn ended, sorted."""


@attrs.frozen
class TurnFailed:
    """The turn ended without an answer; what it recorded is committed and valid."""

    message: str
    code: str = "turn_failed"
    """Short machine-readable reason: ``turn_failed``, ``step_limit``, ``model_error``,
    ``model_unavailable``, ``cancelled``, ``not_resumable``; for ``ChatAgent.stream_decision``, also
    the ``ApprovalError`` codes ``not_waiting`` and ``already_decided``."""
    retry_after: float | None = None
    """``model_unavailable``: the seconds the model backend asked to wait, if it did."""


TurnEvent: TypeAlias = (
    TextDelta
    | ToolCallDelta
    | ToolCallStarted
    | ToolCallFinished
    | ElicitationAsked
    | TurnFinished
    | TurnFailed
)
