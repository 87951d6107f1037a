"""``POST /agui``: one AG-UI run per request, streamed as SSE.

threadId is the conversation id (in the caller's owner scope). A run either
brings a new user message (the last message, which must be the user's) or,
with ``resume``, answers the interrupts the previous run ended with: each
answer is a decision (``ChatAgent.stream_decision``) and the turn going on
streams as this run's events; a user message after the interrupted calls then
runs as a new turn in the same run. History comes from the store: no earlier
message the client sends, of any role, reaches the model or the store.

A refusal before the run starts (bad input, overload) is a plain HTTP status,
which the client reports as ``HTTP <status>: <body>``; after RUN_STARTED every
failure is a RUN_ERROR. An answer agentik cannot take (a payload the
interrupt's schema refuses, a call that does not wait, a new message while
calls wait unanswered) is a RUN_ERROR before anything is decided.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack

import attrs
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from agentik._errors import AgentikError, ApprovalError
from agentik._json import JsonObject
from agentik.agent import ChatAgent, TurnEvent, TurnFailed, TurnFinished, TurnResult
from agentik.server._context import ServerContext
from agentik.server._owners import SEPARATOR, Caller, caller_of
from agentik.server._turns import log_turn, open_stream, refuse, to_http_error
from agentik.server.agui._events import AguiRun
from agentik.server.agui._input import (
    AguiRunError,
    Decision,
    RunInput,
    decisions_of,
    parse_run_input,
    run_ids,
)
from agentik.server.http import (
    EventStream,
    HttpError,
    read_json,
    sse_frame,
)


class AguiEndpoint:
    """``POST /agui``: one AG-UI run per request, streamed as SSE; its
    dependencies (the agent, the body limit, the heartbeat, the model's label)
    are attributes set from the ``ServerContext``."""

    def __init__(self, ctx: ServerContext) -> None:
        self.agent = ctx.agent
        self.limit = ctx.config.limits.max_body_bytes
        self.part_limit = ctx.config.limits.max_part_bytes
        self.heartbeat = ctx.config.sse_heartbeat
        self.model_name = ctx.model_label

    def routes(self) -> list[BaseRoute]:
        return [Route("/agui", self.run, methods=["POST"])]

    async def run(self, request: Request) -> EventStream:
        run_input = parse_run_input(await read_json(request, self.limit), self.part_limit)
        caller = caller_of(request)
        thread = run_input.thread_id
        began = time.perf_counter()
        try:
            waiting = [
                a.call.id for a in await self.agent.pending_approvals(caller.internal(thread))
            ]
        except (AgentikError, ValueError) as exc:
            raise refuse("agui", caller, thread, exc, began) from exc
        answered = frozenset(e.interrupt_id for e in run_input.resume)
        # The client has the calls it answers, and the others of the batch it
        # answers from; calls waiting that it names none of are new to it (a
        # retried resume, after the turn paused again): they are streamed.
        known = answered | frozenset(waiting) if answered.intersection(waiting) else answered
        translator = AguiRun(
            thread,
            run_input.run_id,
            model_name=self.model_name,
            known_calls=known,
            ids=run_ids(run_input),
        )
        # The run sent again (its new message's turn is stored under the run's
        # key): answered with that turn, as the agent gives it back.
        again = await _sent_before(self.agent, caller, run_input)
        if run_input.resume:
            stack = AsyncExitStack()
            resumed = _Resumed(
                self.agent, caller, run_input, waiting, translator, stack, began, again
            )
            return EventStream(_sse(resumed.events()), stack.aclose, heartbeat=self.heartbeat)
        if waiting and not again:
            # AG-UI: leaving an interrupt unanswered is not abandoning it, so a
            # new message does not deny what waits (as ``send`` would): refused.
            log_turn("agui", caller, thread, "refused:awaiting_approval", began)
            refused = translator.start(run_input.parent_run_id)
            refused += translator.error(_awaiting(waiting), "awaiting_approval")
            return EventStream(_sse(_each(refused)), AsyncExitStack().aclose, heartbeat=None)
        assert run_input.text is not None  # a run without resume brings its message
        events, stack = await open_stream(
            self.agent,
            "agui",
            caller,
            thread,
            run_input.text,
            run_input.turn_key,
            output=run_input.output_schema,
            parts=run_input.parts,
        )

        async def plain() -> AsyncIterator[JsonObject]:
            for out in translator.start(run_input.parent_run_id):
                yield out
            async for out in _translated(translator, events):
                yield out
            for out in translator.finish():
                yield out

        return EventStream(_sse(plain()), stack.aclose, heartbeat=self.heartbeat)


async def _sent_before(agent: ChatAgent, caller: Caller, run: RunInput) -> bool:
    """Whether the run's new message was stored before: the run is sent again."""
    key = run.turn_key
    if key is None:
        return False
    stored = caller.internal(run.thread_id)
    try:
        return await agent.storage.message_store.find_idempotency_key(stored, key) is not None
    except (AgentikError, ValueError):
        return False  # the turn itself will tell (its key is looked up again)


async def _translated(
    translator: AguiRun, events: AsyncIterator[TurnEvent]
) -> AsyncIterator[JsonObject]:
    """A turn's events as AG-UI events. A turn that ends before any event of
    its own was answered from storage (its run sent again, while or after the
    first ran): it is sent whole, as the first run sent it."""
    streamed = False
    async for event in events:
        if isinstance(event, TurnFinished) and not streamed:
            outs = translator.replay_turn(event)
        else:
            outs = translator.translate(event)
        streamed = True
        for out in outs:
            yield out


@attrs.define
class _Resumed:
    """A run that answers interrupts: check every answer, take them, stream
    the turn going on, then the new message's turn if the run brings one."""

    agent: ChatAgent
    caller: Caller
    run_input: RunInput
    waiting: list[str]
    """The calls waiting for a decision when the run began, oldest first."""
    translator: AguiRun
    stack: AsyncExitStack
    """Holds the agent streams open; the response closes it, however it ends."""
    began: float
    again: bool = False
    """The run was sent before: its new message's turn is stored."""
    _outcome: str | None = attrs.field(default=None, init=False)
    """``failed:<code>`` once a turn of the run failed (the turn log's word)."""

    async def events(self) -> AsyncIterator[JsonObject]:
        run, translator = self.run_input, self.translator
        outcome = "disconnected"
        try:
            for out in translator.start(run.parent_run_id):
                yield out
            try:
                ordered, replayed = await self._check_and_replay()
                for decision in ordered:
                    stream = self.agent.stream_decision(
                        self._stored,
                        decision.call_id,
                        approve=decision.approve,
                        reason=decision.reason,
                    )
                    async for out in self._relay(await self.stack.enter_async_context(stream)):
                        yield out
                if run.text is not None and not translator.ended:
                    events, inner = await open_stream(
                        self.agent,
                        "agui",
                        self.caller,
                        run.thread_id,
                        run.text,
                        run.turn_key,
                        output=run.output_schema,
                        parts=run.parts,
                    )
                    self.stack.push_async_callback(inner.aclose)
                    async for out in self._relay(events, whole=True):
                        yield out
            except AguiRunError as exc:
                outcome = f"refused:{exc.code}"
                for out in translator.error(exc.message, exc.code):
                    yield out
                return
            except (AgentikError, ValueError, HttpError) as exc:
                # Refused by the agent once the run had started (overloaded,
                # shutting down): the same words an HTTP refusal has.
                error = exc if isinstance(exc, HttpError) else self._refusal(exc)
                outcome = f"refused:{error.code}"
                for out in translator.error(error.message, error.code):
                    yield out
                return
            if translator.result is None and replayed is not None:
                active = [s.name for s in self.agent.toolset_status(self._stored) if s.active]
                for out in translator.replay(replayed, active):
                    yield out
            for out in translator.finish():
                yield out
            outcome = self._outcome or "finished"
        finally:
            log_turn("agui", self.caller, run.thread_id, outcome, self.began)

    @property
    def _stored(self) -> str:
        return self.caller.internal(self.run_input.thread_id)

    async def _check_and_replay(self) -> tuple[list[Decision], TurnResult | None]:
        """Every answer checked before any is taken (``AguiRunError`` if one
        cannot be): its payload, that a new message comes with an answer for
        every waiting call, and answers about calls that no longer wait (the
        same decision again is a retry: its turn's result, taken from the
        agent; any other is refused). Returns the decisions to take, in the
        order the calls wait, and the result of the last retried one."""
        run = self.run_input
        decisions = decisions_of(run.resume)
        answered = {d.call_id for d in decisions}
        unanswered = [c for c in self.waiting if c not in answered]
        if run.text is not None and unanswered and not self.again:
            raise AguiRunError(_awaiting(unanswered), "awaiting_approval")
        replayed = None
        for decision in decisions:
            if decision.call_id in self.waiting:
                continue
            try:  # takes nothing: the call does not wait
                replayed = await self.agent.decide(
                    self._stored,
                    decision.call_id,
                    approve=decision.approve,
                    reason=decision.reason,
                )
            except ApprovalError as exc:
                raise AguiRunError(self._scoped(str(exc)), exc.code) from exc
        order = {call_id: i for i, call_id in enumerate(self.waiting)}
        ordered = sorted(
            (d for d in decisions if d.call_id in order), key=lambda d: order[d.call_id]
        )
        return ordered, replayed

    async def _relay(
        self, events: AsyncIterator[TurnEvent], *, whole: bool = False
    ) -> AsyncIterator[JsonObject]:
        """``whole``: a new message's turn, sent whole if the agent answers it
        from storage (``_translated``)."""

        async def scoped() -> AsyncIterator[TurnEvent]:
            async for event in events:
                if isinstance(event, TurnFailed):
                    self._outcome = f"failed:{event.code}"
                    event = TurnFailed(self._scoped(event.message), event.code)
                yield event

        translated = (
            _translated(self.translator, scoped())
            if whole
            else (out async for event in scoped() for out in self.translator.translate(event))
        )
        async for out in translated:
            yield out
            if self.translator.ended:
                return

    def _refusal(self, exc: AgentikError | ValueError) -> HttpError:
        return to_http_error(exc, self.caller, self.run_input.thread_id)

    def _scoped(self, message: str) -> str:
        """``message`` naming the thread as the client sent it, not as stored."""
        stored, thread = self._stored, self.run_input.thread_id
        if SEPARATOR not in stored:
            return message
        return message.replace(repr(stored), repr(thread)).replace(stored, thread)


def _awaiting(call_ids: Iterable[str]) -> str:
    named = ", ".join(repr(c) for c in call_ids)
    return (
        f"tool calls wait for a decision: {named}; answer each in 'resume'"
        " (status 'cancelled' denies it)"
    )


async def _each(events: list[JsonObject]) -> AsyncIterator[JsonObject]:
    for event in events:
        yield event


async def _sse(events: AsyncIterator[JsonObject]) -> AsyncIterator[bytes]:
    async for event in events:
        yield sse_frame(event)
