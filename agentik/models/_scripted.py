"""``ScriptedModel``: a model whose answers come from a function, for tests,
benchmarks and demos.

Deterministic: the same request to the same responder gives the same answer,
and ``stream()`` always splits it the same way, so a streamed turn can be
tested without HTTP. The only waiting it does is the optional ``latency``
(``trio.sleep``, so tests drive it with a mock clock).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TypeAlias, final

import attrs
import trio

from agentik._errors import ModelBackendError
from agentik.models._protocol import (
    PART_KINDS,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    PartKind,
    StructuredOutput,
    TextDelta,
    ToolCallDelta,
    check_accepts_parts,
    check_structured_output,
)

Responder: TypeAlias = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]
"""Answers one request, synchronously or as an awaitable."""

TEXT_PIECES = 3
"""``stream()`` yields a text in (at most) this many ``TextDelta`` pieces."""


def _latency(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:
        raise ModelBackendError(f"latency must be >= 0 seconds, got {value!r}")


@final
@attrs.frozen
class ScriptedModel:
    """A ``StreamingChatModel`` that answers with ``respond(request)``."""

    respond: Responder
    """A sync or async function ``ModelRequest -> ModelResponse``."""
    latency: float = attrs.field(default=0.0, kw_only=True, validator=_latency)
    """Seconds to wait (``trio.sleep``) before each answer, to simulate a real model."""
    structured_output: StructuredOutput = attrs.field(
        default="response_format", kw_only=True, converter=check_structured_output
    )
    """How the agent asks it for a typed answer: ``response_format`` (it
    answers with the JSON as its text) or ``tool`` (it calls the request's
    ``output_tool``), to play either kind of backend."""
    accepts_parts: frozenset[PartKind] = attrs.field(
        default=frozenset(PART_KINDS), kw_only=True, converter=check_accepts_parts
    )
    """The kinds of content part it takes beyond text (images and files);
    ``()`` to play a text-only model."""

    @property
    def provider_name(self) -> str:
        """``gen_ai.provider.name`` on spans."""
        return "agentik"

    @property
    def model_name(self) -> str:
        """``gen_ai.request.model`` on spans."""
        return "scripted"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Wait ``latency``, then answer with the responder."""
        if self.latency:
            await trio.sleep(self.latency)
        answer = self.respond(request)
        if type(answer) is ModelResponse:  # the common case, without inspect's checks
            return answer
        if inspect.isawaitable(answer):
            answer = await answer
        if not isinstance(answer, ModelResponse):
            raise ModelBackendError(
                f"a scripted responder must return a ModelResponse, got {answer!r}"
            )
        return answer

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """The answer as a real backend streams it: text pieces, then each tool
        call in two pieces (id and name first), then the complete response."""
        response = await self.complete(request)
        for piece in _split(response.text or "", TEXT_PIECES):
            yield TextDelta(text=piece)
        for index, call in enumerate(response.tool_calls):
            head, tail = _split_in_two(call.arguments)
            yield ToolCallDelta(index=index, arguments=head, id=call.id, name=call.name)
            if tail:
                yield ToolCallDelta(index=index, arguments=tail)
        yield response


def _split(text: str, pieces: int) -> list[str]:
    """``text`` in at most ``pieces`` non-empty consecutive parts."""
    size = -(-len(text) // pieces)  # ceiling division
    return [text[start : start + size] for start in range(0, len(text), size or 1)]


def _split_in_two(text: str) -> tuple[str, str]:
    middle = len(text) // 2
    return text[:middle], text[middle:]


def replay(responses: Iterable[ModelResponse | str]) -> Responder:
    """A responder that answers with ``responses`` in order, whatever is asked.

    A ``str`` stands for a text-only answer. Running out raises
    ``ModelBackendError``. The position is shared by every caller, so give each
    conversation its own ``replay`` when order across conversations matters.
    """
    script = tuple(r if isinstance(r, ModelResponse) else ModelResponse(text=r) for r in responses)
    position = 0

    def respond(request: ModelRequest) -> ModelResponse:
        nonlocal position
        if position >= len(script):
            raise ModelBackendError(
                f"scripted model ran out of responses: all {len(script)} were used"
            )
        position += 1
        return script[position - 1]

    return respond
