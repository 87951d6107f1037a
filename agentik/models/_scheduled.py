"""Any ``ChatModel`` behind a ``ModelScheduler``: the agent's model under ``ModelLimits``.

Every call is estimated once (``ModelScheduler.call``: its fairness key from
``current_fairness_key``, its priority from ``ModelRequest.purpose``) and
settled with the usage its answer reports. Where it waits depends on the
model:

- a model that takes a gate slot per attempt (``AdmissionAware``:
  ``OpenAICompatibleModel``) waits in the scheduler for each attempt on the
  wire, through ``with_admission``; nothing is held across its retries'
  backoff, and a 429 leaving an attempt's slot pauses everyone there;
- any other model waits once, for the whole call (its own retries included).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Protocol, final, runtime_checkable

from agentik.models._fence import pass_fence
from agentik.models._gate import Gate
from agentik.models._protocol import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    PartKind,
    StreamingChatModel,
    StructuredOutput,
    accepts_parts_of,
    structured_output_of,
)
from agentik.models._scheduler import ModelScheduler, current_fairness_key
from agentik.models._tickets import ScheduledCall


@runtime_checkable
class AdmissionAware(Protocol):
    """A model that takes a slot of a gate for each attempt on the wire and can
    wait in an admission ``Gate`` first (``OpenAICompatibleModel``)."""

    def with_admission(self, admission: Gate) -> ChatModel:
        """The same model (its connections, settings and own gate), whose every
        attempt first waits for a slot of ``admission``."""
        ...


class ScheduledModel:
    """``model``'s calls admitted by ``scheduler`` (``schedule``)."""

    __slots__ = ("_admitting", "_model", "_scheduler")

    def __init__(self, model: ChatModel, scheduler: ModelScheduler) -> None:
        self._model = model
        self._scheduler = scheduler
        self._admitting = model if isinstance(model, AdmissionAware) else None

    @property
    def scheduler(self) -> ModelScheduler:
        return self._scheduler

    @property
    def model(self) -> ChatModel:
        """The model admitted."""
        return self._model

    @property
    def structured_output(self) -> StructuredOutput:
        """How the model admitted is asked for a typed answer."""
        return structured_output_of(self._model)

    @property
    def accepts_parts(self) -> frozenset[PartKind]:
        """The kinds of part the model admitted takes beyond text."""
        return accepts_parts_of(self._model)

    def __repr__(self) -> str:
        return f"ScheduledModel({self._model!r})"

    def _call(self, request: ModelRequest) -> ScheduledCall:
        return self._scheduler.call(request, current_fairness_key.get())

    async def complete(self, request: ModelRequest) -> ModelResponse:
        scheduler = self._scheduler
        call = self._call(request)
        admitting = self._admitting
        if admitting is not None:
            model = admitting.with_admission(scheduler.gate_for(call))
            response = await model.complete(request)
        else:
            async with scheduler.attempt(call):
                await pass_fence()  # admitted now, perhaps long after the turn checked
                response = await self._model.complete(request)
        scheduler.settle(call, response.usage if isinstance(response, ModelResponse) else None)
        return response


@final
class ScheduledStreamingModel(ScheduledModel):
    """``ScheduledModel`` of a model that streams: its streams are admitted too."""

    __slots__ = ()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelStreamEvent]:
        scheduler = self._scheduler
        call = self._call(request)
        admitting = self._admitting
        if admitting is not None:
            model = admitting.with_admission(scheduler.gate_for(call))
            assert isinstance(model, StreamingChatModel)
            async with aclosing(_settled(scheduler, call, model.stream(request))) as events:
                async for event in events:
                    yield event
            return
        streaming = self._model
        assert isinstance(streaming, StreamingChatModel)
        async with scheduler.attempt(call):
            await pass_fence()
            async with aclosing(_settled(scheduler, call, streaming.stream(request))) as events:
                async for event in events:
                    yield event


async def _settled(
    scheduler: ModelScheduler, call: ScheduledCall, stream: AsyncIterator[ModelStreamEvent]
) -> AsyncGenerator[ModelStreamEvent]:
    """``stream``'s events; its final answer settles ``call``. Closes ``stream``
    however it ends."""
    try:
        async for event in stream:
            if isinstance(event, ModelResponse):
                scheduler.settle(call, event.usage)
            yield event
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


def schedule(model: ChatModel, scheduler: ModelScheduler) -> ScheduledModel:
    """``model`` admitted by ``scheduler``; it streams if ``model`` does."""
    if isinstance(model, StreamingChatModel):
        return ScheduledStreamingModel(model, scheduler)
    return ScheduledModel(model, scheduler)
