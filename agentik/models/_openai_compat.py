"""``OpenAICompatibleModel``: the Chat Completions API over httpx, on trio.

The I/O shell around ``_wire`` (the format), ``_sse`` (stream framing) and
``_retry`` (the policy). Invariants:

- Every failure leaves as ``ModelBackendError``; the API key (and any other
  credential it sends) appears in no message and no repr, and is masked in
  every body it reads, every answer it decodes and the assembled text of
  every stream, before a delta is yielded (``_redact``), so no answer can
  carry it onwards, however the backend splits or escapes it.
- One deadline, ``timeout`` seconds after the call starts, bounds the whole
  call: every attempt, every backoff, and every read of a stream.
- Retries are bounded (``RetryPolicy.max_retries``). A stream is retried only
  before its first event was yielded; a stream cut after that raises.
- The object holds no per-call state, so any number of conversations can
  share one instance (and its connection pool).
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from functools import partial
from types import TracebackType
from typing import Self, TypeAlias, TypeVar, final

import httpx
import trio

from agentik._errors import ModelBackendError
from agentik._json import JsonValue
from agentik.models._protocol import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    TextDelta,
    ToolCallDelta,
)
from agentik.models._redact import Redactor, StreamMasker
from agentik.models._retry import RetryPolicy
from agentik.models._sse import SSEDecoder
from agentik.models._wire import (
    RESERVED_PARAMS,
    ChunkAccumulator,
    decode_completion,
    error_message,
    parse_json,
    request_body,
)

Sleep: TypeAlias = Callable[[float], Awaitable[None]]
"""How to wait between attempts; ``trio.sleep`` unless a test injects another."""

_T = TypeVar("_T")

DEFAULT_RETRY = RetryPolicy()
"""The openai SDK's policy: 2 retries, 0.5 s doubling to 8 s, Retry-After up to 120 s."""


class _RetryableFailure(ModelBackendError):
    """One failed attempt that another attempt might fix. Never leaves this module."""

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers: Mapping[str, str] = headers or {}


