"""Summaries and reflections: work a conversation starts beside itself, off
every turn's path.

A summary (``ContextPolicy``) or a reflection (``reflection=True``) is a
model request of its own. Each runs in a task of its own in the
conversation's nursery, started after a turn's answer was delivered, so no
turn ever waits for one: until a summary lands, the window just carries less
of the older history. ``OptionalWork`` is the conversation's side of them
(starting, applying what comes back, stopping), a part of its state its task
alone touches; ``summarize`` and ``reflect`` are the tasks.

Invariants:
- at most one summary and one reflection at a time per conversation;
- such a task reads only what it was handed (a snapshot of the messages,
  the previous summary's text) and never touches the conversation: a summary
  is stored through the writer and its ``Summary`` sent back in
  ``SummaryJob.result``; the conversation applies it in its own task, before
  its next request, when its cache still holds what the summary covers;
- a summary is bounded by ``ContextPolicy.summary_timeout``; one that times
  out, fails, or is cut short (the agent closing, the conversation deleted)
  sends back None, changes nothing and is logged once. A summary the store
  took is never lost: the next load reads it;
- both are optional: when the agent closes they get ``OPTIONAL_WORK_GRACE``
  seconds, and a shutdown past its grace cancels them.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from agentik._errors import AgentikError, ModelBackendError, TurnError
from agentik._messages import Message, Role
from agentik._sync import Pending
from agentik.agent._compaction import fit_summary, fold_point, summary_request
from agentik.agent._context import ContextPolicy
from agentik.agent._failures import describe
from agentik.models import ModelRequest, ModelResponse
from agentik.storage import Summary

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from agentik.agent._handle import ConversationHandle
    from agentik.agent._history_cache import HistoryCache
    from agentik.agent._runtime import AgentRuntime

log = logging.getLogger("agentik.conversation")

OPTIONAL_WORK_GRACE = 5.0
"""Seconds a summary or reflection under way may still take once the agent
closes; past that it is cancelled and stores nothing (a slow model must not
hold a shutdown)."""
REFLECTION_TIMEOUT = 60.0
"""Seconds a reflection may take; past that it stores nothing (logged)."""
REFLECTION_PROMPT = (
    "You review a finished conversation and state one short, general lesson that"
    " would help in future conversations. Answer with the lesson only, one or two sentences."
)
REFLECT = "What is the one lesson from this conversation?"


@attrs.define(eq=False)
class SummaryJob:
    """A summary under way: what cancels it, and where it sends its result."""

    scope: trio.CancelScope
    through: int
    """The seq of the last message it covers."""
    result: Pending[Summary | None] = attrs.Factory(Pending)
    """The stored summary, or None (it failed, timed out, or was cut short)."""


@attrs.define(eq=False)
class ReflectionJob:
    """A reflection under way: what cancels it, and when it is over."""

    scope: trio.CancelScope
    done: trio.Event = attrs.Factory(trio.Event)


class _Paused(Protocol):
    @property
    def paused(self) -> object | None: ...


class OptionalHost(Protocol):
    """What ``OptionalWork`` uses of its conversation (``Conversation``)."""

    conversation_id: str
    runtime: AgentRuntime
    handle: ConversationHandle
    cache: HistoryCache

    @property
    def approvals(self) -> _Paused: ...


@attrs.define(eq=False)
class OptionalWork:
    """The summary and the reflection one conversation runs beside itself: a
    part of its state (``Conversation.optional``), touched by its task only."""

    host: OptionalHost
    summarizing: SummaryJob | None = None
    """The summary under way, or landed and not applied yet."""
    reflecting: ReflectionJob | None = None
    """The reflection under way."""
    nursery: trio.Nursery | None = None
    """Where they run (the conversation's task opens it when the agent has a
    context policy or reflects)."""
    deadline: float = math.inf
    """When they must be done: set once serving ends (the agent closing, or
    the task retiring), ``OPTIONAL_WORK_GRACE`` later."""

    def start(self, parent: Context | None) -> None:
        """After a turn's answer was delivered: start a summary when what the
        latest one does not cover outgrew ``summarize_at`` of the budget, and a
        reflection (``reflection=True``), each in a task of its own unless one
        runs already. No turn waits for either."""
        host = self.host
        settings = host.runtime.settings
        if settings.context is not None and host.approvals.paused is None:
            self._start_summary(parent)
        if settings.reflection:
            job = self.reflecting
            if job is None or job.done.is_set():
                self.reflecting = job = ReflectionJob(trio.CancelScope(deadline=self.deadline))
                self._spawn(
                    job.scope,
                    job.done,
                    reflect,
                    host.runtime,
                    host.conversation_id,
                    job.scope,
                    tuple(host.cache.history),
                    parent,
                )

    def land_if_back(self) -> None:
        """Apply the summary the summary task sent back, if it did."""
        job = self.summarizing
        if job is not None and job.result.done:
            self._land()

    def wind_down(self) -> None:
        """Serving ended: what runs gets ``OPTIONAL_WORK_GRACE`` more seconds."""
        self.deadline = trio.current_time() + OPTIONAL_WORK_GRACE
        for scope in self.host.handle.optional:
            scope.deadline = min(scope.deadline, self.deadline)

    async def stop(self) -> None:
        """Cancel the summary and the reflection under way and wait until they
        are over (a deleted conversation must not get either afterwards)."""
        job = self.summarizing
        if job is not None:
            job.scope.cancel()
            await job.result.wait()
            self.summarizing = None
        reflecting = self.reflecting
        if reflecting is not None:
            reflecting.scope.cancel()
            await reflecting.done.wait()
            self.reflecting = None

    def _start_summary(self, parent: Context | None) -> None:
        """Fold the oldest turns into the summary (``_compaction``) once what it
        does not cover passes ``summarize_at`` of the budget."""
        job = self.summarizing
        if job is not None:
            if not job.result.done:
                return  # one at a time
            self._land()
        host = self.host
        cache = host.cache
        policy = host.runtime.settings.context
        history = cache.history
        if policy is None or host.runtime.storage.degraded or not history:
            return
        if sum(map(cache.cost, history)) < policy.summarize_at * policy.max_tokens:
            return
        fold = fold_point(history, cache.cost, policy.max_tokens // 2)
        if fold == 0:
            return
        through = history[fold - 1].seq
        if through is None:
            return  # not committed yet: next time
        job = SummaryJob(trio.CancelScope(deadline=self.deadline), through)
        self.summarizing = job
        previous = None if cache.summary is None else cache.summary.text
        self._spawn(
            job.scope,
            trio.Event(),
            summarize,
            host.runtime,
            host.conversation_id,
            job,
            previous,
            tuple(history[:fold]),
            parent,
        )

    def _spawn(
        self,
        scope: trio.CancelScope,
        done: trio.Event,
        work: Callable[..., Awaitable[None]],
        *args: object,
    ) -> None:
        """Run ``work(*args)`` beside the conversation, its scope shown on the
        handle (a shutdown past its grace cancels it) while it runs."""
        handle = self.host.handle
        handle.optional = (*handle.optional, scope)

        async def beside() -> None:
            try:
                await work(*args)
            finally:
                handle.optional = tuple(s for s in handle.optional if s is not scope)
                done.set()

        assert self.nursery is not None
        self.nursery.start_soon(beside)

    def _land(self) -> None:
        """Apply the summary the summary task sent back: drop what it covers
        from the cache, if the cache still holds that and no paused turn holds
        indexes into it (else later, or never: the store has it and the next
        load reads it). A summary that failed changes nothing."""
        job = self.summarizing
        assert job is not None
        assert job.result.done
        if self.host.approvals.paused is not None:
            return
        self.summarizing = None
        stored = job.result.result()
        if stored is not None:
            self.host.cache.fold(stored)


def log_failure(conversation_id: str, error: TurnError) -> None:
    """Log a failed turn or step once: with the traceback of what caused it
    when that was a bug (not an agentik error); a cancellation is no failure."""
    if error.code == "cancelled":
        return
    cause = error.__cause__
    if cause is not None and not isinstance(cause, AgentikError):
        log.error("conversation %r: %s [%s]", conversation_id, error, error.code, exc_info=cause)
    else:
        log.warning("conversation %r: %s [%s]", conversation_id, error, error.code)


async def ask(
    runtime: AgentRuntime, conversation_id: str, request: ModelRequest, parent: Context | None
) -> ModelResponse:
    """A model request outside a turn (a reflection, a summary), in a ``chat``
    span of its purpose when the agent traces."""
    model = runtime.model
    tracing = runtime.tracing
    if tracing is None:
        return await model.complete(request)
    chat = tracing.start_chat(parent, conversation_id, request)
    response = None
    try:
        response = await model.complete(request)
        return response
    finally:
        answer = response if isinstance(response, ModelResponse) else None
        tracing.end_chat(*chat, answer, sys.exc_info()[1])


async def summarize(
    runtime: AgentRuntime,
    conversation_id: str,
    job: SummaryJob,
    previous: str | None,
    messages: Sequence[Message],
    parent: Context | None,
) -> None:
    """Fold ``messages`` (the oldest ones the summary does not cover, ending
    at seq ``job.through``) with ``previous`` into a new summary, store it,
    and send it back in ``job.result`` (None if anything went wrong)."""
    policy = runtime.settings.context
    store = runtime.storage.message_store
    assert policy is not None
    stored: Summary | None = None
    try:
        with job.scope:
            with trio.move_on_after(policy.summary_timeout) as timer:
                try:
                    text = await _fold(runtime, conversation_id, policy, previous, messages, parent)
                    pending = await store.submit_summary(conversation_id, job.through, text)
                    stored = await pending.wait()
                except Exception as exc:
                    _failed(runtime, conversation_id, describe(exc), exc)
            if timer.cancelled_caught:
                _failed(runtime, conversation_id, f"no summary within {policy.summary_timeout:g} s")
        if job.scope.cancelled_caught:
            stored = None
            log.info("conversation %r: a summary under way was cut short", conversation_id)
        elif stored is not None:
            runtime.stats.summaries += 1
    finally:
        job.result.set_value(stored)


async def _fold(
    runtime: AgentRuntime,
    conversation_id: str,
    policy: ContextPolicy,
    previous: str | None,
    messages: Sequence[Message],
    parent: Context | None,
) -> str:
    """The new summary's text: as many requests as it takes to fold ``messages``."""
    text = previous
    position = 0
    while position < len(messages):
        built = summary_request(text, messages[position:], policy.max_tokens, policy.count_tokens)
        if built is None:
            raise ModelBackendError("the budget leaves no room for a summary request")
        request, taken = built
        runtime.stats.model_calls += 1
        # A chat span of purpose summary in the turn's trace, as reflections.
        response = await ask(runtime, conversation_id, request, parent)
        if not isinstance(response, ModelResponse) or not (response.text or "").strip():
            raise ModelBackendError("the model answered no summary")
        if response.usage is not None:  # agentik_tokens_total counts it
            runtime.stats.input_tokens += response.usage.prompt_tokens
            runtime.stats.output_tokens += response.usage.completion_tokens
        text = fit_summary((response.text or "").strip(), policy.max_tokens, policy.count_tokens)
        position += taken
    assert text is not None
    return text


