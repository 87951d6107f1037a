"""``OpenAICompatibleModel``: the Chat Completions API over httpx2, on trio.

The I/O shell around ``_wire`` (the format), ``_sse`` (stream framing),
``_retry`` (the policy), ``_failures`` (what a failed attempt says), ``_gate``
(where calls wait) and ``_pools`` (the connections behind it). Invariants:

- Every failure leaves as ``ModelBackendError``; the API key (and any other
  credential it sends) appears in no message and no repr, and is masked in
  every body it reads, every answer it decodes and the assembled text of
  every stream, before a delta is yielded (``_redact``), so no answer can
  carry it onwards, however the backend splits or escapes it.
- One deadline, ``timeout`` seconds after the call starts, bounds the whole
  call: every attempt, every backoff, and every read of a stream.
- Retries are bounded (``RetryPolicy.max_retries``). A stream is retried only
  before its first event was yielded; a stream cut after that raises.
- A call waits for a connection in the gate (FIFO, cheap per waiter), never
  in the HTTP client's pool: the pool has as many connections as the gate has
  slots. A slot is held for one attempt on the wire only; encoding, decoding
  and the wait before a retry hold none.
- The object holds no per-call state, so any number of conversations can
  share one instance (and its connection pool).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
)
from contextlib import AsyncExitStack, aclosing
from functools import partial
from types import TracebackType
from typing import Self, TypeAlias, TypeVar, final

import httpx2
import trio

from agentik._errors import ModelBackendError
from agentik._json import JsonValue
from agentik.models._failures import RetryableFailure, describe, refusal
from agentik.models._fence import pass_fence
from agentik.models._gate import Gate
from agentik.models._pools import free_connections, own_clients, pool_gate
from agentik.models._protocol import (
    PART_KINDS,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    PartKind,
    StructuredOutput,
    check_accepts_parts,
    check_structured_output,
)
from agentik.models._rate_limits import read_rate_limit
from agentik.models._redact import Redactor, StreamMasker
from agentik.models._retry import RetryPolicy
from agentik.models._sse import SSEDecoder
from agentik.models._wire import (
    RESERVED_PARAMS,
    ChunkAccumulator,
    decode_completion,
    parse_json,
    request_body,
    whole_answer_events,
)

Sleep: TypeAlias = Callable[[float], Awaitable[None]]
"""How to wait between attempts; ``trio.sleep`` unless a test injects another."""

_T = TypeVar("_T")

DEFAULT_RETRY = RetryPolicy()
"""The openai SDK's policy: 2 retries, 0.5 s doubling to 8 s, Retry-After up to 120 s."""


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
        client: An ``httpx2.AsyncClient`` to share (its pool, proxies, TLS
            settings); the caller then closes it, and sizes its pool to at
            least ``max_connections``. Without one, the model makes its own
            with ``max_connections`` kept-alive connections, closed by
            ``aclose()`` / ``async with``.
        params: Extra body fields for every call (``temperature``,
            ``max_tokens``, ``tool_choice`` …); they cannot replace ``model``,
            ``messages``, ``tools``, ``stream`` or ``stream_options``.
        headers: Extra HTTP headers for every call.
        timeout: Seconds one call may take in total, retries included.
        structured_output: How a typed turn (``send(..., output=T)``) asks for
            its answer: ``response_format`` (OpenAI Structured Outputs), or
            ``tool`` (a final-answer tool whose parameters are the schema,
            with ``tool_choice: required`` unless ``params`` sets it) for a
            backend that does not take ``response_format``.
        connect_timeout: Seconds the model's own clients may take to open a
            connection (TCP and TLS); past it the attempt fails and is retried
            like a refused connection. None: only ``timeout`` bounds it. Not
            with ``client``: a caller's client keeps its own timeouts.
        retry: When and how patiently to retry.
        sleep: Waits between attempts (inject a fake in tests).
        jitter: Returns a number in [0, 1) for the backoff jitter.
        max_connections: Calls on the wire at once; more wait in agentik's
            FIFO queue (within ``timeout``), never in the HTTP client's pool.
        gate: Where calls wait for a connection, instead of a new
            ``FifoGate(max_connections)``: share one between models that share
            a ``client``.

    An agent with ``ModelLimits`` admits each attempt through its scheduler
    first (``with_admission``): the one queue, with this model's gate behind
    it never waiting (the scheduler's slots are at most its connections).
    """

    __slots__ = (
        "_accepts_parts",
        "_admission",
        "_api_key",
        "_base_url",
        "_clients",
        "_free",
        "_gate",
        "_headers",
        "_jitter",
        "_model",
        "_owns_client",
        "_params",
        "_redact",
        "_retry",
        "_sleep",
        "_structured_output",
        "_timeout",
        "_url",
    )

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        client: httpx2.AsyncClient | None = None,
        params: Mapping[str, JsonValue] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 600.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        sleep: Sleep = trio.sleep,
        jitter: Callable[[], float] = random.random,
        max_connections: int | None = None,
        gate: Gate | None = None,
        connect_timeout: float | None = None,
        structured_output: StructuredOutput = "response_format",
        accepts_parts: Iterable[PartKind] = PART_KINDS,
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
        if connect_timeout is not None and not 0 < connect_timeout < math.inf:
            raise ModelBackendError(
                f"connect_timeout must be > 0 seconds, or None, got {connect_timeout!r}"
            )
        if connect_timeout is not None and client is not None:
            raise ModelBackendError(
                "give connect_timeout or client, not both: a client keeps its own"
                " timeouts (httpx2.AsyncClient(timeout=httpx2.Timeout(None, connect=...)))"
            )
        gate = pool_gate(gate, max_connections, own_clients=client is None)
        try:
            self._structured_output = check_structured_output(structured_output)
            self._accepts_parts = check_accepts_parts(accepts_parts)
        except ValueError as error:
            raise ModelBackendError(str(error)) from None
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
        self._gate = gate
        self._admission: Gate | None = None
        self._owns_client = client is None
        self._clients = (
            (client,) if client is not None else own_clients(gate.capacity, connect_timeout)
        )
        self._free = free_connections(self._clients, gate.capacity)

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

    @property
    def structured_output(self) -> StructuredOutput:
        """How a typed turn asks this backend for its answer: ``response_format``
        (``json_schema``), or ``tool`` for a backend that cannot take it."""
        return self._structured_output

    @property
    def accepts_parts(self) -> frozenset[PartKind]:
        """The kinds of content part sent to this backend (images as
        ``image_url``, files as ``file``); empty for a text-only model, whose
        turns with parts then fail with ``unsupported_content``."""
        return self._accepts_parts

    @property
    def gate(self) -> Gate:
        """Where this model's calls wait for a connection."""
        return self._gate

    @property
    def max_output_tokens(self) -> int | None:
        """The output limit every call asks for (``params`` ``max_completion_tokens``
        or ``max_tokens``), if any: what the model-limits scheduler charges for
        an answer before its usage is known."""
        for name in ("max_completion_tokens", "max_tokens"):
            value = self._params.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    def with_admission(self, admission: Gate) -> OpenAICompatibleModel:
        """This model (its connections, settings and gate), whose every attempt
        first waits for a slot of ``admission``: a ``ModelScheduler``, the one
        queue. Closing the copy closes nothing (the original owns the clients).

        An attempt that fails leaves ``admission``'s slot with its
        ``ModelBackendError`` (``status``, ``headers``). When the provider says
        it is rate limited there (``read_rate_limit``), the admission pauses
        every call; this model then retries without a backoff of its own (it
        waits in the admission), counting the retry as any other."""
        clone = object.__new__(OpenAICompatibleModel)
        for name in OpenAICompatibleModel.__slots__:
            object.__setattr__(clone, name, getattr(self, name))
        clone._admission = admission
        clone._owns_client = False
        return clone

    async def aclose(self) -> None:
        """Close the HTTP client, if this model made it."""
        if self._owns_client:
            for client in self._clients:
                await client.aclose()

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
                async with AsyncExitStack() as held:
                    client = await self._wait_for_slot(held, request, deadline)
                    response = await self._by(
                        deadline, partial(self._post, client, body, stream=False)
                    )
                # the slot is free again: decoding needs no connection
                answer = self._redact.data(response.content)
                return self._redact.response(
                    decode_completion(parse_json(answer, "model response body"))
                )
            except RetryableFailure as failure:
                await self._backoff(failure, retries, deadline)  # holding no slot
                retries += 1

    async def _stream(self, request: ModelRequest) -> AsyncGenerator[ModelStreamEvent]:
        body = self._encode(request, stream=True)
        deadline = trio.current_time() + self._timeout
        retries = 0
        while True:
            yielded = 0
            try:
                async with aclosing(self._attempt(request, body, deadline)) as events:
                    async for event in events:
                        yielded += 1
                        yield event
                return
            except RetryableFailure as failure:
                if yielded:
                    raise ModelBackendError(
                        f"model stream from {self._url} broke after {yielded} events: {failure}"
                    ) from failure
                await self._backoff(failure, retries, deadline)  # the attempt's slot is free
                retries += 1

    async def _attempt(
        self, request: ModelRequest, body: bytes, deadline: float
    ) -> AsyncGenerator[ModelStreamEvent]:
        """One streaming attempt; a cut or unreachable stream raises ``RetryableFailure``.

        It holds a slot of the gate until its response is closed (the exit
        stack closes the response first, then frees the slot)."""
        async with AsyncExitStack() as held:
            client = await self._wait_for_slot(held, request, deadline)
            response = await self._by(deadline, partial(self._post, client, body, stream=True))
            held.push_async_callback(response.aclose)
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                # The server ignored "stream": take its whole answer at once.
                try:
                    raw = await self._by(deadline, response.aread)
                except httpx2.RequestError as exc:
                    raise RetryableFailure(f"the answer was cut: {describe(exc)}") from exc
                answer = self._redact.response(
                    decode_completion(parse_json(self._redact.data(raw), "model response body"))
                )
                for event in whole_answer_events(answer):
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
                        raise RetryableFailure("the stream ended before the model finished")
            answer = self._redact.response(accumulator.finish())
            for delta in masker.flush():
                yield delta
            yield answer

    async def _events(self, response: httpx2.Response, deadline: float) -> AsyncGenerator[str]:
        """The data of each server-sent event, masked, until the stream ends."""
        decoder = SSEDecoder()
        chunks = response.aiter_text()  # closed with the response
        while True:
            try:
                text = await self._by(deadline, chunks.__anext__)
            except StopAsyncIteration:
                return
            except httpx2.RequestError as exc:
                raise RetryableFailure(f"the stream was cut: {describe(exc)}") from exc
            for data in decoder.feed(text):
                yield self._redact.text(data)

    async def _wait_for_slot(
        self, held: AsyncExitStack, request: ModelRequest, deadline: float
    ) -> httpx2.AsyncClient:
        """Take a slot of the gate into ``held`` (freed when it closes), by the
        deadline; return the client whose pool has a connection for it."""
        admission = self._admission
        if admission is not None:
            try:
                with trio.fail_at(deadline):
                    await held.enter_async_context(admission.slot(request))
            except trio.TooSlowError:
                raise ModelBackendError(
                    f"model call to {self._url} timed out after {self._timeout:g} s waiting"
                    " for its turn under the model's limits (ModelLimits)"
                ) from None
        try:
            with trio.fail_at(deadline):
                await held.enter_async_context(self._gate.slot(request))
        except trio.TooSlowError:
            raise ModelBackendError(
                f"model call to {self._url} timed out after {self._timeout:g} s waiting for"
                f" a connection (all {self._gate.capacity} in use; see max_connections)"
            ) from None
        # Held now, perhaps long after the turn last checked: a node that lost
        # the conversation meanwhile sends nothing (``_fence``).
        await pass_fence()
        free = self._free
        if free is None:
            return self._clients[0]
        # A held slot always finds a free connection: the shards' pools have
        # as many as the gate has slots. Last freed, first taken: warm ones.
        shard = free.pop()
        held.callback(free.append, shard)
        return self._clients[shard]

    async def _post(
        self, client: httpx2.AsyncClient, body: bytes, *, stream: bool
    ) -> httpx2.Response:
        """Send one attempt; return a 2xx response or raise (retryable or not)."""
        headers = {**self._headers, "Accept": "text/event-stream" if stream else "application/json"}
        request = client.build_request("POST", self._url, content=body, headers=headers)
        try:
            response = await client.send(request, stream=stream)
            if response.is_success:
                return response
            await response.aread()
            await response.aclose()
        except httpx2.RequestError as exc:
            raise RetryableFailure(f"could not reach {self._url}: {describe(exc)}") from exc
        raise refusal(response, self._url, self._redact, self._retry)

    async def _backoff(self, failure: RetryableFailure, retries_done: int, deadline: float) -> None:
        """Wait before the next attempt, or raise if there should be none."""
        if retries_done >= self._retry.max_retries:
            raise ModelBackendError(
                f"{failure} (gave up after {retries_done + 1} attempts)",
                status=failure.status,
                retry_after=failure.retry_after,
                headers=failure.headers,
            ) from failure
        if self._admission is not None and read_rate_limit(failure.status, failure.headers):
            return  # the admission heard it and holds every call back: wait there
        delay = self._retry.delay(retries_done, failure.headers, jitter=self._jitter())
        if trio.current_time() + delay >= deadline:  # waiting could only end in a timeout
            raise ModelBackendError(
                f"{failure} (not retried: waiting {delay:g} s would pass the "
                f"{self._timeout:g} s timeout)",
                status=failure.status,
                retry_after=failure.retry_after,
                headers=failure.headers,
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
        body = request_body(
            self._model, request, self._params, stream=stream, accepts=self._accepts_parts
        )
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
