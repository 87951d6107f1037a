"""Finding an A2A task: its state rebuilt from stored history and the turn's
record, with what the ledger adds (running now, cancelled here) and the
question a run of this process was told of.

A task is one turn: its id is the idempotency key of the turn's user
message (``_rpc``), so a lookup needs no store of its own, also after a
restart. ``TaskLookup`` holds what it reads (the agent, its message store,
the ledger, the runs of new messages while they run) as attributes.
"""

from __future__ import annotations

import attrs

from agentik._messages import Message
from agentik.agent import ChatAgent, ElicitationRequest
from agentik.server._owners import Caller
from agentik.server.a2a._answers import Decision
from agentik.server.a2a._ledger import TaskKey, TaskLedger
from agentik.server.a2a._list import (
    MAX_TURN_MESSAGES,
    will_resume,
)
from agentik.server.a2a._rpc import context_of, task_not_found, valid_context_id
from agentik.server.a2a._send import SendParams
from agentik.server.a2a._tasks import (
    Run,
    now,
)
from agentik.server.a2a._views import (
    INPUT_REQUIRED,
    TaskView,
    is_finished,
    retried_decisions,
    view_from_turn,
)


class TaskLookup:
    """Reads tasks for the A2A methods (``_methods``) and the list (``_list``)."""

    def __init__(self, agent: ChatAgent, ledger: TaskLedger) -> None:
        self.agent = agent
        self.store = agent.storage.message_store
        self.ledger = ledger
        self.active: dict[TaskKey, Run] = {}
        """The runs of new messages while they run: where a tool's question is told."""

    def runs(self, key: TaskKey) -> bool:
        """Whether a run of this process has the task's turn (see ``_tasks``:
        a run always ends, with its turn, so its entry never outlives it; a
        decision's run counts from its start, before the agent has it), or the
        agent runs it on after a decision made over another transport."""
        return self.ledger.runs(key)

    async def find(self, caller: Caller, task_id: str) -> TaskView:
        context_id = context_of(task_id)
        if context_id is None or not valid_context_id(context_id):
            raise task_not_found()
        stored = caller.internal(context_id)
        key = (stored, task_id)
        running = self.runs(key)
        seq = await self.store.find_idempotency_key(stored, task_id)
        if seq is None:
            if running:  # accepted, its user message not stored yet
                return TaskView(task_id, context_id, "TASK_STATE_SUBMITTED", now())
            raise task_not_found()
        turn = await self.read_turn(stored, seq)
        record = None
        resumes = False
        if is_finished(turn):
            record = await self.store.turn_record(stored, seq)  # a typed answer?
        elif not running:
            record = await self.store.turn_record(stored, seq)  # waiting, cancelled, failed
            resumes = await will_resume(self.store, self.ledger, stored, turn, record)
            # Started while we read (a decision over another transport): what
            # we read may be the turn mid-run, not a turn that stopped.
            running = self.runs(key)
        view = view_from_turn(
            task_id,
            context_id,
            turn,
            running=running,
            cancelled=key in self.ledger.cancelled,
            record=record,
            resumes=resumes,
        )
        if running and (question := await self.asked_now(key)) is not None:
            view = attrs.evolve(view, state=INPUT_REQUIRED, question=question)
        return view

    async def read_turn(self, stored: str, seq: int) -> list[Message]:
        """The turn whose user message is ``seq``: it and what follows, up to
        the next user message (at most ``MAX_TURN_MESSAGES``)."""
        turn: list[Message] = []
        async for message in self.store.get_messages(stored, after_seq=seq - 1):
            if (turn and message.role.value == "user") or len(turn) >= MAX_TURN_MESSAGES:
                break
            turn.append(message)
        return turn

    async def asked_now(self, key: TaskKey) -> ElicitationRequest | None:
        """The question the task's run was told of, if it still waits."""
        run = self.active.get(key)
        if run is None or run.question is None:
            return None
        waiting = await self.agent.pending_elicitations(key[0])
        return run.question if run.question in waiting else None

    async def repeated_decisions(self, caller: Caller, send: SendParams) -> list[Decision] | None:
        """The decisions ``send`` repeats (``retried_decisions``), None if none."""
        stored = caller.internal(send.context_id)
        seq = await self.store.find_idempotency_key(stored, send.task_id)
        if seq is None:
            return None
        turn = await self.read_turn(stored, seq)
        return retried_decisions(send, turn, await self.store.turn_record(stored, seq))
