"""A conversation's paused turn: the calls that wait for a person's decision.

``Conversation`` (``_conversation``) serves requests; the ones about a paused
turn (a decision, ``cancel_paused``, ``pending_approvals``, a new message
that supersedes the pause, the approval timeout) are decided here, in the
conversation's own task, over ``Approvals``' two fields and what the
conversation lends it through ``ApprovalHost``. Kept apart so the actor's
module is its loop and its cache, and the rules of a pause read in one place:

- a turn waits for approval in ``paused`` until every waiting call is decided;
  its deadline (``approval_timeout``) is armed once, when it first pauses;
- a decision about a call that no longer waits answers the turn as it stands
  if it is the same decision, and is refused (``already_decided``) if not;
- a new message, ``cancel_paused`` or the timeout denies the waiting calls,
  so the history stays valid whatever comes next.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from agentik._errors import AgentikError, ApprovalError, TurnError
from agentik.agent._events import ApprovalRequest, TurnResult
from agentik.agent._failures import message_of
from agentik.agent._optional_work import log_failure
from agentik.agent._recovery import last_turn_start
from agentik.agent._turn_events import CANCELLED_REASON, Decided, TurnState, TurnStateError
from agentik.storage import TurnRecord

if TYPE_CHECKING:
    from agentik.agent._handle import ConversationHandle
    from agentik.agent._history_cache import HistoryCache
    from agentik.agent._requests import Abandon, Decision, Reply, StatusQuery
    from agentik.agent._runtime import AgentRuntime
    from agentik.agent._turn import EmitFn, Turn

log = logging.getLogger("agentik.conversation")


class ApprovalHost(Protocol):
    """What the rules of a pause use of their conversation (``Conversation``)."""

    conversation_id: str
    runtime: AgentRuntime
    handle: ConversationHandle
    cache: HistoryCache
    scope: trio.CancelScope

    def runs_on(self, turn: Turn | None) -> None: ...

    def ran(self) -> None: ...

    def publish(self) -> None: ...

    def emitter(self, reply: Reply[TurnResult]) -> EmitFn | None: ...


@attrs.define(eq=False)
class Approvals:
    """The paused turn of one conversation, and its approval deadline."""

    host: ApprovalHost
    paused: Turn | None = None
    """The last turn, while calls of it wait for a person's decision."""
    deadline: float = math.inf
    """When the paused turn's waiting calls are denied (``approval_timeout``)."""

    def clear(self) -> None:
        """No turn waits (the cache was dropped, or the pause ended)."""
        self.paused = None
        self.deadline = math.inf

    def after(self, turn: Turn, result: TurnResult) -> TurnResult:
        """Keep a turn that waits for approval (and arm its timeout)."""
        if result.status == "awaiting_approval":
            self.paused = turn
            timeout = self.host.runtime.settings.approval_timeout
            if timeout is not None and self.deadline == math.inf:
                self.deadline = trio.current_time() + timeout
        else:
            self.clear()
        return result

    def result_of(self, turn: Turn) -> TurnResult:
        """The paused ``turn`` as it stands: its messages and waiting calls."""
        cid = self.host.conversation_id
        return TurnResult(
            "",
            self.host.cache.history[turn.start :],
            turn.usage,
            status="awaiting_approval",
            approvals=tuple(ApprovalRequest(cid, c) for c in turn.machine.waiting.values()),
        )

    async def decision(self, request: Decision) -> TurnResult:
        key = request.idempotency_key
        if not await self._paused_by(key):
            return await self._decided_earlier(request.decided, key)
        paused = self.paused
        if key is not None and paused is not None and paused.key is None:
            paused.key = key  # resumed after a restart, it did not know its key
        return await self._decide(request.decided, self.host.emitter(request.reply))

    async def status(self, request: StatusQuery) -> TurnResult:
        """Run nothing; the paused turn as it stands (its load on the way
        recovered the last turn: how the agent resumes interrupted turns)."""
        paused = self.paused
        return TurnResult("", ()) if paused is None else self.result_of(paused)

    async def supersede(self) -> None:
        """A new message while calls wait: they are denied, history stays valid."""
        paused = self.paused
        assert paused is not None
        self.clear()
        paused.emit = None
        await paused.run(paused.machine.supersede())

    async def abandon(self, request: Abandon) -> TurnResult:
        """``ChatAgent.cancel_paused``: deny the waiting calls, run nothing more,
        record the turn as cancelled."""
        host = self.host
        key = request.idempotency_key
        paused = self.paused
        if paused is None or not await self._paused_by(key):
            raise ApprovalError(
                f"no turn with idempotency key {key!r} waits for approval in conversation"
                f" {host.conversation_id!r}",
                code="not_waiting",
            )
        self.clear()
        paused.emit = None
        await paused.run(paused.machine.supersede(CANCELLED_REASON))
        seq = host.cache.first_seq + paused.start
        host.runtime.remember_failure(host.conversation_id, seq, "cancelled")
        await paused.record_failure("cancelled")
        return TurnResult("", host.cache.history[paused.start :], paused.usage)

    async def timed_out(self) -> None:
        """No decision came in time: deny every waiting call, and let the turn go on."""
        host = self.host
        paused = self.paused
        self.deadline = math.inf
        if paused is None or host.handle.interrupted:
            return  # (shutting down: the calls wait on, stored; a restart times them out)
        timeout = host.runtime.settings.approval_timeout
        reason = f"no decision within {timeout:g} s"
        host.handle.scope = host.scope  # ``cancel`` stops the denials (``_serve_in_scope``)
        try:
            for call_id in list(paused.machine.waiting):
                if paused.machine.state is not TurnState.APPROVAL:
                    break
                await self._decide(Decided(call_id, False, reason))
        except (TurnError, ApprovalError) as exc:
            log_failure(
                host.conversation_id, TurnError(message_of(exc), code=getattr(exc, "code", ""))
            )
        except AgentikError as exc:
            host.cache.stale = True
            log.warning("conversation %r: %s", host.conversation_id, message_of(exc))
        host.ran()
        host.publish()

    async def _decide(self, decision: Decided, emit: EmitFn | None = None) -> TurnResult:
        paused = self.paused
        machine = None if paused is None else paused.machine
        if (
            paused is None
            or machine is None
            or (
                decision.call_id not in machine.waiting
                and decision.call_id not in machine.decisions
            )
        ):
            return await self._decided_earlier(decision)
        try:
            actions = machine.handle(decision)
        except TurnStateError as exc:
            raise ApprovalError(str(exc), code="already_decided") from exc
        if not actions:  # the same decision again
            return self.result_of(paused)
        host = self.host
        host.runtime.stats.approvals_decided += 1
        paused.emit = emit  # a streamed decision (``stream_decision``) reports what follows
        self.clear()  # running again; ``after`` keeps it if it pauses again
        host.runs_on(paused)
        try:
            result = await paused.run(actions)
        finally:
            paused.emit = None  # this caller's stream ends with the result
            host.runs_on(None)
        assert result is not None
        return self.after(paused, result)

    async def _paused_by(self, key: str | None) -> bool:
        """Whether the paused turn is the one carrying ``key`` (any paused turn
        when ``key`` is None); False when none is paused."""
        paused = self.paused
        if paused is None:
            return False
        return (
            key is None
            or await self.host.cache.find_key(key) == self.host.cache.first_seq + paused.start
        )

    async def _decided_earlier(self, decision: Decided, key: str | None = None) -> TurnResult:
        """A decision about a call of the last turn that no longer waits: the
        same decision again answers the turn as it stands; another is refused.
        With ``key``, only about the turn carrying it."""
        host = self.host
        start = last_turn_start(host.cache.history)
        named = None if key is None else await host.cache.find_key(key)
        if key is not None and start is not None and named != host.cache.first_seq + start:
            start = None  # the key names no turn, or not the last one
        record = TurnRecord() if start is None else await host.cache.turn_record(start)
        for approval in record.approvals:
            if approval.call_id != decision.call_id or approval.approved is None:
                continue
            if approval.approved != decision.approve:
                taken = "approved" if approval.approved else "denied"
                raise ApprovalError(
                    f"call {decision.call_id!r} was already {taken}", code="already_decided"
                )
            assert start is not None
            replay = host.cache.replay(start)
            if replay is not None:
                return replay
            paused = self.paused
            if paused is not None:
                return self.result_of(paused)
        raise ApprovalError(
            f"call {decision.call_id!r} is not waiting for approval in conversation"
            f" {host.conversation_id!r}",
            code="not_waiting",
        )
