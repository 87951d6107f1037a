"""A conversation coming back to where it stood: its cache made current (the
writes a cut-short turn left settled, a stale cache reloaded, the last turn
put where it stopped after a restart or a failed write: ``ready``), and a
turn sent again with its idempotency key answered from what is stored, from
its pause, or resumed (``sent_again``).

Apart from ``_conversation`` because none of it is on a turn's way: the
actor's loop calls ``ready`` only when its cache is not current (its first
request, or after a failure) and ``sent_again`` only for a key it has seen.
Apart from ``_recovery`` because that module is pure (it reads a turn's
state from its messages, and ``_turn`` imports it); this one acts on that
state: it reads the store, answers open calls and resumes turns (``Turn``,
so here it would make an import circle). Everything here runs in the
conversation's own task, over what ``RecoveryHost`` names.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import attrs

from agentik._errors import TurnError
from agentik._messages import Message, Role
from agentik.agent._optional_work import log_failure
from agentik.agent._recovery import (
    StoredState,
    last_turn_start,
    not_resumable,
    open_calls,
    status_of,
    usage_of,
)
from agentik.agent._turn import Turn
from agentik.agent._turn_events import INTERRUPTED, UNRECORDED
from agentik.agent._turn_host import TurnHost

if TYPE_CHECKING:
    from agentik.agent._approvals import Approvals
    from agentik.agent._events import TurnResult
    from agentik.agent._handle import ConversationHandle
    from agentik.agent._output import OutputSpec
    from agentik.agent._turn import EmitFn
    from agentik.storage import Storage, TurnRecord

log = logging.getLogger("agentik.conversation")


class RecoveryHost(TurnHost, Protocol):
    """What coming back uses of the conversation (``Conversation``): what
    its turns use, and the notes' version, the pause and the running key."""

    handle: ConversationHandle
    notes_seen: int
    approvals: Approvals

    @property
    def storage(self) -> Storage:
        """The agent's storage (its message store reads idempotency keys)."""
        ...

    @property
    def notes_stale(self) -> bool: ...

    def runs_on(self, turn: Turn | None) -> None: ...


async def ready(host: RecoveryHost) -> None:
    """The cache is current: writes a cut-short turn left are settled, a
    stale cache reloaded, and the last turn's state recovered."""
    if host.cache.inflight:
        await host.cache.settle_inflight()
    if host.cache.stale:
        # A failed write left the cache unsure: start again from the store.
        host.cache.forget()
    if not host.cache.loaded:
        # Noted before the read, so a change while it runs is read next time.
        host.notes_seen = host.handle.notes_version
        await host.cache.load()
        host.runtime.settle_doubts(host.conversation_id, host.cache.holds)
        recovered = False
        try:
            await _recover(host)
            recovered = True
        finally:
            # Cut short (cancelled while it read the turn's record, say): the
            # cache would pass for recovered with the last turn still open,
            # and the next turn would follow calls that wait for results.
            # The next request loads and recovers again.
            host.cache.stale = host.cache.stale or not recovered
    elif host.notes_stale:
        host.notes_seen = host.handle.notes_version
        notes = await host.storage.working_memory_store.list(host.conversation_id)
        host.memory[:] = notes


async def sent_again(
    host: RecoveryHost, key: str, seq: int, emit: EmitFn | None, output: OutputSpec | None = None
) -> TurnResult:
    """A turn sent again with its idempotency key: its stored result, its
    pending approvals, or (cut short earlier) the turn resumed."""
    start = seq - host.cache.first_seq
    if start < 0:  # older than the cache (summarized): read it back
        return await host.cache.replay_stored(key, seq)
    replay = host.cache.replay(start)
    if replay is not None:
        host.runtime.stats.turns_replayed += 1
        return replay
    paused = host.approvals.paused
    if paused is not None and paused.start == start:
        return host.approvals.result_of(paused)
    if host.cache.has_later_turn(start):
        raise not_resumable(key)
    # Its user message is stored: resume the turn where it stopped.
    record = await host.cache.turn_record(start)
    return await _resume(host, start, record, emit, key, output)


