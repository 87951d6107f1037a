"""The supervisor: the ``ChatAgent`` that ``open_chat_agent`` (``_open``) yields.

``ChatAgent`` is the API: each method checks its input and sends a request
(``_requests``) to its conversation through the agent's ``Registry``
(``_registry``), which owns the nursery every conversation task runs in,
spawns a task on first use, refuses turns past a bound rather than queueing
without limit, retires idle ones, and closes. Neither ever touches a
``Conversation``: they hold each one's ``ConversationHandle`` (``_handle``
says what they may do through it).

Closing (``ChatAgent.close``, or leaving ``open_chat_agent``) refuses new
requests and closes every inbox: queued turns run, then the tasks exit. With
a grace (``close(grace=...)``, ``open_chat_agent(close_grace=...)``), turns
still running when it is over are interrupted: each records
``interrupted: …`` for its open calls and is resumed at the next start, and
queued requests are answered without running. If the block raises, the
nursery cancels the tasks, and each turn records results for the tool calls
it could not finish.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, final

import attrs
import trio

from agentik._errors import ApprovalError, NotOwnedError
from agentik._json import JsonObject
from agentik._parts import Part
from agentik.agent._checks import check_deletes, check_turn, check_unicode, decision
from agentik.agent._child_calls import ChildCall
from agentik.agent._content import check_supported, turn_input
from agentik.agent._elicitation import (
    ElicitationAction,
    ElicitationError,
    ElicitationRequest,
    ElicitationSource,
)
from agentik.agent._events import ApprovalRequest, TurnEvent, TurnFailed, TurnResult
from agentik.agent._model_limits import fairness_key
from agentik.agent._output import OutputType, output_spec
from agentik.agent._registry import Registry
from agentik.agent._requests import (
    Abandon,
    Decision,
    Delete,
    NewTurn,
    Reply,
    StatusQuery,
)
from agentik.agent._resume import resume_interrupted_turns
from agentik.agent._runtime import AgentRuntime
from agentik.agent._stats import AgentStats
from agentik.models import ModelScheduler, PartKind, accepts_parts_of
from agentik.storage import FullMessageStore, Storage
from agentik.toolsets import (
    ToolsetContribution,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context

log = logging.getLogger("agentik.agent")

_EVENT_BUFFER = 64


@attrs.frozen
class ToolsetStatus:
    """One toolset as a conversation sees it now."""

    name: str
    description: str
    active: bool
    expires_in: float | None
    """Seconds until it expires unless used; None when inactive."""


@final
class ChatAgent:
    """Runs turns of many conversations; made by ``open_chat_agent``."""

    def __init__(
        self,
        runtime: AgentRuntime,
        nursery: trio.Nursery,
        *,
        elicitors: tuple[ElicitationSource, ...] = (),
        tracks_gc: bool = False,
        scheduler: ModelScheduler | None = None,
    ) -> None:
        self._runtime = runtime
        self._nursery = nursery
        self._registry = Registry(runtime, nursery, tracks_gc=tracks_gc)
        """The live conversations and their tasks (``_registry``)."""
        self._elicitors = elicitors
        """Toolset sources whose tools may ask a person mid-call (MCP servers)."""
        self._scheduler = scheduler
        """Admits every model call under ``model_limits`` (None: no limits)."""

    @property
    def storage(self) -> Storage:
        """The agent's storage; write skills and reflections through it so the
        prompt caches stay correct."""
        return self._runtime.storage

    @property
    def stats(self) -> AgentStats:
        return self._runtime.stats

    @property
    def contributions(self) -> tuple[ToolsetContribution, ...]:
        """The toolsets as they are now."""
        return self._runtime.toolsets()[0]

    @property
    def live_conversations(self) -> int:
        return len(self._registry.handles)

    @property
    def model_scheduler(self) -> ModelScheduler | None:
        """The one queue of the agent's model calls under ``model_limits``
        (its state and stats), or None without limits."""
        return self._scheduler

    @property
    def accepts_parts(self) -> frozenset[PartKind]:
        """The kinds of content part a turn may carry (``send(content=...)``):
        the model's ``accepts_parts``, and images when ``describe_image``
        maps them to text."""
        kinds = accepts_parts_of(self._runtime.model)
        if self._runtime.settings.describe_image is not None:
            kinds = kinds | {"image"}
        return kinds

    @property
    def tracing(self) -> bool:
        """Whether the agent emits OpenTelemetry spans (``tracer_provider``)."""
        return self._runtime.tracing is not None

    async def send(
        self,
        conversation_id: str,
        text: str | None = None,
        *,
        content: Sequence[Part] | None = None,
        idempotency_key: str | None = None,
        output: OutputType | None = None,
    ) -> TurnResult:
        """Run one turn and return its result once every message is committed.

        Waits for room when the conversation's inbox is full; raises
        ``OverloadedError`` past ``max_queued_turns`` waiting turns, and
        ``TurnError`` when the turn fails (its history stays valid). With
        ``idempotency_key``, a retry returns the first result and adds nothing.
        A caller that stops waiting (cancelled) while the turn is still queued
        leaves it unstarted; once started, the turn goes on and is committed.
        With ``model_limits``, raises ``OverloadedError`` at once when the turn
        would expect to wait for the model longer than ``max_queue_wait``.

        With ``output`` (an attrs class, a dataclass, a ``TypedDict`` or a JSON
        Schema dict), the model is asked for a JSON answer of that shape and
        ``TurnResult.output`` holds it, validated; an invalid answer is sent
        back with its error up to ``output_retries`` times, then the turn fails
        with ``TurnError`` (``invalid_output``) and nothing of the bad answers
        is stored. A keyed retry reads the stored answer with ``output``.

        ``content`` instead of ``text``: a list of ``TextPart``, ``ImagePart``
        and ``FilePart``. The user message keeps the text parts' text (joined
        by newlines) as its ``content`` and the images and files, in order,
        as its ``parts``. A part the model does not take (its
        ``accepts_parts``) raises ``TurnError`` (``unsupported_content``)
        before anything is stored, unless ``describe_image`` maps images to text.
        """
        spec = None if output is None else output_spec(output)  # refused before anything runs
        parts: tuple[Part, ...] = ()
        if content is not None or text is None:
            text, parts = self._content(text, content)
        if self._scheduler is not None:  # refused before anything is stored
            self._scheduler.check(fairness_key(conversation_id))
        request = NewTurn(
            text=text,
            idempotency_key=idempotency_key,
            reply=Reply(),
            output=spec,
            trace_context=self._trace(),
            parts=parts,
        )
        handle = await self._registry.route(
            conversation_id, request, text=None if parts else text, schedule=False
        )
        try:
            return await request.reply.wait()  # the call's schedule point
        finally:
            handle.forget(request)

    @asynccontextmanager
    async def stream(
        self,
        conversation_id: str,
        text: str | None = None,
        *,
        content: Sequence[Part] | None = None,
        idempotency_key: str | None = None,
        output: OutputType | None = None,
    ) -> AsyncIterator[AsyncIterator[TurnEvent]]:
        """Run one turn, yielding its events as they happen; the last one is
        ``TurnFinished`` or ``TurnFailed``. Leaving early does not stop a turn
        that started; one still queued then never starts. ``output`` as for
        ``send``: ``TurnFinished.result.output`` holds the typed answer (the
        text deltas of an invalid answer stream too, before it is asked again).
        ``content`` as for ``send``."""
        spec = None if output is None else output_spec(output)
        parts: tuple[Part, ...] = ()
        if content is not None or text is None:
            text, parts = self._content(text, content)
        if self._scheduler is not None:  # refused before anything is stored
            self._scheduler.check(fairness_key(conversation_id))
        sender, receiver = trio.open_memory_channel[TurnEvent](_EVENT_BUFFER)
        request = NewTurn(
            text=text,
            idempotency_key=idempotency_key,
            reply=Reply(events=sender),
            output=spec,
            trace_context=self._trace(),
            parts=parts,
        )
        try:
            handle = await self._registry.route(
                conversation_id, request, text=None if parts else text
            )
        except BaseException:
            sender.close()
            receiver.close()
            raise
        try:
            with receiver:
                yield receiver
        finally:
            handle.forget(request)

    async def decide(
        self,
        conversation_id: str,
        call_id: str,
        *,
        approve: bool,
        reason: str = "",
        idempotency_key: str | None = None,
    ) -> TurnResult:
        """Record a person's decision about a tool call waiting for approval.

        When it was the last waiting call of its turn, the turn runs on (approved
        calls run, a denied one gets the result ``denied: <reason>``) and its
        result is returned; otherwise the still-waiting result. Deciding a call
        again the same way changes nothing; the other way raises
        ``ApprovalError`` (``already_decided``), as does a call that does not
        wait (``not_waiting``). Decisions are durable: they survive a restart.

        ``idempotency_key``, the key of the paused turn's user message, ties the
        decision to that turn (a call of another turn is ``not_waiting``), and
        the turn it runs on is then that key's: ``turn_in_progress`` sees it and
        ``cancel(..., idempotency_key=...)`` stops it, as for the turn's first run.

        A call a child turn of the conversation waits on (``agent_tool``) is
        decided in the child conversation, and the child turn's result is
        returned (``idempotency_key`` is then not used); the parent turn, which
        waits in its agent-tool call, goes on when the child turn is over.
        """
        decided = decision(call_id, approve, reason)
        children = self._runtime.children
        if conversation_id in children.running:
            held = self._held(conversation_id, call_id)
            return await held.agent.decide(
                held.conversation_id, call_id, approve=approve, reason=reason
            )
        request = Decision(
            decided=decided,
            idempotency_key=idempotency_key,
            reply=Reply(),
            trace_context=self._trace(),
        )
        handle = await self._registry.route(conversation_id, request)
        try:
            return await request.reply.wait()
        finally:
            handle.forget(request)
            if children.watchers:
                children.moved(conversation_id)

    async def cancel_paused(self, conversation_id: str, *, idempotency_key: str) -> None:
        """End the conversation's turn that waits for approval, and carries
        ``idempotency_key``, as cancelled: each waiting call is denied
        (``denied: the turn was cancelled``) so history stays valid, nothing
        more runs, and the turn is recorded as cancelled (a restart does not
        resume it). Raises ``ApprovalError`` (``not_waiting``) when no such
        turn waits. (``cancel`` stops a turn that runs; a paused one does not.)
        """
        request = Abandon(
            idempotency_key=idempotency_key, reply=Reply(), trace_context=self._trace()
        )
        await self._registry.route(conversation_id, request)
        try:
            await request.reply.wait()
        finally:
            children = self._runtime.children
            if children.watchers:
                children.moved(conversation_id)

    @asynccontextmanager
    async def stream_decision(
        self, conversation_id: str, call_id: str, *, approve: bool, reason: str = ""
    ) -> AsyncIterator[AsyncIterator[TurnEvent]]:
        """``decide``, yielding the events of what follows as ``stream`` does:
        a denied call's result (``ToolCallFinished``), the turn running on, and
        last ``TurnFinished`` (its result is what ``decide`` returns) or
        ``TurnFailed`` (also for an ``ApprovalError``, with its code). For
        transports that stream the continued turn; leaving early does not stop it.
        A call a child turn waits on (``agent_tool``): the child's, as ``decide``."""
        decided = decision(call_id, approve, reason)
        children = self._runtime.children
        if conversation_id in children.running:
            try:
                held = self._held(conversation_id, call_id)
            except ApprovalError as exc:  # told as the stream's one event, as below
                sender, receiver = trio.open_memory_channel[TurnEvent](1)
                sender.send_nowait(TurnFailed(str(exc), exc.code, None))
                sender.close()
                with receiver:
                    yield receiver
                return
            async with held.agent.stream_decision(
                held.conversation_id, call_id, approve=approve, reason=reason
            ) as events:
                yield events
            return
        sender, receiver = trio.open_memory_channel[TurnEvent](_EVENT_BUFFER)
        request = Decision(
            decided=decided,
            idempotency_key=None,
            reply=Reply(events=sender),
            trace_context=self._trace(),
        )
        try:
            handle = await self._registry.route(conversation_id, request)
        except BaseException:
            sender.close()
            receiver.close()
            raise
        try:
            with receiver:
                yield receiver
        finally:
            handle.forget(request)
            if children.watchers:
                children.moved(conversation_id)

    def _held(self, conversation_id: str, call_id: str) -> ChildCall:
        """The agent-tool call of ``conversation_id`` whose child turn (or a
        descendant's) waits on ``call_id``. Its turn runs those calls, so no
        call of its own waits, and a decision sent to it would wait behind
        that turn: refused at once (``not_waiting``) when none holds it."""
        held = self._runtime.children.holder(conversation_id, call_id)
        if held is None:
            raise ApprovalError(
                f"call {call_id!r} is not waiting for approval in conversation {conversation_id!r}",
                code="not_waiting",
            )
        return held

    async def delete_conversation(self, conversation_id: str) -> bool:
        """Delete the conversation whole: its messages, idempotency keys, notes,
        reflections, summaries, pending approvals and failed-turn records, in
        one transaction of the store. True if it held anything.

        It takes its place in the conversation's queue: turns sent before it
        run first (and are deleted with the rest), turns sent after it start a
        new conversation at seq 1. Its live task keeps nothing of it (history,
        its summary, notes, keys, a turn waiting for approval, active toolsets). A
        seed-only bundle cannot (``TypeError``; agentik's backends can)."""
        return await self._delete(conversation_id, None)

    async def delete_idle_conversations(
        self, idle_before: datetime, *, limit: int = 100
    ) -> list[str]:
        """Delete up to ``limit`` conversations whose newest message is older
        than ``idle_before`` (retention), each through its queue like
        ``delete_conversation`` and all at once (the store commits them
        together, each still its own all-or-nothing request); return the ids
        deleted, sorted. A conversation that a turn used meanwhile is left
        alone: the store checks its age again in the delete's own transaction.
        One another live node owns (several nodes on PostgreSQL) is skipped:
        that node's retention deletes it."""
        store = self._runtime.storage.message_store
        check_deletes(self._runtime.storage)
        deleted: list[str] = []

        async def delete(conversation_id: str) -> None:
            try:
                if await self._delete(conversation_id, idle_before):
                    deleted.append(conversation_id)
            except NotOwnedError:
                pass  # another live node owns it: its own retention deletes it

        async with trio.open_nursery() as nursery:
            for conversation_id in await store.idle_conversations(idle_before, limit=limit):
                nursery.start_soon(delete, conversation_id)
        return sorted(deleted)

    async def _delete(self, conversation_id: str, idle_before: datetime | None) -> bool:
        check_deletes(self._runtime.storage)
        request = Delete(idle_before=idle_before, reply=Reply[bool]())
        await self._registry.route(conversation_id, request)
        return await request.reply.wait()

    async def pending_approvals(self, conversation_id: str) -> tuple[ApprovalRequest, ...]:
        """The tool calls of the conversation that wait for a decision, oldest
        first; while its turn waits in agent-tool calls (``agent_tool``), those
        their child turns wait on (each names its child conversation)."""
        children = self._runtime.children
        if conversation_id in children.running:
            # Its turn runs agent-tool calls, so it has no paused turn of its
            # own, and a query would wait behind that turn: answer from here.
            return children.waiting(conversation_id)
        request = StatusQuery(reply=Reply())
        await self._registry.route(conversation_id, request)
        return await self._approvals(conversation_id, request)

    async def _approvals(
        self, conversation_id: str, request: StatusQuery
    ) -> tuple[ApprovalRequest, ...]:
        """The answer to ``request``; or, if the running turn it waits behind
        comes to wait in agent-tool calls for a person first (that turn ends
        only after a decision), what their child turns wait on."""
        children = self._runtime.children
        found: tuple[ApprovalRequest, ...] = ()
        failed: Exception | None = None
        async with trio.open_nursery() as nursery:

            async def held() -> None:
                nonlocal found
                while not found:
                    moved = children.watch(conversation_id)
                    try:
                        await moved.wait()
                    finally:
                        children.unwatch(conversation_id, moved)
                    found = children.waiting(conversation_id)
                nursery.cancel_scope.cancel()  # the query goes on; nobody reads its answer

            nursery.start_soon(held)
            try:
                found = (await request.reply.wait()).approvals
            except Exception as exc:  # raised as itself below, not in a group
                failed = exc
            nursery.cancel_scope.cancel()
        if failed is not None:
            raise failed
        return found

    async def pending_elicitations(self, conversation_id: str) -> tuple[ElicitationRequest, ...]:
        """Questions running tools of the conversation ask a person (MCP elicitation)."""
        return tuple(
            request
            for source in self._elicitors
            for request in source.pending_elicitations(conversation_id)
        )

    async def answer_elicitation(
        self,
        conversation_id: str,
        elicitation_id: str,
        *,
        action: ElicitationAction = "accept",
        content: JsonObject | None = None,
    ) -> None:
        """Answer a question a running tool asks; the tool call (and the turn) goes on.

        Raises ``ElicitationError``: ``not_waiting`` (no such question waits in
        the conversation), ``invalid`` (content that does not match its schema);
        nothing changes then."""
        for source in self._elicitors:
            if source.answer_elicitation(
                conversation_id, elicitation_id, action=action, content=content
            ):
                return
        raise ElicitationError(
            f"no question {elicitation_id!r} waits in conversation {conversation_id!r}",
            code="not_waiting",
        )

    async def archive_memory(self, conversation_id: str, entry_ids: Sequence[int]) -> int:
        """Archive working-memory notes of the conversation, as the model's
        ``memory_archive`` tool does: they stay stored, archived, and leave its
        prompt from its next turn on (a live conversation reads its notes
        again). Returns how many were archived; ids that are not active notes
        of this conversation are left alone."""
        count = await self.storage.working_memory_store.archive(conversation_id, entry_ids)
        handle = self._registry.handles.get(conversation_id)
        if handle is not None:
            handle.notes_version += 1  # it reads them again before its next turn
        return count

    async def cancel(self, conversation_id: str, *, idempotency_key: str | None = None) -> int:
        """Cancel the conversation's running turn and its queued ones; return
        how many.

        The running turn stops at once (it does not wait in the queue behind
        itself) and ends as a failed turn does, code ``cancelled``: every call
        it made is answered, history stays valid, and a restart does not
        resume it (its caller hears so once its clean-up is committed). A
        queued turn is answered
        ``cancelled`` when its turn comes, without running. A turn waiting for
        approval is not running (``cancel_paused`` ends one), but one met
        while its pause (or a decision that leaves it paused) commits ends as
        ``cancel_paused`` ends it; requests that run no turn (deletes,
        queries) are left alone.

        With ``idempotency_key``, only the turns carrying that key (a turn's
        key, or its paused turn's that a decision runs on). Bad input raises
        ``ValueError``; an unknown conversation has nothing to cancel (0)."""
        check_turn(conversation_id, None, idempotency_key)
        handle = self._registry.handles.get(conversation_id)
        if handle is None:
            await trio.lowlevel.checkpoint()
            return 0
        count = handle.cancel(idempotency_key)
        await trio.lowlevel.checkpoint()
        return count

    def turn_in_progress(self, conversation_id: str, idempotency_key: str) -> bool:
        """Whether the turn carrying ``idempotency_key`` is running or queued now
        (its caller may have left: a turn goes on without it), also when it runs
        on after a decision that named no key."""
        handle = self._registry.handles.get(conversation_id)
        return handle is not None and handle.in_progress(idempotency_key)

    def resumes_interrupted(self, conversation_id: str, seq: int) -> bool:
        """Whether a turn that storage shows interrupted (its user message at
        ``seq``; not finished, not failed, no call waiting) will be resumed:
        the agent resumes interrupted turns (``resume_interrupted``: as it
        opens, or on the conversation's next request) and has not seen this
        one fail (a failure whose record could not be written). Such a turn
        is not over: a transport reports it running."""
        return self._runtime.settings.resume_interrupted and not self._runtime.failed(
            conversation_id, seq
        )

    def toolset_status(self, conversation_id: str) -> list[ToolsetStatus]:
        """Every toolset, active or not, for this conversation, in catalog order,
        as its task saw them at the end of its last request (``_handle``)."""
        handle = self._registry.handles.get(conversation_id)
        now = trio.current_time()
        out = []
        for c in self.contributions:
            expires = None if handle is None else handle.expires_in(c.name, now)
            out.append(ToolsetStatus(c.name, c.description, expires is not None, expires))
        return out

    def close(self, *, grace: float | None = None) -> None:
        """Stop taking requests, and end the turns under way within ``grace``.

        From now on every request raises ``AgentikError`` ("the agent is
        closed"; HTTP 503 with ``Retry-After``), and each conversation task
        exits once it has answered what it had queued: queued turns run (but
        not one whose caller has left), and a summary or reflection under way
        gets ``OPTIONAL_WORK_GRACE`` seconds. With ``grace``, turns still
        running ``grace`` seconds from now are interrupted: each records
        ``interrupted: …`` for its open calls, stays resumable (the agent
        resumes it at its next start, as after a crash) and its caller gets
        ``TurnError(code="interrupted")`` (``unavailable`` if its user message
        was not stored: nothing resumes it); requests still queued are answered
        ``TurnError(code="unavailable")`` without running. None: no deadline.

        Leaving ``open_chat_agent``'s block calls it (with ``close_grace``) and
        waits for the tasks. A later call may only bring the deadline nearer
        (a second signal: ``grace=0``). Call it from a task of the agent's trio
        run."""
        if grace is not None and not (isinstance(grace, int | float) and grace >= 0):
            raise ValueError(f"grace must be a number of seconds >= 0 or None, got {grace!r}")
        self._registry.close(grace)

    def _content(
        self, text: str | None, content: Sequence[Part] | None
    ) -> tuple[str, tuple[Part, ...]]:
        """A turn's text and parts from ``text`` or ``content``, refused (before
        anything is stored) when the model cannot take them."""
        text, parts = turn_input(text, content)
        if parts:
            settings = self._runtime.settings
            check_supported(parts, accepts_parts_of(self._runtime.model), settings.describe_image)
            if text:
                check_unicode("text", text)
            for i, part in enumerate(parts):  # no store or wire can carry a lone surrogate
                for name in ("url", "media_type", "filename"):
                    value = getattr(part, name, None)
                    if value is not None:
                        check_unicode(f"content part {i}'s {name}", value)
        return text, parts

    def _trace(self) -> Context | None:
        """The caller's OpenTelemetry context, when the agent traces."""
        tracing = self._runtime.tracing
        return None if tracing is None else tracing.current()

    async def _resume_at_start(self, store: FullMessageStore) -> None:
        """Resume the turns a stopped process left interrupted (``_resume``)."""
        with self._registry.resume_scope:
            await resume_interrupted_turns(store, self._recover, self._runtime.storage.ownership)

    async def _recover(self, conversation_id: str) -> None:
        """Have the conversation's task load it, which resumes its interrupted
        turn, and wait until it is done, or waits in agent-tool calls for a
        person (it may wait for days: it must not hold a resume slot)."""
        request = StatusQuery(reply=Reply())
        await self._registry.route(conversation_id, request)
        await self._approvals(conversation_id, request)
