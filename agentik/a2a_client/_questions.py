"""The questions a remote agent's tasks ask (INPUT_REQUIRED), put to the person
behind each call and waiting for the answer.

A question is an ``ElicitationRequest`` in the conversation whose call it is,
as an MCP server's question is; while it waits, the call's timeout stands
still, bounded by ``elicitation_timeout``. Only the call's own task waits;
an answer comes from another (``answer``), and the first answer stands.
"""

from __future__ import annotations

import logging
import uuid
from typing import final

import trio

from agentik._errors import ToolError
from agentik._json import JsonObject
from agentik.a2a_client._wire import Question
from agentik.agent import ElicitationAction, ElicitationRequest, OpenQuestions, current_tool_call

logger = logging.getLogger("agentik.a2a")


@final
class Questions:
    """One remote agent's questions now waiting for a person, by id."""

    def __init__(self, source: str, timeout: float) -> None:
        self._source = source
        """The remote agent's name: the questions' ``source``."""
        self._timeout = timeout
        self.open = OpenQuestions()
        """The questions waiting now (``pending_elicitations``, ``answer_elicitation``)."""

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
        timeout = self._timeout
        with trio.move_on_after(timeout), self.open.waiting(request, [running.scope]) as asked:
            if running.announce is not None:  # the turn streams: tell its client
                await running.announce(request)
            await asked.answered.wait()
        if asked.action is None:
            raise ToolError(
                f"a2a agent {self._source!r} asked for input and no answer came within"
                f" {timeout:g}s; its task {task_id!r} still waits"
            )
        return asked.action, asked.content