async def _resume(
    host: RecoveryHost,
    start: int,
    record: TurnRecord,
    emit: EmitFn | None,
    key: str | None,
    output: OutputSpec | None = None,
) -> TurnResult:
    turn = Turn.new(host, start, emit, key, usage_of(host.cache.history[start:]), output)
    host.runtime.stats.turns_resumed += 1
    # Running as its key's turn: seen running, cancelled by its key.
    host.runs_on(turn)
    try:
        result = await turn.resume(record)
    finally:
        host.runs_on(None)
    assert result is not None
    return host.approvals.after(turn, result)


async def _recover(host: RecoveryHost) -> None:
    """Put the last turn where it stopped: a turn waiting for approval waits
    again; an interrupted one (the process stopped mid-turn) is resumed
    (``resume_interrupted``), or its open calls only answered; a failed or
    superseded one is left as it is, its open calls answered if a stop
    left any."""
    start = last_turn_start(host.cache.history)
    if start is None:
        return
    turn = host.cache.history[start:]
    if len(turn) > 1 and turn[-1].role is Role.ASSISTANT and not turn[-1].tool_calls:
        return  # finished: the common case, no read
    record = await host.cache.turn_record(start)
    seq = host.cache.first_seq + start
    failed_here = host.runtime.failures.get((host.conversation_id, seq))
    if record.failure is None and failed_here is not None:
        record = attrs.evolve(record, failure=failed_here)
    state = status_of(turn, record)
    if state is StoredState.FINISHED:
        return
    if state is StoredState.WAITING or (
        state is StoredState.INTERRUPTED and host.runtime.settings.resume_interrupted
    ):
        if state is StoredState.INTERRUPTED:
            log.warning(
                "conversation %r: resuming a turn the process stopped in", host.conversation_id
            )
        # The turn learns its key: a decision that names none (another
        # transport) then still runs a waiting one on as that key's turn,
        # and a resumed one is seen running as that key's (``runs_key``).
        key = await _key_at(host, start)
        try:
            await _resume(host, start, record, None, key)
        except TurnError as exc:
            log_failure(host.conversation_id, exc)  # recorded as failed: not resumed again
        return
    await _answer_open_calls(
        host, turn, INTERRUPTED if state is StoredState.INTERRUPTED else UNRECORDED
    )


async def _key_at(host: RecoveryHost, start: int) -> str | None:
    """The idempotency key of the user message at ``start``, from storage:
    one indexed read, for a turn recovered after a restart."""
    store = host.storage.message_store
    seq = host.cache.history[start].seq
    if seq is None:
        return None
    found = await store.list_idempotency_keys(host.conversation_id, before_seq=seq + 1, limit=1)
    return next((key for at, key in found if at == seq), None)


async def _answer_open_calls(host: RecoveryHost, turn: list[Message], answer: str) -> None:
    """Answer the calls a stop left open with ``answer``, without resuming
    the turn: ``UNRECORDED`` for a failed turn (its own answers could not be
    stored), ``INTERRUPTED`` for one the process stopped in."""
    calls = open_calls(turn)
    if not calls:
        return
    log.warning(
        "conversation %r: answering %d tool call(s) left open by %s turn",
        host.conversation_id,
        len(calls),
        "an interrupted" if answer is INTERRUPTED else "a failed",
    )
    # Submit all, then wait: if this is cut short, the accepted writes are
    # remembered and the next load waits for them instead of answering twice.
    for call in calls:
        pending = await host.storage.message_store.submit(
            host.conversation_id, Message(Role.TOOL, answer, tool_call_id=call.id)
        )
        host.cache.inflight.append(pending)
    repaired = [await p.wait() for p in host.cache.inflight]
    host.cache.inflight.clear()
    host.cache.history.extend(repaired)