@final
class OpenAICompatibleModel:
    """A ``StreamingChatModel`` speaking the OpenAI Chat Completions API.

    Works with OpenAI, vLLM, LiteLLM's proxy, llama.cpp's server, Ollama and
    others. Like the openai SDK, ``base_url`` ends in ``/v1`` and requests go
    to ``{base_url}/chat/completions``.

    Args:
        base_url: ``http(s)://host[:port]/…/v1``.
        model: The model name the server expects.
        api_key: Sent as ``Authorization: Bearer …`` when given.
        client: An ``httpx.AsyncClient`` to share (its pool, proxies, TLS
            settings); the caller then closes it. Without one, the model makes
            its own, closed by ``aclose()`` / ``async with``.
        params: Extra body fields for every call (``temperature``,
            ``max_tokens``, ``tool_choice`` …); they cannot replace ``model``,
            ``messages``, ``tools``, ``stream`` or ``stream_options``.
        headers: Extra HTTP headers for every call.
        timeout: Seconds one call may take in total, retries included.
        retry: When and how patiently to retry.
        sleep: Waits between attempts (inject a fake in tests).
        jitter: Returns a number in [0, 1) for the backoff jitter.
    """

    __slots__ = (
        "_api_key",
        "_base_url",
        "_client",
        "_headers",
        "_jitter",
        "_model",
        "_owns_client",
        "_params",
        "_redact",
        "_retry",
        "_sleep",
        "_timeout",
        "_url",
    )

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        params: Mapping[str, JsonValue] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        sleep: Sleep = trio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ModelBackendError(
                f"base_url must start with http:// or https://, got {base_url!r}"
            )
        reserved = sorted(RESERVED_PARAMS.intersection(params or {}))
        if reserved:
            raise ModelBackendError(f"params may not set {', '.join(reserved)}; agentik sets them")
        if not timeout > 0:
            raise ModelBackendError(f"timeout must be > 0 seconds, got {timeout!r}")
        self._base_url = base_url.rstrip("/")
        self._url = f"{self._base_url}/chat/completions"
        self._model = model
        self._api_key = api_key
        self._params: dict[str, JsonValue] = dict(params or {})
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._redact = Redactor.for_credentials(api_key, self._headers, base_url)
        self._timeout = timeout
        self._retry = retry
        self._sleep = sleep
        self._jitter = jitter
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=None)

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        return (
            f"OpenAICompatibleModel(base_url={self._base_url!r}, model={self._model!r}, "
            f"api_key={key})"
        )

    provider_name = "openai"
    """``gen_ai.provider.name`` on spans: the API this backend speaks."""

    @property
    def model_name(self) -> str:
        """The model requested (``gen_ai.request.model`` on spans)."""
        return self._model

    async def aclose(self) -> None:
        """Close the HTTP client, if this model made it."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One non-streaming call, retried per the policy."""
        try:
            return await self._complete(request)
        except ModelBackendError as exc:
            masked = self._redact.error(exc)
            if masked is exc:
                raise
            raise masked from None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """One streaming call: deltas as they arrive, then the complete response.

        Only the final ``ModelResponse`` is authoritative: with
        ``finish_reason == "length"`` it leaves out tool calls cut off
        mid-arguments, although their deltas were already yielded.
        """
        try:
            async with aclosing(self._stream(request)) as events:
                async for event in events:
                    yield event
        except ModelBackendError as exc:
            masked = self._redact.error(exc)
            if masked is exc:
                raise
            raise masked from None

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        body = self._encode(request, stream=False)
        deadline = trio.current_time() + self._timeout
        retries = 0
        while True:
            try:
                response = await self._by(deadline, partial(self._post, body, stream=False))
                answer = self._redact.data(response.content)
                return self._redact.response(
                    decode_completion(parse_json(answer, "model response body"))
                )
            except _RetryableFailure as failure:
                await self._backoff(failure, retries, deadline)
                retries += 1

    async def _stream(self, request: ModelRequest) -> AsyncGenerator[ModelStreamEvent]:
        body = self._encode(request, stream=True)
        deadline = trio.current_time() + self._timeout
        retries = 0
        while True:
            yielded = 0
            try:
                async with aclosing(self._attempt(body, deadline)) as events:
                    async for event in events:
                        yielded += 1
                        yield event
                return
            except _RetryableFailure as failure:
                if yielded:
                    raise ModelBackendError(
                        f"model stream from {self._url} broke after {yielded} events: {failure}"
                    ) from failure
                await self._backoff(failure, retries, deadline)
                retries += 1

    async def _attempt(self, body: bytes, deadline: float) -> AsyncGenerator[ModelStreamEvent]:
        """One streaming attempt; a cut or unreachable stream raises ``_RetryableFailure``."""
        response = await self._by(deadline, partial(self._post, body, stream=True))
        try:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                # The server ignored "stream": take its whole answer at once.
                try:
                    raw = await self._by(deadline, response.aread)
                except httpx.RequestError as exc:
                    raise _RetryableFailure(f"the answer was cut: {_describe(exc)}") from exc
                answer = self._redact.response(
                    decode_completion(parse_json(self._redact.data(raw), "model response body"))
                )
                for event in _whole_answer_events(answer):
                    yield event
                return
            accumulator = ChunkAccumulator()
            masker = StreamMasker(self._redact)
            async with aclosing(self._events(response, deadline)) as events:
                async for data in events:
                    if data == "[DONE]":
                        break
                    for delta in masker.feed(accumulator.feed(parse_json(data, "stream event"))):
                        yield delta
                else:
                    if accumulator.finish_reason is None:
                        raise _RetryableFailure("the stream ended before the model finished")
            answer = self._redact.response(accumulator.finish())
            for delta in masker.flush():
                yield delta
            yield answer
        finally:
            await response.aclose()

    async def _events(self, response: httpx.Response, deadline: float) -> AsyncGenerator[str]:
        """The data of each server-sent event, masked, until the stream ends."""
        decoder = SSEDecoder()
        chunks = response.aiter_text()  # closed with the response
        while True:
            try:
                text = await self._by(deadline, chunks.__anext__)
            except StopAsyncIteration:
                return
            except httpx.RequestError as exc:
                raise _RetryableFailure(f"the stream was cut: {_describe(exc)}") from exc
            for data in decoder.feed(text):
                yield self._redact.text(data)

    async def _post(self, body: bytes, *, stream: bool) -> httpx.Response:
        """Send one attempt; return a 2xx response or raise (retryable or not)."""
        headers = {**self._headers, "Accept": "text/event-stream" if stream else "application/json"}
        request = self._client.build_request("POST", self._url, content=body, headers=headers)
        try:
            response = await self._client.send(request, stream=stream)
            if response.is_success:
                return response
            await response.aread()
            await response.aclose()
        except httpx.RequestError as exc:
            raise _RetryableFailure(f"could not reach {self._url}: {_describe(exc)}") from exc
        problem = _http_problem(response, self._redact)
        message = f"model backend answered HTTP {response.status_code} for {self._url}: {problem}"
        if self._retry.should_retry(response.status_code, response.headers):
            raise _RetryableFailure(message, response.headers)
        raise ModelBackendError(message)

    async def _backoff(
        self, failure: _RetryableFailure, retries_done: int, deadline: float
    ) -> None:
        """Wait before the next attempt, or raise if there should be none."""
        if retries_done >= self._retry.max_retries:
            raise ModelBackendError(
                f"{failure} (gave up after {retries_done + 1} attempts)"
            ) from failure
        delay = self._retry.delay(retries_done, failure.headers, jitter=self._jitter())
        if trio.current_time() + delay >= deadline:  # waiting could only end in a timeout
            raise ModelBackendError(
                f"{failure} (not retried: waiting {delay:g} s would pass the "
                f"{self._timeout:g} s timeout)"
            ) from failure
        await self._by(deadline, partial(self._sleep, delay))

    async def _by(self, deadline: float, step: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``step`` within the call's deadline; past it, raise a clear error."""
        try:
            with trio.fail_at(deadline):
                return await step()
        except trio.TooSlowError:
            raise ModelBackendError(
                f"model call to {self._url} timed out after {self._timeout:g} s"
            ) from None

    def _encode(self, request: ModelRequest, *, stream: bool) -> bytes:
        body = request_body(self._model, request, self._params, stream=stream)
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _whole_answer_events(answer: ModelResponse) -> list[ModelStreamEvent]:
    """A complete answer as one stream: its text, each call whole, then itself."""
    events: list[ModelStreamEvent] = [TextDelta(text=answer.text)] if answer.text else []
    events.extend(
        ToolCallDelta(index=i, arguments=call.arguments, id=call.id, name=call.name)
        for i, call in enumerate(answer.tool_calls)
    )
    events.append(answer)
    return events


def _describe(exc: httpx.RequestError) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _http_problem(response: httpx.Response, redact: Redactor) -> str:
    """What an error response says, from its JSON error body or its text (masked first)."""
    text = redact.text(response.text)
    try:
        reported = error_message(json.loads(text))
    except ValueError:
        reported = None
    if reported is not None:
        return reported
    text = text.strip()
    return repr(text[:200] + ("…" if len(text) > 200 else "")) if text else "(empty body)"
