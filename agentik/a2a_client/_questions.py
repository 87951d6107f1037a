"""The questions a remote agent's tasks ask (INPUT_REQUIRED), put to the person
behind each call and waiting for the answer.

A question is an ``ElicitationRequest`` in the conversation whose call it is,
as an MCP server's question is; while it waits, the call's timeout stands
still, bounded by ``elicitation_timeout``. Only the call's own task waits;
an answer comes from another (``answer``), and the first answer stands.
"""

from __future__ import annotations

import contextlib
import logging
import math
import uuid
from collections.abc import Iterator
from typing import final

import attrs
import trio

from agentik._errors import ToolError
from agentik._json import JsonObject
from agentik.a2a_client._wire import Question
from agentik.agent import (
    ElicitationAction,
    ElicitationError,
    ElicitationRequest,
    current_tool_call,
    form_answer,
)

logger = logging.getLogger("agentik.a2a")


@attrs.define(eq=False)
class _Asked:
    request: ElicitationRequest
    question: Question
    answered: trio.Event = attrs.field(factory=trio.Event)
    action: ElicitationAction | None = None
    content: JsonObject | None = None


@final
class Questions:
    """One remote agent's questions now waiting for a person, by id."""

    def __init__(self, source: str, timeout: float) -> None:
        self._source = source
        """The remote agent's name: the questions' ``source``."""
        self._timeout = timeout
        self._questions: dict[str, _Asked] = {}

    async def ask(
        self, question: Question, task_id: str
    ) -> tuple[ElicitationAction, JsonObject | None]:
        """Ask the person behind the running call ``question`` for ``task_id`` and
        wait (bounded) for the answer; the call's timeout stands still meanwhile."""
        running = current_tool_call.get()
        if running is None:
            raise ToolError(
                f"a2a agent {self._source!r} needs input ({question.message}),"
                " and no person is behind this call"
            )
        request = ElicitationRequest(
            conversation_id=running.conversation_id,
            id=uuid.uuid4().hex,
            source=self._source,
            message=question.message,
            schema=question.schema,
        )
        logger.info(
            "a2a agent %r asks conversation %r (task %r)",
            self._source,
            running.conversation_id,
            task_id,
        )
        asked = _Asked(request, question)
        timeout = self._timeout
        with trio.move_on_after(timeout), self._waiting(asked, running.scope):
            if running.announce is not None:  # the turn streams: tell its client
                await running.announce(request)
            await asked.answered.wait()
        if asked.action is None:
            raise ToolError(
                f"a2a agent {self._source!r} asked for input and no answer came within"
                f" {timeout:g}s; its task {task_id!r} still waits"
            )
        return asked.action, asked.content

    @contextlib.contextmanager
    def _waiting(self, asked: _Asked, scope: trio.CancelScope) -> Iterator[None]:
        """While the block runs the question is pending and the call's timeout stands
        still: a person's pause is not the agent's slowness."""
        self._questions[asked.request.id] = asked
        left = scope.deadline - trio.current_time()
        scope.deadline = math.inf
        try:
            yield
        finally:
            del self._questions[asked.request.id]
            scope.deadline = trio.current_time() + left

    def pending(self, conversation_id: str) -> tuple[ElicitationRequest, ...]:
        """The questions this agent's running tasks ask in the conversation."""
        return tuple(
            q.request
            for q in self._questions.values()
            if q.request.conversation_id == conversation_id
        )

    def answer(
        self,
        conversation_id: str,
        elicitation_id: str,
        *,
        action: ElicitationAction,
        content: JsonObject | None,
    ) -> bool:
        """Answer one of this agent's questions (True), or False if it is not one of them."""
        asked = self._questions.get(elicitation_id)
        if asked is None or asked.request.conversation_id != conversation_id:
            return False
        if asked.answered.is_set():
            return True  # answered twice: the first answer stands
        if action == "accept":
            asked.content = form_answer(asked.request.schema, content)
        elif action not in ("decline", "cancel"):
            raise ElicitationError(
                f"action must be 'accept', 'decline' or 'cancel', got {action!r}", code="invalid"
            )
        asked.action = action
        asked.answered.set()
        return True
