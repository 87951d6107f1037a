"""The benchmark's scripted workload: a model that makes ``tool_calls`` tool
calls per turn (one per model call) and then answers ``reply_chars`` of text,
and the tool it calls. Constant cost per call, whatever the history length."""

from __future__ import annotations

from agentik._messages import Role, TokenUsage, ToolCall
from agentik.models import ModelRequest, ModelResponse, Responder
from agentik.toolsets import NamedTool, tool

BENCH_TOOL = "bench_clock"


@tool(name=BENCH_TOOL)
async def _clock() -> str:
    """The time of day."""
    return "12:00"


def bench_tool() -> NamedTool:
    """The tool the scripted benchmark model calls: a ``@tool``, as a user's
    would be, so its arguments are checked by the compiled closures."""
    return _clock


def workload_responder(tool_calls: int, reply_chars: int) -> Responder:
    """``tool_calls`` calls of the bench tool per turn, then a text answer."""
    if tool_calls < 0 or reply_chars < 0:
        raise ValueError("tool_calls and reply_chars must be >= 0")
    reply = ("ok " * (reply_chars // 3 + 1))[:reply_chars]
    usage = TokenUsage(prompt_tokens=16, completion_tokens=max(1, reply_chars // 4))

    def respond(request: ModelRequest) -> ModelResponse:
        messages = request.messages
        made = 0
        for message in reversed(messages):
            if message.role is Role.USER:
                break
            if message.role is Role.TOOL:
                made += 1
        if made < tool_calls:
            call = ToolCall(f"call_{len(messages)}", BENCH_TOOL, "{}")
            return ModelResponse(tool_calls=(call,), usage=usage, finish_reason="tool_calls")
        return ModelResponse(text=reply, usage=usage, finish_reason="stop")

    return respond
