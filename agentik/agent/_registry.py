"""The supervisor's registry of live conversations: their tasks, from the
first request for one to its retirement, and the agent's close.

``ChatAgent`` (``_chat_agent``) is the API; this is what it routes through.
A request goes to its conversation's bounded inbox (``route``), whose task is
spawned on first use and refused past ``max_conversations``, a turn past
``max_queued_turns`` waiting refused too (``OverloadedError``). A task idle
for ``idle_timeout`` with no active toolset is retired (the reaper), and a
retired one answers what was queued before it exits; every task of a node
that lost its lease is interrupted and retired at once (``_drop_all``).
Closing refuses new requests and closes every inbox: queued turns run, then
the tasks exit; with a grace, turns still running when it is over are
interrupted. The registry never touches a ``Conversation``: it holds each
one's ``ConversationHandle`` (``_handle`` says what it may do through it).
"""

from __future__ import annotations

import logging
import math
from typing import final

import trio

from agentik._errors import AgentikError, OverloadedError
from agentik.agent._checks import check_turn
from agentik.agent._conversation import Conversation
from agentik.agent._gc import track_conversations
from agentik.agent._handle import ConversationHandle
from agentik.agent._requests import Request
from agentik.agent._runtime import AgentRuntime
from agentik.toolsets import ToolsetActivation

log = logging.getLogger("agentik.agent")


