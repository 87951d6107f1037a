"""One turn of one conversation: the loop between the model and the tools.

Invariants, whatever happens (tool failure, timeout, cancellation, model or
store failure):
- every message is submitted to the store as soon as it exists, and the turn
  reports success only after all of them are committed (it waits once);
- every recorded assistant tool call gets a tool result: a call the turn could
  not finish gets a short error result, written in a shielded scope;
- at most ``max_tool_rounds`` model calls.

The decisions (what to offer, what a call runs) are pure functions of the
conversation's state; this module performs them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from agentik._errors import AgentikError, ModelBackendError, ToolError, TurnError
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.agent._builtin_tools import ConversationTool
from agentik.agent._events import (
    ToolCallFinished,
    ToolCallStarted,
    TurnEvent,
    TurnResult,
)
from agentik.agent._failures import component_error, describe, message_of
from agentik.agent._prompt import PromptContext, render_system_prompt
from agentik.models import (
    ModelRequest,
    ModelResponse,
    StreamingChatModel,
    TextDelta,
    ToolCallDelta,
)
from agentik.toolsets import Error, NamedTool, ToolsetContribution, ToolsetIndex, parse_arguments

if TYPE_CHECKING:
    from agentik.agent._conversation import Conversation
    from agentik.storage import Pending

log = logging.getLogger("agentik.turn")

EmitFn = Callable[[TurnEvent], Awaitable[None]]

# How long a failing or cancelled turn may spend recording the results of
# calls it could not finish, shielded from cancellation.
_CLEANUP_SECONDS = 10.0


@attrs.define
class Turn:
    """The state of one running turn, owned by the conversation task."""

    conversation: Conversation
    emit: EmitFn | None
    start: int
    """Index in the conversation's cached history where this turn begins."""
    pending: list[Pending[Message]] = attrs.Factory(list)
    usage: TokenUsage = TokenUsage()
    unanswered: list[ToolCall] = attrs.Factory(list)
    """Recorded tool calls that have no result yet, oldest first."""

    async def record(self, message: Message, *, idempotency_key: str | None = None) -> None:
        """Submit ``message`` for commit and add it to the cached history."""
        conv = self.conversation
        pending = await conv.runtime.storage.message_store.submit(
            conv.conversation_id, message, idempotency_key=idempotency_key
        )
        self.pending.append(pending)
        conv.history.append(message)

    async def commit(self) -> list[Message]:
        """Wait until every submitted message is committed; return them as stored."""
        # Writes commit in order, so once the last is done all are: read them
        # without a checkpoint each.
        if self.pending and not self.pending[-1].done:
            await self.pending[-1].wait()
        stored = [p.result() if p.done else await p.wait() for p in self.pending]
        self.conversation.history[self.start :] = stored
        return stored

    async def run(self, text: str | None, idempotency_key: str | None) -> TurnResult:
        """Run the turn; ``text`` None resumes an unfinished turn without a new message."""
        try:
            return await self._loop(text, idempotency_key)
        finally:
            if self.unanswered or self.pending:
                await self._settle()

    async def _loop(self, text: str | None, idempotency_key: str | None) -> TurnResult:
        conv = self.conversation
        settings = conv.runtime.settings
        if text is not None:
            await self.record(Message(Role.USER, text), idempotency_key=idempotency_key)
            if idempotency_key is not None:
                # Only now: the store has accepted the message and the cache
                # holds it at ``start``. Remembered before ``record``, a turn
                # cancelled while the store made room left the key naming the
                # slot the next turn's message then took.
                conv.keys[idempotency_key] = self.start
        for _ in range(settings.max_tool_rounds):
            contributions, index = conv.runtime.toolsets()
            response = await self._call_model(contributions, index)
            if response.usage is not None:
                self.usage += response.usage
            if not response.tool_calls:
                answer = response.text or ""
                await self.record(Message(Role.ASSISTANT, answer, usage=response.usage))
                stored = await self.commit()
                self.pending.clear()
                return TurnResult(answer, stored, self.usage)
            calls = response.tool_calls
            await self.record(
                Message(Role.ASSISTANT, response.text or "", calls, usage=response.usage)
            )
            self.unanswered = list(calls)
            for call in calls:
                if self.emit is not None:
                    await self.emit(ToolCallStarted(call))
                content, is_error = await self._run_call(call, index)
                await self.record(Message(Role.TOOL, content, tool_call_id=call.id))
                self.unanswered.pop(0)
                if self.emit is not None:
                    await self.emit(ToolCallFinished(call, content, is_error))
        raise TurnError(
            f"the turn stopped after {settings.max_tool_rounds} model calls without an answer"
            " (max_tool_rounds); every tool call made has its result",
            code="step_limit",
        )

    async def _call_model(
        self, contributions: tuple[ToolsetContribution, ...], index: ToolsetIndex
    ) -> ModelResponse:
        conv = self.conversation
        runtime = conv.runtime
        active = conv.activation.active_names() if contributions else frozenset[str]()
        context = PromptContext(
            conversation_id=conv.conversation_id,
            contributions=index,
            active_toolsets=active,
            skills=await runtime.skills(),
            memory=conv.memory,
            reflections=await runtime.reflections(),
        )
        system = Message(Role.SYSTEM, render_system_prompt(runtime.contributors, context))
        request = ModelRequest(
            (system, *conv.history), offered_tools(runtime.offered_core, index, active)
        )
        stats = runtime.stats
        stats.model_calls += 1
        started = trio.current_time()
        streaming = self.emit is not None and isinstance(runtime.model, StreamingChatModel)
        # Whatever the backend raises fails this turn only: an agentik error
        # is the model failing (model_error), anything else a bug in it.
        try:
            if streaming:
                response = await self._stream_model(request)
            else:
                response = await runtime.model.complete(request)
        except AgentikError as exc:
            stats.model_errors += 1
            raise TurnError(f"the model failed: {message_of(exc)}", code="model_error") from exc
        except Exception as exc:
            stats.model_errors += 1
            raise component_error("the model", exc) from exc
        finally:
            stats.model_latency.observe(trio.current_time() - started)
        if not isinstance(response, ModelResponse):
            stats.model_errors += 1
            raise TurnError(
                f"the model returned {type(response).__name__}, expected ModelResponse",
                code="model_error",
            )
        if self.emit is not None and not streaming and response.text:
            await self.emit(TextDelta(response.text))
        return response

    async def _stream_model(self, request: ModelRequest) -> ModelResponse:
        model = self.conversation.runtime.model
        assert isinstance(model, StreamingChatModel)
        assert self.emit is not None
        final: ModelResponse | None = None
        stream = model.stream(request)
        try:
            async for event in stream:
                if isinstance(event, ModelResponse):
                    final = event
                elif isinstance(event, TextDelta | ToolCallDelta):
                    await self.emit(event)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        if final is None:
            raise ModelBackendError("the model's stream ended without a final response")
        return final

    async def _run_call(self, call: ToolCall, index: ToolsetIndex) -> tuple[str, bool]:
        """Run one tool call; any failure becomes an error result the model sees."""
        conv = self.conversation
        runtime = conv.runtime
        runtime.stats.tool_calls += 1
        active = conv.activation.active_names() if len(index) else frozenset[str]()
        decision = index.dispatch(active, call, runtime.core_tools)
        if isinstance(decision, Error):
            return self._error(decision.message)
        if decision.activates is not None:
            conv.activation.enable(decision.activates)
        elif decision.toolset is not None:
            conv.activation.touch(decision.toolset)
        tool = decision.tool
        try:
            arguments = parse_arguments(tool, call.arguments)
        except ToolError as exc:
            return self._error(str(exc))
        timeout = runtime.settings.tool_timeout
        result: object = None
        with trio.move_on_after(timeout) as scope:
            try:
                if isinstance(tool, ConversationTool):
                    result = await tool.run(conv, arguments)
                else:
                    result = await tool.handler(arguments)
            except ToolError as exc:
                return self._error(message_of(exc))
            except Exception as exc:  # a tool's failure is a result, not a crash
                log.warning("tool %r raised %s", call.name, type(exc).__name__, exc_info=True)
                return self._error(f"tool '{call.name}' failed: {describe(exc)}")
        if scope.cancelled_caught:
            return self._error(f"tool '{call.name}' timed out after {timeout:g} s")
        if not isinstance(result, str):
            return self._error(f"tool '{call.name}' returned {type(result).__name__}, expected str")
        return _cap(result, runtime.settings.max_tool_output), False

    def _error(self, message: str) -> tuple[str, bool]:
        self.conversation.runtime.stats.tool_errors += 1
        return f"error: {message}", True

    async def _settle(self) -> None:
        """After a failure or cancellation: answer unanswered calls, then wait for
        every submitted write, shielded, so what the turn recorded is valid and
        committed before the failure is reported."""
        conv = self.conversation
        with trio.move_on_after(_CLEANUP_SECONDS, shield=True):
            try:
                for call in self.unanswered:
                    await self.record(
                        Message(
                            Role.TOOL,
                            "error: the turn was stopped before this tool call finished",
                            tool_call_id=call.id,
                        )
                    )
                self.unanswered.clear()
                stored = [await pending.wait() for pending in self.pending]
                conv.history[self.start :] = stored
            except AgentikError as exc:
                conv.stale = True
                log.error(
                    "conversation %r: could not settle a failed turn: %s", conv.conversation_id, exc
                )
        if self.unanswered or not all(p.done for p in self.pending):
            conv.stale = True
        # Writes accepted but not yet committed will still commit: the next
        # reload must wait for them, or it would miss them.
        conv.inflight.extend(p for p in self.pending if not p.done)


def offered_tools(
    core: Sequence[NamedTool], index: ToolsetIndex, active: frozenset[str]
) -> tuple[NamedTool, ...]:
    """What the model is offered: core tools (with enable/disable when toolsets
    exist) and the tools of active toolsets; inactive toolsets stay hidden."""
    if not active:
        return tuple(core)
    return (*core, *index.tools_for(active))


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [output truncated: {len(text) - limit} more characters]"