def _failed(
    runtime: AgentRuntime, conversation_id: str, why: str, cause: Exception | None = None
) -> None:
    runtime.stats.summaries_failed += 1
    error = TurnError(f"the summary step failed: {why}", code="summary_failed")
    error.__cause__ = cause
    log_failure(conversation_id, error)


async def reflect(
    runtime: AgentRuntime,
    conversation_id: str,
    scope: trio.CancelScope,
    history: Sequence[Message],
    parent: Context | None,
) -> None:
    """Ask the model for one short lesson from ``history`` and store it.

    The turn has finished and its caller has its answer, so whatever fails
    here (the model, the reflection store, anything they raise) fails this
    step alone: logged once and counted, never raised."""
    request = ModelRequest(
        (Message(Role.SYSTEM, REFLECTION_PROMPT), *history, Message(Role.USER, REFLECT)),
        purpose="reflection",
    )
    with scope, trio.move_on_after(REFLECTION_TIMEOUT) as timer:
        try:
            response = await ask(runtime, conversation_id, request, parent)
            if not isinstance(response, ModelResponse):
                raise ModelBackendError(
                    f"the model returned {type(response).__name__}, expected ModelResponse"
                )
            usage = response.usage
            if usage is not None:
                runtime.stats.input_tokens += usage.prompt_tokens
                runtime.stats.output_tokens += usage.completion_tokens
            text = (response.text or "").strip()
            if text:
                await runtime.storage.reflection_store.insert(conversation_id, text)
        except Exception as exc:
            runtime.stats.reflections_failed += 1
            error = TurnError(
                f"the reflection step failed: {describe(exc)}", code="reflection_failed"
            )
            error.__cause__ = exc
            log_failure(conversation_id, error)
    if timer.cancelled_caught:
        runtime.stats.reflections_failed += 1
        log.warning(
            "conversation %r: the reflection step failed: no answer within %g s"
            " [reflection_failed]",
            conversation_id,
            REFLECTION_TIMEOUT,
        )
