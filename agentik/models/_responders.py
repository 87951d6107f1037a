"""Ready-made responders for ``ScriptedModel``: the demo model and the benchmark model.

Both are pure functions of the request (no state, no clock, no randomness),
so any number of conversations can share them and every run is identical.
Tool-call ids are ``call_<n>`` with ``n`` the number of messages in the
request, which is unique within a conversation.
"""

from __future__ import annotations

import json
import re

from agentik._errors import ModelBackendError
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.models._protocol import ModelRequest, ModelResponse
from agentik.models._scripted import Responder

_TOOL_NAME_CHARS = "A-Za-z0-9_-"


def demo_responder(request: ModelRequest) -> ModelResponse:
    """The built-in demo model, used when no real model is configured.

    - The last message is the user's and names an offered tool (as a whole
      word, e.g. ``call time_now``): it calls that tool (the earliest named),
      with the JSON object that follows the name as arguments, else ``{}``.
    - The last message is the user's otherwise: it echoes it,
      ``You said: <text>``.
    - The last messages are tool results: it summarises them,
      ``<tool> returned: <result>``, one line each.
    - A typed request (``output_schema``) whose last message is the user's:
      it answers with that message as it is, so a JSON message comes back as
      the turn's output (and anything else fails ``invalid_output``).

    Usage is a rough count (one token per four characters), so token
    statistics have something to show.
    """
    if not request.messages:
        return ModelResponse(text="Hello! Say something.", finish_reason="stop")
    last = request.messages[-1]
    # ``_tokens`` of each, summed without a call per message (the history grows).
    prompt_tokens = sum([(len(m.content) + 3) // 4 for m in request.messages])
    if last.role is Role.TOOL:
        text = _summarise_results(request.messages)
        return _text_answer(text, prompt_tokens)
    if request.output_schema is not None and last.role is Role.USER:
        return _text_answer(last.content, prompt_tokens)
    call = _named_call(last.content, request) if last.role is Role.USER else None
    if call is None:
        return _text_answer(f"You said: {last.content}", prompt_tokens)
    return ModelResponse(
        tool_calls=(call,),
        usage=TokenUsage(prompt_tokens=prompt_tokens, completion_tokens=_tokens(call.arguments)),
        finish_reason="tool_calls",
    )


def _text_answer(text: str, prompt_tokens: int) -> ModelResponse:
    return ModelResponse(
        text=text,
        usage=TokenUsage(prompt_tokens=prompt_tokens, completion_tokens=_tokens(text)),
        finish_reason="stop",
    )


def _tokens(text: str) -> int:
    return -(-len(text) // 4)


def _named_call(text: str, request: ModelRequest) -> ToolCall | None:
    """A call of the offered tool that ``text`` names first, if it names one."""
    mentions = []
    for tool in request.tools:
        if tool.name not in text:
            continue  # the regex would not match: skip building and looking it up
        pattern = rf"(?<![{_TOOL_NAME_CHARS}]){re.escape(tool.name)}(?![{_TOOL_NAME_CHARS}])"
        found = re.search(pattern, text)
        if found is not None:
            mentions.append((found.start(), found.end(), tool.name))
    if not mentions:
        return None
    _, end, name = min(mentions)
    return ToolCall(
        id=f"call_{len(request.messages)}", name=name, arguments=_arguments_after(text[end:])
    )


def _arguments_after(rest: str) -> str:
    """The JSON object that opens ``rest`` (after blanks), re-encoded; else ``{}``."""
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        try:
            value, _ = json.JSONDecoder().raw_decode(stripped)
        except ValueError:
            return "{}"
        if isinstance(value, dict):
            return json.dumps(value)
    return "{}"


def _summarise_results(messages: tuple[Message, ...]) -> str:
    """One ``<tool> returned: <result>`` line per trailing tool message."""
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    results: list[Message] = []
    for message in reversed(messages):
        if message.role is not Role.TOOL:
            break
        results.append(message)
    lines = [
        f"{names.get(m.tool_call_id or '', 'the tool')} returned: {m.content}"
        for m in reversed(results)
    ]
    return "\n".join(lines)


def bench_responder(tool: str, *, arguments: str = "{}", reply_chars: int = 64) -> Responder:
    """A responder for load benchmarks: one tool call per turn.

    When the last message is the user's it calls ``tool`` with ``arguments``;
    otherwise (a tool result came back) it answers a fixed text of
    ``reply_chars`` characters. Its cost per call is constant, whatever the
    history's length, so the benchmark measures agentik, not the responder.
    """
    if reply_chars < 0:
        raise ModelBackendError(f"reply_chars must be >= 0, got {reply_chars!r}")
    reply = ("ok " * (reply_chars // 3 + 1))[:reply_chars]
    reply_usage = TokenUsage(prompt_tokens=16, completion_tokens=_tokens(reply))
    call_usage = TokenUsage(prompt_tokens=16, completion_tokens=_tokens(arguments))

    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages and request.messages[-1].role is Role.USER:
            call = ToolCall(id=f"call_{len(request.messages)}", name=tool, arguments=arguments)
            return ModelResponse(tool_calls=(call,), usage=call_usage, finish_reason="tool_calls")
        return ModelResponse(text=reply, usage=reply_usage, finish_reason="stop")

    return respond
