"""A traced turn's spans: the glue between ``Turn`` and ``Tracing`` (``_spans``).

One ``invoke_agent`` span per run of the turn (a turn paused for approval runs
again when decided; later runs link to the first), a ``chat`` span per model
request, an ``execute_tool`` span per tool call, and the toolsets that turned
on or off as events of the run's span. Only a turn of an agent that traces
has a ``TurnSpans``: the others pay one None check where a span would start.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import attrs

from agentik._messages import TokenUsage, ToolCall

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext

    from agentik.agent._events import TurnResult
    from agentik.agent._spans import Tracing
    from agentik.agent._turn_host import TurnHost
    from agentik.models import ModelRequest, ModelResponse


@attrs.frozen
class ChatSpan:
    """A model request's span, current until ``end``."""

    tracing: Tracing
    span: Span
    token: object

    def end(self, response: ModelResponse | None, error: BaseException | None) -> None:
        self.tracing.end_chat(self.span, self.token, response, error)


@attrs.define
class TurnSpans:
    """The spans of one turn, across its runs."""

    tracing: Tracing
    span: Span | None = None
    """The span of the run in progress, while it records."""
    trace: Context | None = None
    """The context the run's chat and tool spans start in (None: no spans)."""
    first: SpanContext | None = None
    """The first run's span: later runs (after a pause) link to it."""
    runs: int = 0
    run_usage: TokenUsage = TokenUsage()
    """The turn's usage when the run in progress started."""

    def start_run(self, conv: TurnHost, usage: TokenUsage) -> None:
        self.runs += 1
        running = conv.running
        started = self.tracing.start_turn(
            conv.conversation_id,
            None if running is None else running.trace_context,
            self.first,
            self.runs,
        )
        if started is None:
            self.span = self.trace = None
            return
        self.span, self.trace = started
        if self.first is None:
            self.first = self.span.get_span_context()
        self.run_usage = usage

    def end_run(
        self, result: TurnResult | None, error: BaseException | None, usage: TokenUsage
    ) -> None:
        span = self.span
        if span is None:
            return
        self.span = self.trace = None
        start = self.run_usage
        self.tracing.end_turn(
            span,
            status=None if result is None else result.status,
            text="" if result is None else result.text,
            usage=TokenUsage(
                usage.prompt_tokens - start.prompt_tokens,
                usage.completion_tokens - start.completion_tokens,
            ),
            error=error,
        )

    def start_chat(
        self, conv: TurnHost, active: frozenset[str], request: ModelRequest
    ) -> ChatSpan | None:
        """Toolsets that expired since the last look, as events; the model
        request's span, if the run records."""
        self.tracing.toolsets(self.span, conv.toolsets_seen, active, None)
        conv.toolsets_seen = active
        if self.trace is None:
            return None
        span, token = self.tracing.start_chat(self.trace, conv.conversation_id, request)
        return ChatSpan(self.tracing, span, token)

    def toolsets_changed(self, conv: TurnHost, by: str) -> None:
        """Toolsets the call ``by`` switched on or off since the last look, as events."""
        now = conv.activation.active_names()
        self.tracing.toolsets(self.span, conv.toolsets_seen, now, by)
        conv.toolsets_seen = now

    async def tool(
        self,
        conv: TurnHost,
        call: ToolCall,
        run: Callable[[], Awaitable[tuple[str, bool]]],
    ) -> tuple[str, bool]:
        """``run()``, the call's work, in its span, with what it switched on or off."""
        span = None
        if self.trace is not None:
            span = self.tracing.start_tool(self.trace, conv.conversation_id, call)
        result = None
        try:
            result = await run()
            return result
        finally:
            if span is not None:
                self.tracing.end_tool(*span, result, sys.exc_info()[1])
            self.toolsets_changed(conv, call.name)
