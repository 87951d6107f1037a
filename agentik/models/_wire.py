"""The Chat Completions wire format, sans I/O: request bodies out, responses in.

``request_body`` maps a ``ModelRequest`` to the JSON body; ``decode_completion``
maps a non-streaming response to a ``ModelResponse``; ``ChunkAccumulator``
takes streamed chunks one at a time, hands back the deltas each carries, and
builds the final ``ModelResponse``. Invariants:

- Anything malformed raises ``ModelBackendError`` naming what was expected.
- Tool-call fragments are accumulated per ``index`` (fragments of different
  calls may interleave, even within one chunk).
- With ``finish_reason == "length"`` a tool call whose arguments are not one
  complete JSON object was cut off: it is dropped, never returned as runnable.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

import attrs

from agentik._errors import ModelBackendError
from agentik._json import JsonObject, JsonValue
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik._parts import ImagePart, TextPart
from agentik.models._protocol import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    TextDelta,
    ToolCallDelta,
)
from agentik.models._response_format import response_format

RESERVED_PARAMS = frozenset({"model", "messages", "tools", "stream", "stream_options"})
"""Body keys agentik sets itself; extra params may not override them."""


def request_body(
    model: str,
    request: ModelRequest,
    params: Mapping[str, JsonValue],
    *,
    stream: bool,
    accepts: frozenset[str] = frozenset({"image", "file"}),
) -> JsonObject:
    """The JSON body of one Chat Completions call; parts of a kind the
    backend does not take (``accepts``) go as a line of text saying so."""
    body: JsonObject = {
        "model": model,
        "messages": [_message(m, accepts) for m in request.messages],
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
    body.update(params)
    if request.output_tool is not None:  # a typed turn by a final-answer tool
        body.setdefault("tool_choice", "required")
    elif request.output_schema is not None:  # a typed turn: over any response_format in params
        body["response_format"] = response_format(request.output_schema)
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _message(message: Message, accepts: frozenset[str]) -> JsonObject:
    if message.role is Role.TOOL:
        if message.tool_call_id is None:
            raise ModelBackendError("a tool message needs a tool_call_id, got None")
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role is Role.ASSISTANT and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    if message.parts:
        return {"role": message.role.value, "content": content_parts(message, accepts)}
    return {"role": message.role.value, "content": message.content}


def content_parts(
    message: Message, accepts: frozenset[str] = frozenset({"image", "file"})
) -> list[JsonValue]:
    """A message with parts as OpenAI's content parts: its text first (when it
    has any), then each part in order. Inline data goes as a ``data:`` URL;
    a file by url as ``file_id`` (how LiteLLM takes a file's URL). A part of
    a kind not in ``accepts`` (a text-only backend asked to reflect on a
    history with images) is a text line naming what was left out."""
    out: list[JsonValue] = []
    if message.content:
        out.append({"type": "text", "text": message.content})
    for part in message.parts:
        if isinstance(part, TextPart):
            out.append({"type": "text", "text": part.text})
            continue
        kind = "image" if isinstance(part, ImagePart) else "file"
        if kind not in accepts:
            out.append({"type": "text", "text": f"[{kind} not shown: this model takes no {kind}s]"})
            continue
        url = part.url if part.data is None else _data_url(part.data, part.media_type)
        if isinstance(part, ImagePart):
            out.append({"type": "image_url", "image_url": {"url": url}})
            continue
        file: JsonObject = {"file_id": url} if part.data is None else {"file_data": url}
        if part.filename is not None:
            file["filename"] = part.filename
        out.append({"type": "file", "file": file})
    return out


def _data_url(data: bytes, media_type: str | None) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def parse_json(text: str | bytes, what: str) -> JsonValue:
    """Parse JSON text, or raise a clear error quoting the start of it."""
    try:
        value: JsonValue = json.loads(text)
    except ValueError:
        shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise ModelBackendError(f"{what} is not JSON: {_clip(shown)!r}") from None
    return value


def error_message(body: JsonValue) -> str | None:
    """The message of an ``{"error": {...}}`` body (OpenAI, LiteLLM, vLLM), if it is one."""
    if not isinstance(body, dict) or "error" not in body:
        return None
    error = body["error"]
    if isinstance(error, dict):
        message = error.get("message")
        kind = error.get("type") or error.get("code")
        text = message if isinstance(message, str) else json.dumps(error)
        return f"{text} ({kind})" if isinstance(kind, str | int) and kind != "" else text
    return error if isinstance(error, str) else json.dumps(error)


def decode_completion(body: JsonValue) -> ModelResponse:
    """A non-streaming ``chat.completion`` body as a ``ModelResponse``."""
    reported = error_message(body)
    if reported is not None:
        raise ModelBackendError(f"model backend reported an error: {reported}")
    data = _object(body, "completion")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ModelBackendError(f"completion 'choices' must be a non-empty list, got {choices!r}")
    choice = _object(choices[0], "choices[0]")
    message = _object(choice.get("message"), "choices[0].message")
    finish_reason = _optional_str(choice.get("finish_reason"), "choices[0].finish_reason")
    calls: list[ToolCall] = []
    raw_calls = message.get("tool_calls")
    if raw_calls is not None:
        if not isinstance(raw_calls, list):
            raise ModelBackendError(f"message 'tool_calls' must be a list, got {raw_calls!r}")
        calls = [_tool_call(raw, index) for index, raw in enumerate(raw_calls)]
    content = _optional_str(message.get("content"), "choices[0].message.content")
    return _response(content or None, calls, decode_usage(data.get("usage")), finish_reason)


def _tool_call(raw: JsonValue, index: int) -> ToolCall:
    where = f"tool_calls[{index}]"
    call = _object(raw, where)
    function = _object(call.get("function"), f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ModelBackendError(f"{where}.function.name must be a non-empty string, got {name!r}")
    arguments = function.get("arguments")
    if isinstance(arguments, dict):  # some servers send an object, not its JSON text
        arguments = json.dumps(arguments)
    if not isinstance(arguments, str):
        raise ModelBackendError(f"{where}.function.arguments must be a string, got {arguments!r}")
    call_id = _optional_str(call.get("id"), f"{where}.id")
    return ToolCall(id=call_id or f"call_{index}", name=name, arguments=arguments)


def decode_usage(raw: JsonValue) -> TokenUsage | None:
    """``usage`` as a ``TokenUsage``; None when the backend sent none."""
    if raw is None:
        return None
    usage = _object(raw, "usage")
    prompt = _count(usage.get("prompt_tokens", 0), "usage prompt_tokens")
    completion = _count(usage.get("completion_tokens", 0), "usage completion_tokens")
    return TokenUsage(prompt_tokens=prompt, completion_tokens=completion)


def _count(value: JsonValue, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ModelBackendError(f"{what} must be an integer >= 0, got {_clip(repr(value))}")
    return value


def _response(
    text: str | None, calls: list[ToolCall], usage: TokenUsage | None, finish_reason: str | None
) -> ModelResponse:
    if finish_reason == "length":
        calls = [call for call in calls if _is_json_object(call.arguments)]
    return ModelResponse(text=text, tool_calls=calls, usage=usage, finish_reason=finish_reason)


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


@attrs.define
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = attrs.field(factory=list)


@attrs.define
class ChunkAccumulator:
    """Builds one streamed answer from its ``chat.completion.chunk`` objects."""

    _text: list[str] = attrs.field(factory=list, init=False)
    _calls: dict[int, _PartialCall] = attrs.field(factory=dict, init=False)
    _usage: TokenUsage | None = attrs.field(default=None, init=False)
    finish_reason: str | None = attrs.field(default=None, init=False)
    """The reason the model stopped, once a chunk has said it."""

    def feed(self, chunk: JsonValue) -> list[TextDelta | ToolCallDelta]:
        """Take one parsed chunk; return the deltas it carries, in order."""
        reported = error_message(chunk)
        if reported is not None:
            raise ModelBackendError(f"model backend reported an error mid-stream: {reported}")
        data = _object(chunk, "stream chunk")
        if data.get("usage") is not None:
            self._usage = decode_usage(data["usage"])
        choices = data.get("choices", [])
        if not isinstance(choices, list):
            raise ModelBackendError(f"chunk 'choices' must be a list, got {choices!r}")
        events: list[TextDelta | ToolCallDelta] = []
        for raw_choice in choices:
            choice = _object(raw_choice, "chunk choice")
            if choice.get("index", 0) != 0:
                continue  # agentik asks for one choice; ignore any others
            events.extend(self._delta(choice.get("delta")))
            reason = _optional_str(choice.get("finish_reason"), "chunk finish_reason")
            if reason is not None:
                self.finish_reason = reason
        return events

    def _delta(self, raw: JsonValue) -> list[TextDelta | ToolCallDelta]:
        if raw is None:
            return []
        delta = _object(raw, "chunk delta")
        events: list[TextDelta | ToolCallDelta] = []
        content = _optional_str(delta.get("content"), "delta content")
        if content:
            self._text.append(content)
            events.append(TextDelta(text=content))
        fragments = delta.get("tool_calls")
        if fragments is None:
            return events
        if not isinstance(fragments, list):
            raise ModelBackendError(f"delta 'tool_calls' must be a list, got {fragments!r}")
        events.extend(self._fragment(fragment) for fragment in fragments)
        return events

    def _fragment(self, raw: JsonValue) -> ToolCallDelta:
        fragment = _object(raw, "tool-call delta")
        index = _count(fragment.get("index"), "tool-call delta index")
        function = fragment.get("function")
        function = {} if function is None else _object(function, "tool-call delta function")
        call_id = _optional_str(fragment.get("id"), "tool-call delta id") or None
        name = _optional_str(function.get("name"), "tool-call delta name") or None
        arguments = _optional_str(function.get("arguments"), "tool-call delta arguments") or ""
        partial = self._calls.setdefault(index, _PartialCall())
        new_id = call_id if partial.id is None else None
        if new_id is not None:
            partial.id = new_id
        new_name = name if name is not None and name != partial.name else None
        if new_name is not None:  # the openai SDK concatenates name fragments; so do we
            partial.name += new_name
        partial.arguments.append(arguments)
        return ToolCallDelta(index=index, arguments=arguments, id=new_id, name=new_name)

    def finish(self) -> ModelResponse:
        """The complete answer; call once the stream has ended."""
        calls: list[ToolCall] = []
        for index in sorted(self._calls):
            partial = self._calls[index]
            if not partial.name:
                raise ModelBackendError(f"streamed tool call at index {index} has no name")
            calls.append(
                ToolCall(
                    id=partial.id or f"call_{index}",
                    name=partial.name,
                    arguments="".join(partial.arguments),
                )
            )
        return _response("".join(self._text) or None, calls, self._usage, self.finish_reason)


def whole_answer_events(answer: ModelResponse) -> list[ModelStreamEvent]:
    """A complete answer as one stream: its text, each call whole, then itself."""
    events: list[ModelStreamEvent] = [TextDelta(text=answer.text)] if answer.text else []
    events.extend(
        ToolCallDelta(index=i, arguments=call.arguments, id=call.id, name=call.name)
        for i, call in enumerate(answer.tool_calls)
    )
    events.append(answer)
    return events


def _object(value: JsonValue, what: str) -> JsonObject:
    if not isinstance(value, dict):
        raise ModelBackendError(f"{what} must be a JSON object, got {_clip(repr(value))}")
    return value


def _optional_str(value: JsonValue, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ModelBackendError(f"{what} must be a string or null, got {_clip(repr(value))}")
    return value


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
