"""Running one tool call: its handler under ``tool_timeout``, its result
capped, any failure an error result the model sees.

A tool's failure is a result, not a crash: ``ToolError`` gives its message,
anything else (``Exception``) the exception's type and text, a timeout says
so. A cancellation is none of these: it propagates (the turn was stopped,
and the machine answers the call ``STOPPED``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from agentik._errors import ToolError
from agentik._json import JsonObject
from agentik._messages import ToolCall
from agentik.agent._builtin_tools import ConversationTool
from agentik.agent._context import cut_to_tokens
from agentik.agent._elicitation import ElicitationRequest, ToolCallContext, current_tool_call
from agentik.agent._failures import describe, message_of
from agentik.toolsets import NamedTool

if TYPE_CHECKING:
    from agentik.agent._turn_host import TurnHost

log = logging.getLogger("agentik.turn")

Announce = Callable[[ElicitationRequest], Awaitable[None]]


async def run_tool(
    conv: TurnHost,
    call: ToolCall,
    tool: NamedTool,
    arguments: JsonObject,
    announce: Announce | None,
) -> tuple[str, bool]:
    """Run ``call`` of ``tool`` with its checked ``arguments``; its result, and
    whether it is an error result. ``announce`` puts a question the tool asks
    the person mid-call into the turn's stream."""
    runtime = conv.runtime
    runtime.stats.tool_calls += 1
    settings = runtime.settings
    timeout = settings.tool_timeout
    result: object = None
    with trio.move_on_after(timeout) as scope:
        # Which conversation runs the tool, for a tool that asks a person mid-call.
        running = current_tool_call.set(
            ToolCallContext(
                conversation_id=conv.conversation_id,
                scope=scope,
                announce=announce,
                call_id=call.id,
                call_seq=_seq_of(conv, call.id),
            )
        )
        try:
            if isinstance(tool, ConversationTool):
                result = await tool.run(conv, arguments)
            else:
                result = await tool.handler(arguments)
        except ToolError as exc:
            return error_result(conv, message_of(exc))
        except Exception as exc:  # a tool's failure is a result, not a crash
            log.warning("tool %r raised %s", call.name, type(exc).__name__, exc_info=True)
            return error_result(conv, f"tool '{call.name}' failed: {describe(exc)}")
        finally:
            current_tool_call.reset(running)
    if scope.cancelled_caught:
        return error_result(conv, f"tool '{call.name}' timed out after {timeout:g} s")
    if not isinstance(result, str):
        return error_result(
            conv, f"tool '{call.name}' returned {type(result).__name__}, expected str"
        )
    result = _cap(result, settings.max_tool_output)
    budget = runtime.budgets.tool_result
    if budget is not None:  # a context policy: at most a share of its window
        policy = settings.context
        assert policy is not None
        result = cut_to_tokens(result, budget, policy.count_tokens)
    return result, False


def _seq_of(conv: TurnHost, call_id: str) -> int:
    """The seq of the assistant message that made call ``call_id``: seqs are
    gapless from ``first_seq`` in the cached history, and the message is one
    of the last few (its results follow it)."""
    history = conv.cache.history
    for index in range(len(history) - 1, -1, -1):
        for call in history[index].tool_calls:
            if call.id == call_id:
                return conv.cache.first_seq + index
    return 0


def error_result(conv: TurnHost, message: str) -> tuple[str, bool]:
    """The error result ``error: <message>``, counted."""
    conv.runtime.stats.tool_errors += 1
    return f"error: {message}", True


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [output truncated: {len(text) - limit} more characters]"
