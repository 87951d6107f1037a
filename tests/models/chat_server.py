"""A scripted Chat Completions server on 127.0.0.1, for the model-backend tests.

It is a real HTTP server (hypercorn's trio worker, port 0) running a raw ASGI
app in the test's nursery. Each request must be ``POST /v1/chat/completions``
with a JSON body that the official ``openai`` package's request types accept
strictly: a missing, mistyped or misspelled field is recorded as a problem
(and answered 400), and the fixture fails the test on any problem. Each
request gets the next scripted reply; the replies themselves are built from
``openai``'s response models (``completion``, ``chunk``), so they are what a
real server would send.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionContentPartParam
from openai.types.chat import completion_create_params as params
from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from tests.asgi import answer_lifespan, read_body, serve_on_loopback

_STREAMING = TypeAdapter(params.CompletionCreateParamsStreaming)
_NON_STREAMING = TypeAdapter(params.CompletionCreateParamsNonStreaming)
_CONTENT_PART = TypeAdapter(ChatCompletionContentPartParam)


def _content_parts_problem(body: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """Each user message's list of content parts checked part by part (as a
    lazy ``Iterable`` inside the message union, pydantic's first failed union
    branch consumes the parts and the echo comes back empty), then replaced by
    a string for the whole-body check."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, None
    checked: list[object] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(message, dict) and isinstance(content, list):
            for part in content:
                try:
                    echoed = _CONTENT_PART.dump_python(
                        _CONTENT_PART.validate_python(part, strict=True), mode="json"
                    )
                except (ValidationError, PydanticSerializationError) as exc:
                    return body, f"openai types reject the content part {part!r}: {exc}"
                if echoed != part:
                    return body, f"a content part has fields the openai types do not know: {part!r}"
            message = {**message, "content": "(parts checked)"}
        checked.append(message)
    return {**body, "messages": checked}, None


def request_problem(body: object) -> str | None:
    """Why ``body`` is not a valid Chat Completions request, or None if it is.

    Pydantic ignores unknown TypedDict keys and validates ``Iterable`` fields
    lazily, so the body is validated strictly, dumped back (which forces the
    lazy parts, with serializer warnings as errors) and must come back equal:
    a dropped key means an unknown or misspelled field.
    """
    if not isinstance(body, dict):
        return f"body is not a JSON object: {body!r}"
    body, problem = _content_parts_problem(body)
    if problem is not None:
        return problem
    adapter = _STREAMING if body.get("stream") else _NON_STREAMING
    try:
        echoed = adapter.dump_python(
            adapter.validate_python(body, strict=True), mode="json", warnings="error"
        )
    except (ValidationError, PydanticSerializationError) as exc:
        return f"openai types reject the body: {exc}"
    if echoed != body:
        return f"body has fields the openai types do not know: {body!r} != {echoed!r}"
    return None


def completion(
    content: str | None = None,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    *,
    finish_reason: str = "stop",
    usage: tuple[int, int] | None = (7, 3),
) -> dict[str, Any]:
    """A ``chat.completion`` body; ``tool_calls`` are ``(id, name, arguments)``."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in tool_calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = _usage(usage)
    return ChatCompletion.model_validate(body, strict=True).model_dump(mode="json")


def chunk(
    content: str | None = None,
    tool_calls: Sequence[dict[str, Any]] = (),
    *,
    finish_reason: str | None = None,
    role: bool = False,
    usage: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk``; with ``usage`` it is the final usage-only chunk."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [],
    }
    if usage is not None:
        body["usage"] = _usage(usage)
    else:
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if content is not None:
            delta["content"] = content
        if tool_calls:
            delta["tool_calls"] = list(tool_calls)
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
    ChatCompletionChunk.model_validate(body, strict=True)
    return body


def call_delta(
    index: int, arguments: str | None = None, *, id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """One tool-call fragment of a chunk's delta."""
    fragment: dict[str, Any] = {"index": index}
    if id is not None:
        fragment["id"] = id
        fragment["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        fragment["function"] = function
    return fragment


def _usage(counts: tuple[int, int]) -> dict[str, int]:
    prompt, completion_tokens = counts
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }


