"""Spans of the OpenTelemetry GenAI semantic conventions
(``semantic-conventions-genai`` v0.1.0): ``invoke_agent {agent}`` (INTERNAL)
for each run of a turn, ``chat {model}`` (CLIENT) for each model request,
``execute_tool {tool}`` (INTERNAL) for each tool call.

Imported only once tracing is on (``_tracing.tracing_for``). The turn's shell
(``_turn.Turn``) calls in here; nothing here awaits or decides anything.

Rules the spans keep:
- a run of a turn is one ``invoke_agent`` span: a turn that pauses for
  approval and goes on later (``decide``, the approval timeout, a new message
  superseding it, a restart resuming it) has one span per run, each later one
  linked to the first and counted in ``agentik.turn.run``; its parent is the
  span current where the caller sent the turn (or decided), carried over the
  hop into the conversation's task with the request;
- chat and tool spans are children of their run's span, and current while
  the model or the tool runs, so spans those make (an HTTP client's) nest;
- a run whose span is not recording (sampled out, or no provider configured
  yet) makes no child spans: the cost of tracing then is one no-op span;
- message content (``gen_ai.input.messages`` / ``output.messages`` /
  ``system_instructions`` / ``tool.call.arguments`` / ``tool.call.result``)
  only with ``capture_content``; credentials never (they are in no message:
  model backends mask them in what they return);
- a failure sets ``error.type`` and an error status, and nothing else does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, final

import trio
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from agentik._errors import TurnError
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik._version import __version__
from agentik.agent._failures import message_of
from agentik.toolsets import DISABLE_TOOLSET

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

    from agentik.models import ChatModel, ModelRequest, ModelResponse

Token = object
"""What ``opentelemetry.context.attach`` returns, for ``detach``."""

_FINISH_REASONS = {"tool_calls": "tool_call", "function_call": "tool_call"}
"""Backend finish reasons (OpenAI's) -> the conventions' values."""


def _identity(model: ChatModel) -> tuple[str, str | None]:
    """``gen_ai.provider.name`` and ``gen_ai.request.model`` of a backend: its
    ``provider_name`` and ``model_name`` attributes when it has them (agentik's
    own do), else its class name and no model."""
    provider = getattr(model, "provider_name", None)
    name = getattr(model, "model_name", None)
    return (
        provider if isinstance(provider, str) and provider else type(model).__name__,
        name if isinstance(name, str) and name else None,
    )


@final
class Tracing:
    """One agent's tracer and the attributes every span of it carries."""

    __slots__ = (
        "_agent_name",
        "_capture",
        "_chat_name",
        "_model",
        "_provider",
        "_tracer",
        "_turn_name",
    )

    def __init__(
        self,
        tracer: Tracer,
        *,
        agent_name: str,
        provider_name: str,
        model_name: str | None,
        capture_content: bool,
    ) -> None:
        self._tracer = tracer
        self._capture = capture_content
        self._model = model_name
        self._agent_name = agent_name
        self._provider = provider_name
        self._turn_name = f"invoke_agent {agent_name}"
        self._chat_name = "chat" if model_name is None else f"chat {model_name}"

    @classmethod
    def build(
        cls,
        provider: TracerProvider,
        *,
        model: ChatModel,
        agent_name: str,
        capture_content: bool,
    ) -> Tracing:
        provider_name, model_name = _identity(model)
        return cls(
            provider.get_tracer("agentik", __version__),
            agent_name=agent_name,
            provider_name=provider_name,
            model_name=model_name,
            capture_content=capture_content,
        )

    @staticmethod
    def current() -> Context:
        """The caller's context, to carry with a request into the conversation task."""
        return otel_context.get_current()

    # --- invoke_agent ---------------------------------------------------------------

    def start_turn(
        self,
        conversation_id: str,
        parent: Context | None,
        first: SpanContext | None,
        run: int,
    ) -> tuple[Span, Context] | None:
        """The span of one run of a turn and the context its children start in;
        None when it does not record (then the run makes no other span)."""
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": self._provider,
            "gen_ai.agent.name": self._agent_name,
            "gen_ai.conversation.id": conversation_id,
            "agentik.turn.run": run,
        }
        if self._model is not None:
            attributes["gen_ai.request.model"] = self._model
        span = self._tracer.start_span(
            self._turn_name,
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=None if first is None else (Link(first),),
        )
        if not span.is_recording():
            span.end()
            return None
        return span, trace.set_span_in_context(span)

    def end_turn(
        self,
        span: Span,
        *,
        status: str | None,
        text: str,
        usage: TokenUsage,
        error: BaseException | None,
    ) -> None:
        """``status``: the run's outcome (``finished``, ``awaiting_approval``),
        None when it ended without one (superseded, or ``error``)."""
        attributes = _usage(usage)
        if error is not None:
            code = _turn_error_type(error)
            attributes["agentik.turn.status"] = "failed"
            attributes["error.type"] = code
            described = message_of(error) if isinstance(error, TurnError) else code
            span.set_status(Status(StatusCode.ERROR, described))
        elif status is not None:
            attributes["agentik.turn.status"] = status
            if self._capture and status == "finished":
                attributes["gen_ai.output.messages"] = _output(text, (), "stop")
        span.set_attributes(attributes)
        span.end()

    def toolsets(
        self,
        span: Span | None,
        before: frozenset[str],
        after: frozenset[str],
        by: str | None,
    ) -> None:
        """Events for toolsets that became active or stopped being so since
        ``before``; ``by`` is the tool call that did it (None: a model request
        found them expired)."""
        if span is None or before == after:
            return
        for name in sorted(after - before):
            attributes: dict[str, AttributeValue] = {"agentik.toolset.name": name}
            if by is not None:
                attributes["agentik.toolset.by"] = by
            span.add_event("agentik.toolset.activated", attributes)
        for name in sorted(before - after):
            if by == DISABLE_TOOLSET:
                span.add_event(
                    "agentik.toolset.deactivated",
                    {"agentik.toolset.name": name, "agentik.toolset.by": by},
                )
            else:
                span.add_event("agentik.toolset.expired", {"agentik.toolset.name": name})

    # --- chat -----------------------------------------------------------------------

    def start_chat(
        self, parent: Context | None, conversation_id: str, request: ModelRequest
    ) -> tuple[Span, Token]:
        """A model request's span, made current (detach with ``end_chat``)."""
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.conversation.id": conversation_id,
            "agentik.request.purpose": request.purpose,
        }
        if self._model is not None:
            attributes["gen_ai.request.model"] = self._model
        if self._capture:
            messages = request.messages
            if messages and messages[0].role is Role.SYSTEM:
                attributes["gen_ai.system_instructions"] = _dumps(
                    [{"type": "text", "content": messages[0].content}]
                )
                messages = messages[1:]
            attributes["gen_ai.input.messages"] = _dumps([_message(m) for m in messages])
        span = self._tracer.start_span(
            self._chat_name, context=parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        return span, otel_context.attach(trace.set_span_in_context(span))

    def end_chat(
        self,
        span: Span,
        token: Token,
        response: ModelResponse | None,
        error: BaseException | None,
    ) -> None:
        otel_context.detach(token)  # type: ignore[arg-type]
        if error is not None:
            _failed(span, error)
        elif response is not None:
            attributes: dict[str, AttributeValue] = (
                {} if response.usage is None else _usage(response.usage)
            )
            if response.finish_reason is not None:
                attributes["gen_ai.response.finish_reasons"] = (response.finish_reason,)
            if self._capture:
                attributes["gen_ai.output.messages"] = _output(
                    response.text or "", response.tool_calls, response.finish_reason
                )
            if attributes:
                span.set_attributes(attributes)
        span.end()

    # --- execute_tool -----------------------------------------------------------------

    def start_tool(
        self, parent: Context, conversation_id: str, call: ToolCall
    ) -> tuple[Span, Token]:
        """A tool call's span, made current (detach with ``end_tool``)."""
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.conversation.id": conversation_id,
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        if self._capture:
            attributes["gen_ai.tool.call.arguments"] = call.arguments
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        return span, otel_context.attach(trace.set_span_in_context(span))

    def end_tool(
        self,
        span: Span,
        token: Token,
        result: tuple[str, bool] | None,
        error: BaseException | None,
    ) -> None:
        """``result``: the content and whether it is an error result."""
        otel_context.detach(token)  # type: ignore[arg-type]
        if error is not None:
            _failed(span, error)
        elif result is not None:
            content, is_error = result
            attributes: dict[str, AttributeValue] = {}
            if self._capture:
                attributes["gen_ai.tool.call.result"] = content
            if is_error:
                # The error result is the tool's output: content, shown only
                # when content is captured.
                attributes["error.type"] = "tool_error"
                span.set_status(
                    Status(StatusCode.ERROR, content if self._capture else "tool_error")
                )
            if attributes:
                span.set_attributes(attributes)
        span.end()


def _usage(usage: TokenUsage) -> dict[str, AttributeValue]:
    """The usage attributes, in a dict the caller adds the rest of what it
    knows at the end to: the SDK takes its lock and cleans the values once
    per call, so a span ends with one ``set_attributes``, not one call per key."""
    return {
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
    }


def _turn_error_type(error: BaseException) -> str:
    if isinstance(error, TurnError):
        return error.code
    if isinstance(error, trio.Cancelled) or (
        isinstance(error, BaseExceptionGroup) and error.subgroup(trio.Cancelled) is not None
    ):
        return "cancelled"
    return type(error).__qualname__


def _failed(span: Span, error: BaseException) -> None:
    """A model request or tool run that raised: the class of what failed (the
    backend's error a ``TurnError`` wraps) and its message, which agentik and
    its backends keep free of credentials."""
    cause = error.__cause__ if isinstance(error, TurnError) and error.__cause__ else error
    if isinstance(cause, trio.Cancelled):
        span.set_attribute("error.type", "cancelled")
        span.set_status(Status(StatusCode.ERROR, "cancelled"))
        return
    span.set_attribute("error.type", type(cause).__qualname__)
    # message_of: an exception of outside code may not even print; the span
    # still ends, as the turn does without tracing.
    span.set_status(Status(StatusCode.ERROR, message_of(cause)))


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _arguments(text: str) -> object:
    """A tool call's arguments as JSON when they parse, else the raw text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _call_part(call: ToolCall) -> dict[str, object]:
    return {
        "type": "tool_call",
        "id": call.id,
        "name": call.name,
        "arguments": _arguments(call.arguments),
    }


def _message(message: Message) -> dict[str, object]:
    parts: list[dict[str, object]] = []
    if message.role is Role.TOOL:
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        )
    elif message.content:
        parts.append({"type": "text", "content": message.content})
    parts.extend(_call_part(call) for call in message.tool_calls)
    return {"role": message.role.value, "parts": parts}


def _output(text: str, calls: Sequence[ToolCall], finish_reason: str | None) -> str:
    parts: list[dict[str, object]] = [{"type": "text", "content": text}] if text else []
    parts.extend(_call_part(call) for call in calls)
    reason = finish_reason or ("tool_call" if calls else "stop")
    return _dumps(
        [
            {
                "role": "assistant",
                "parts": parts,
                "finish_reason": _FINISH_REASONS.get(reason, reason),
            }
        ]
    )