@final
class Registry:
    """The live conversations of one agent, by id, and their tasks."""

    def __init__(self, runtime: AgentRuntime, nursery: trio.Nursery, *, tracks_gc: bool) -> None:
        self._runtime = runtime
        self._nursery = nursery
        self.handles: dict[str, ConversationHandle] = {}
        """The live conversations, by id (a retired one leaves at once)."""
        self.tasks: set[ConversationHandle] = set()
        """Conversations whose task has not exited yet (a retired one still
        answers what was queued)."""
        self.closing = False
        self._interrupt_at = math.inf
        """When running turns are interrupted (``close``'s grace); inf: never."""
        self._grace: trio.CancelScope | None = None
        self._exited = trio.Event()
        """Set once closing and every conversation task has exited."""
        self._reaper_scope = trio.CancelScope()
        self.resume_scope = trio.CancelScope()
        """Around the resumption of interrupted turns at start (``ChatAgent``)."""
        # Several nodes on one database: a conversation's turns run on the node
        # that owns it (docs/scale-out.md); one that loses its lease drops them all.
        self._ownership = runtime.storage.ownership
        self._unsubscribe = (
            None if self._ownership is None else self._ownership.on_lost(self._drop_all)
        )
        self._tracks_gc = tracks_gc
        """The agent relaxed the collector: its live conversations scale the
        first threshold (``_gc.track_conversations``)."""
        nursery.start_soon(self._reap)

    def close(self, grace: float | None) -> None:
        """Refuse new requests, close every inbox, and interrupt the turns
        still running ``grace`` seconds from now (None: never); a later call
        may only bring that nearer (``ChatAgent.close``)."""
        if not self.closing:
            self._begin_close()
        if grace is None:
            return
        deadline = trio.current_time() + grace
        if deadline >= self._interrupt_at:
            return
        self._interrupt_at = deadline
        if self._grace is not None:
            self._grace.deadline = deadline
        elif self.tasks:  # a task of the nursery: it is still open
            self._grace = trio.CancelScope(deadline=deadline)
            self._nursery.start_soon(self._interrupt_when_due, self._grace)

    async def route(
        self,
        conversation_id: str,
        request: Request,
        *,
        text: str | None = None,
        schedule: bool = True,
    ) -> ConversationHandle:
        """Hand ``request`` to its conversation's task (spawned if need be) and
        return its handle; ``text``: a new turn's message, checked here.

        ``schedule=False`` when the caller's next step is a schedule point of
        its own (``send`` waits for the reply): the request then goes in
        without one when the inbox has room, one task switch a turn fewer.
        A cancelled caller still sends nothing."""
        check_turn(conversation_id, text, request.idempotency_key)
        ownership = self._ownership
        tenure = None
        if ownership is not None:
            if not ownership.owns(conversation_id):
                await ownership.claim(conversation_id)  # or NotOwnedError: the owner runs it
            tenure = ownership.tenure(conversation_id)
        settings = self._runtime.settings
        while True:
            if self.closing:
                raise AgentikError("the agent is closed")
            handle = self.handles.get(conversation_id)
            if handle is not None and handle.tenure != tenure:
                # The node lost the conversation (and maybe got it back) since
                # the task started: its cache may be behind; a new task loads it.
                handle.interrupt()
                self.retire(handle)
                handle = None
            if handle is None:
                if len(self.handles) >= settings.max_conversations:
                    self._runtime.stats.overloaded += 1
                    raise OverloadedError(
                        f"{len(self.handles)} conversations are live"
                        f" (max_conversations={settings.max_conversations}); retry later"
                    )
                handle = self._spawn(conversation_id, tenure)
            if settings.turn_queue_size > settings.max_queued_turns:
                self._check_backlog(handle)
            handle.sent(request)  # before it is taken: ``cancel`` reaches it from now
            sent = False
            mailbox = handle.mailbox
            try:
                await trio.lowlevel.checkpoint_if_cancelled()
                try:
                    # Room in the inbox: fewer than ``turn_queue_size`` queued and
                    # nobody waiting for room, within bounds (checked above else).
                    mailbox.send_nowait(request)
                except trio.WouldBlock:
                    self._check_backlog(handle)
                    await mailbox.send(request)
                else:
                    if schedule:
                        await trio.lowlevel.cancel_shielded_checkpoint()
                sent = True
                return handle
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                continue  # it retired as we sent; the next loop respawns it
            finally:
                if not sent:
                    handle.forget(request)

    def _check_backlog(self, handle: ConversationHandle) -> None:
        """Refuse a turn past ``max_queued_turns`` waiting (``OverloadedError``)."""
        limit = self._runtime.settings.max_queued_turns
        backlog = handle.backlog
        if backlog >= limit:
            self._runtime.stats.overloaded += 1
            raise OverloadedError(
                f"conversation {handle.conversation_id!r} has {backlog} turns"
                f" queued (max_queued_turns={limit}); retry later"
            )

    def _spawn(self, conversation_id: str, tenure: str | None) -> ConversationHandle:
        settings = self._runtime.settings
        sender, receiver = trio.open_memory_channel[Request](settings.turn_queue_size)
        handle = ConversationHandle(conversation_id, sender, tenure=tenure)
        conversation = Conversation(
            conversation_id,
            self._runtime,
            receiver,
            handle,
            ToolsetActivation(settings.activation_timeout),
        )
        self.handles[conversation_id] = handle
        self.tasks.add(handle)
        self._runtime.stats.live_conversations += 1
        if self._tracks_gc:
            track_conversations(1)
        self._nursery.start_soon(conversation.run, self.retire, self._exit)
        return handle

    def _exit(self, handle: ConversationHandle) -> None:
        """The conversation's task is over (its last act)."""
        self.tasks.discard(handle)
        if self.closing and not self.tasks:
            self._exited.set()

    def retire(self, handle: ConversationHandle) -> None:
        """Take the conversation out of the registry and close its inbox: its
        task answers what was queued, then exits."""
        cid = handle.conversation_id
        if self.handles.get(cid) is handle:
            del self.handles[cid]
            handle.mailbox.close()
            self._runtime.stats.live_conversations -= 1
            if self._tracks_gc:
                track_conversations(-1)

    async def _reap(self) -> None:
        """Retire conversations idle for ``idle_timeout`` (and with no active
        toolset). One task scanning now and then is cheaper than a timer around
        every conversation's inbox."""
        idle_timeout = self._runtime.settings.idle_timeout
        period = max(min(idle_timeout / 4, 15.0), 0.01)
        with self._reaper_scope:
            while True:
                await trio.sleep(period)
                now = trio.current_time()
                for handle in list(self.handles.values()):
                    if handle.idle_for(now) >= idle_timeout:
                        self.retire(handle)

    def _drop_all(self) -> None:
        """This node lost every conversation (its lease lapsed): stop their
        turns, as interrupted (not failed: their new owner resumes them), and
        forget what it cached of them, so nothing stale runs on if it owns
        them again later."""
        for handle in list(self.handles.values()):
            handle.interrupt()
            self.retire(handle)

    def _begin_close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.closing = True
        self._reaper_scope.cancel()
        self.resume_scope.cancel()  # turns it resumed finish in their conversations
        for handle in list(self.handles.values()):
            handle.mailbox.close()  # queued turns still run; then the task exits
        if not self.tasks:
            self._exited.set()

    async def _interrupt_when_due(self, grace: trio.CancelScope) -> None:
        """Interrupt what still runs once ``grace`` is over (``close``)."""
        with grace:
            await self._exited.wait()
        if grace.cancelled_caught and self.tasks:
            log.info(
                "closing: the grace is over; interrupting the turns of %d conversation(s)",
                len(self.tasks),
            )
            for handle in list(self.tasks):
                handle.interrupt()