@attrs.frozen
class Json:
    """Answer with a JSON body."""

    body: object
    status: int = 200
    headers: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Raw:
    """Answer with raw bytes (say, an HTML error page); ``cut`` drops the
    connection after them, before the body is complete."""

    body: bytes
    status: int = 200
    content_type: str = "text/html"
    cut: bool = False


@attrs.frozen
class Sse:
    """Answer with an SSE stream: each event a JSON object (or raw data text),
    then ``[DONE]`` unless ``done`` is false; ``cut`` drops the connection
    after the events, without finishing the chunked body; ``hang`` then sends
    nothing more, ever."""

    events: Sequence[object]
    done: bool = True
    cut: bool = False
    hang: bool = False


@attrs.frozen
class Hang:
    """Never answer."""


@attrs.frozen(eq=False)
class Held:
    """Answer ``reply`` once ``until`` is set (the test decides when)."""

    reply: Json | Raw | Sse
    until: trio.Event


Reply = Json | Raw | Sse | Hang | Held


@attrs.frozen
class Received:
    """One request the server got."""

    headers: Mapping[str, str]
    body: Any
    client_port: int = 0
    """The client's port: one per connection, so reuse of a kept-alive connection shows."""


@attrs.define
class ChatServer:
    """The scripted server; ``script()`` queues replies, ``received`` records requests."""

    base_url: str = ""
    received: list[Received] = attrs.field(factory=list)
    problems: list[str] = attrs.field(factory=list)
    in_flight: int = 0
    """Requests being answered now."""
    most_in_flight: int = 0
    _replies: deque[Reply] = attrs.field(factory=deque)

    def script(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    async def start(self, nursery: trio.Nursery) -> None:
        self.base_url = f"{await serve_on_loopback(nursery, self.app)}/v1"

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        raw = await read_body(receive)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        client = scope.get("client") or ("", 0)
        self.received.append(Received(headers=headers, body=body, client_port=client[1]))
        problem = self._problem(scope, headers, body)
        if problem is None and not self._replies:
            problem = f"no scripted reply left for request {len(self.received)}"
        if problem is not None:
            self.problems.append(problem)
            await _send(send, 400, "application/json", json.dumps({"error": {"message": problem}}))
            return
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await _answer(self._replies.popleft(), send)
        finally:
            self.in_flight -= 1

    def _problem(
        self, scope: dict[str, Any], headers: Mapping[str, str], body: object
    ) -> str | None:
        if (scope["method"], scope["path"]) != ("POST", "/v1/chat/completions"):
            return f"unexpected {scope['method']} {scope['path']}"
        if headers.get("content-type") != "application/json":
            return f"unexpected content-type {headers.get('content-type')!r}"
        return request_problem(body)


async def _answer(reply: Reply, send: Any) -> None:
    if isinstance(reply, Hang):
        await trio.sleep_forever()
    if isinstance(reply, Held):
        await reply.until.wait()
        reply = reply.reply
    if isinstance(reply, Json):
        await _send(send, reply.status, "application/json", json.dumps(reply.body), reply.headers)
    elif isinstance(reply, Raw) and reply.cut:
        await _start(send, reply.status, reply.content_type, {})
        await send({"type": "http.response.body", "body": reply.body, "more_body": True})
    elif isinstance(reply, Raw):
        await _send(send, reply.status, reply.content_type, reply.body)
    elif isinstance(reply, Sse):
        await _start(send, 200, "text/event-stream", {})
        frames = [e if isinstance(e, str) else json.dumps(e) for e in reply.events]
        if reply.done:
            frames.append("[DONE]")
        for frame in frames:
            body = f"data: {frame}\n\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": True})
        if reply.hang:
            await trio.sleep_forever()
        if not reply.cut:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # when cut, returning now closes the connection mid-body


async def _start(send: Any, status: int, content_type: str, headers: Mapping[str, str]) -> None:
    pairs = [(b"content-type", content_type.encode())]
    pairs += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": pairs})


async def _send(
    send: Any, status: int, content_type: str, body: str | bytes, headers: Mapping[str, str] = {}
) -> None:
    await _start(send, status, content_type, headers)
    data = body.encode() if isinstance(body, str) else body
    await send({"type": "http.response.body", "body": data, "more_body": False})
