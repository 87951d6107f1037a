"""Asking the model for a turn: one request, streamed when the caller streams
and the model can, counted, and its failure worded as the turn's error.

Whatever the backend raises fails this turn only (``model_failure``): the
agent serves thousands of other conversations.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from agentik._errors import AgentikError, ModelBackendError, TurnError
from agentik.agent._failures import component_error
from agentik.agent._failures import model_failure as backend_failure
from agentik.models import ModelRequest, ModelResponse, StreamingChatModel, TextDelta, ToolCallDelta

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentik.agent._events import TurnEvent
    from agentik.agent._runtime import AgentRuntime
    from agentik.agent._turn_spans import ChatSpan

    EmitFn = Callable[[TurnEvent], Awaitable[None]]


def model_failure(exc: Exception) -> TurnError:
    """The turn's error for a model backend that raised ``exc``: an agentik
    error is the model failing (``model_error``, or ``model_unavailable`` when
    it last answered 429 or 503: ``_failures.model_failure``), anything else a
    bug in its adapter (``internal_error``). Raise it ``from exc``."""
    if isinstance(exc, AgentikError):
        return backend_failure(exc)
    return component_error("the model", exc)


async def ask_model(
    runtime: AgentRuntime, request: ModelRequest, emit: EmitFn | None, chat: ChatSpan | None
) -> ModelResponse:
    """The model's answer to ``request``; its text and tool-call deltas go to
    ``emit`` as they come (the whole text at once from a model that does
    not stream). ``chat`` is the request's span, ended here."""
    stats = runtime.stats
    stats.model_calls += 1
    started = time.perf_counter()  # wall time, as a latency metric reads (not trio's clock)
    streaming = emit is not None and isinstance(runtime.model, StreamingChatModel)
    response = None
    try:
        if streaming:
            assert emit is not None
            response = await _stream(runtime, request, emit)
        else:
            response = await runtime.model.complete(request)
    except Exception as exc:
        stats.model_errors += 1
        raise model_failure(exc) from exc
    finally:
        stats.model_latency.observe(time.perf_counter() - started)
        if chat is not None:
            answer = response if isinstance(response, ModelResponse) else None
            chat.end(answer, sys.exc_info()[1])
    if not isinstance(response, ModelResponse):
        stats.model_errors += 1
        raise TurnError(
            f"the model returned {type(response).__name__}, expected ModelResponse",
            code="model_error",
        )
    if emit is not None and not streaming and response.text:
        await emit(TextDelta(response.text))
    usage = response.usage
    if usage is not None:
        stats.input_tokens += usage.prompt_tokens
        stats.output_tokens += usage.completion_tokens
    return response


async def _stream(runtime: AgentRuntime, request: ModelRequest, emit: EmitFn) -> ModelResponse:
    model = runtime.model
    assert isinstance(model, StreamingChatModel)
    final: ModelResponse | None = None
    stream = model.stream(request)
    try:
        async for event in stream:
            if isinstance(event, ModelResponse):
                final = event
            elif isinstance(event, TextDelta | ToolCallDelta):
                await emit(event)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    if final is None:
        raise ModelBackendError("the model's stream ended without a final response")
    return final
