"""``A2AToolset``: one remote A2A agent as a toolset source with one tool, ``<name>_send``.

The tool sends the model's ``text`` (and optional JSON ``data``) as a message
to the remote agent and waits for the task to end; its result is the
agent's final text, and an agent's failure (FAILED, CANCELED, REJECTED, a
JSON-RPC error, an HTTP refusal) is an error result that says so. It
streams (SendStreamingMessage, SubscribeToTask) where the card says the
agent streams, and otherwise sends with ``returnImmediately`` and polls
GetTask, so the task id is known, and kept (``_calls``), before any wait.

Invariants:
- a call never sends its message twice: its messageId is stored with the
  call before it is sent, and the remote task id as soon as the agent names
  it, before the call waits; a call run again (its turn resumed after a
  crash; the tool is idempotent) follows that task instead of sending, and
  one that crashed before the task was named sends the same messageId again
  (the same task, for a server that keys tasks by it, as agentik does);
- while following a task, an agent that does not answer (restarting,
  overloaded) is asked again with backoff, for as long as the call's own
  timeout allows; nothing else is retried;
- a task waiting for input (INPUT_REQUIRED) asks the person behind the
  conversation (an ``ElicitationRequest``, as an MCP server's question does,
  kept in ``_questions``);
  the call's timeout stands still meanwhile, bounded by
  ``elicitation_timeout``; the answer goes back on the same task;
- the manager task (``run``) only reads the card (at start, then every
  ``CARD_REFRESH`` seconds, with backoff after a failure); calls run in the
  callers' tasks; ``contribution`` is the same object until the card changes.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import final

import attrs
import httpx2
import trio

from agentik._errors import ToolError
from agentik._json import JsonObject, JsonValue
from agentik.a2a_client._calls import CallLedger, CallRecord
from agentik.a2a_client._client import A2AConnection, Refused, Unreachable
from agentik.a2a_client._config import A2AAgentConfig
from agentik.a2a_client._health import A2AHealth, A2AState
from agentik.a2a_client._questions import Questions
from agentik.a2a_client._wire import (
    Asks,
    Card,
    Done,
    Failed,
    Pending,
    Question,
    RpcFault,
    WireError,
    answer_parts,
    data_part,
    derived_id,
    fold,
    outcome,
    parts_text,
    send_params,
    send_result,
    text_part,
    user_message,
)
from agentik.agent import (
    ElicitationAction,
    ElicitationRequest,
    current_tool_call,
)
from agentik.toolsets import NamedTool, ToolsetContribution

logger = logging.getLogger("agentik.a2a")

CARD_REFRESH = 300.0
"""Seconds between two reads of a reachable agent's card (its skills may change)."""
BACKOFF_MAX = 30.0
"""The longest wait between two tries to reach an agent that does not answer."""
POLL_FIRST, POLL_MAX = 0.25, 5.0
"""GetTask polling of an agent that does not stream: the first wait, the longest."""


SEND_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The message to the agent."},
        "data": {
            "type": "object",
            "description": "Optional JSON data sent with the message (a data part).",
        },
    },
    "required": ["text"],
    "additionalProperties": False,
}


@final
class A2AToolset:
    """A remote A2A agent as a ``ToolsetSource`` (and an ``ElicitationSource``).

    Start its manager with ``nursery.start_soon(toolset.run)``, or use
    ``open_a2a_toolsets``, which also waits for the first read of the card.
    """

    def __init__(
        self, config: A2AAgentConfig, *, http: httpx2.AsyncClient, calls: CallLedger
    ) -> None:
        self.config = config
        self._connection = A2AConnection(config, http)
        self._calls = calls
        self._card: Card | None = None
        self._state = A2AState.STARTING
        self._last_error: str | None = None
        self._running = 0
        self._settled = trio.Event()
        self._questions = Questions(config.name, config.elicitation_timeout)
        self._tool = NamedTool(
            f"{config.name}_send",
            f"Sends a message to the remote agent {config.name!r} and waits for its answer"
            " (the result is its final text).",
            SEND_SCHEMA,
            self._send,
            idempotent=True,  # a resumed call follows its stored task; it never sends twice
        )
        self._contribution = self._contribute()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def contribution(self) -> ToolsetContribution:
        return self._contribution

    @property
    def health(self) -> A2AHealth:
        card = self._card
        return A2AHealth(
            name=self.name,
            url=self.config.url,
            state=self._state,
            last_error=self._last_error,
            streaming=card.streaming if card is not None else None,
            skills=len(card.skills) if card is not None else 0,
            calls=self._running,
        )

    async def wait_settled(self) -> None:
        """Return once the first read of the card has an outcome."""
        await self._settled.wait()

    # -- the manager task ------------------------------------------------------

    async def run(self) -> None:
        """Read the card until cancelled: now, every ``CARD_REFRESH`` seconds, and with
        backoff while the agent does not answer."""
        failures = 0
        try:
            while True:
                if await self._read_card():
                    failures = 0
                    delay = CARD_REFRESH
                else:
                    delay = min(BACKOFF_MAX, 2.0**failures)
                    failures += 1
                self._settled.set()
                await trio.sleep(delay)
        finally:
            self._state = A2AState.STOPPED
            self._settled.set()

    async def _read_card(self) -> bool:
        try:
            card = await self._connection.card()
        except (Unreachable, Refused, WireError) as error:
            self._trouble(f"its card at {self.config.card_url}: {error}")
            return False
        if not self.config.streaming:
            card = attrs.evolve(card, streaming=False)
        if card != self._card:
            self._card = card
            self._contribution = self._contribute()
            logger.info(
                "a2a agent %r is ready: %d skills, streaming %s",
                self.name,
                len(card.skills),
                card.streaming,
            )
        self._ready()
        return True

    def _contribute(self) -> ToolsetContribution:
        description = self.config.description
        if description is None:
            description = (
                self._card.catalog_line()
                if self._card is not None
                else f"The remote A2A agent {self.name!r} at {self.config.url}."
            )
        return ToolsetContribution(self.name, description, (self._tool,))

    def _trouble(self, why: str) -> None:
        if self._last_error != why or self._state is not A2AState.UNREACHABLE:
            logger.warning("a2a agent %r: %s", self.name, why)
        self._state, self._last_error = A2AState.UNREACHABLE, why

    def _ready(self) -> None:
        self._state = A2AState.READY

    # -- the tool ----------------------------------------------------------------

    async def _send(self, arguments: JsonObject) -> str:
        text = arguments.get("text")
        if not isinstance(text, str):
            raise ToolError("argument 'text' must be a string")
        data = arguments.get("data")
        running = current_tool_call.get()
        conversation = running.conversation_id if running is not None else None
        key: tuple[str, str, str] | None = None
        if running is not None:
            # The call's id with its message's seq: a model may give an id again
            # in a later turn (``ToolCallContext.call_seq``).
            key = (self.name, running.conversation_id, f"{running.call_seq}:{running.call_id}")
        self._running += 1
        try:
            record = await self._calls.record_of(*key) if key is not None else None
            try:
                result = await self._call(record, text, data, conversation, key)
            except Exception:
                if key is not None:
                    await self._calls.forget(*key)
                raise
            if key is not None:
                await self._calls.forget(*key)
            return result
        finally:
            self._running -= 1

    async def _call(
        self,
        record: CallRecord | None,
        text: str,
        data: JsonValue | None,
        conversation: str | None,
        key: tuple[str, str, str] | None,
    ) -> str:
        """Follow the task a resumed call (``record``) already started, or send the
        call's message (its messageId kept first) and follow what it starts."""
        if record is not None and record.task_id is not None:
            logger.info(
                "a2a agent %r: following task %r of a resumed call", self.name, record.task_id
            )
            card = await self._card_for_call(wait=True)
            return await self._follow(card, await self._get(card, record.task_id))
        card = await self._card_for_call(wait=record is not None)
        message_id = record.message_id if record is not None else f"agentik-{uuid.uuid4().hex}"
        parts = [text_part(text)] + ([data_part(data)] if data is not None else [])
        message = user_message(
            parts,
            message_id=message_id,
            context_id=derived_id("agentik", self.name, conversation)
            if conversation is not None
            else None,
        )
        if key is not None and record is None:
            await self._calls.keep(*key, message_id=message_id)
        task, answer = await self._start(card, message, key)
        result = answer if task is None else await self._follow(card, task)
        assert result is not None
        return result

    async def _card_for_call(self, *, wait: bool = False) -> Card:
        """The card, read now if it is not known yet; ``wait``: a resumed call with
        work under way at the agent reads it with backoff until it answers (bounded
        by the call's timeout) rather than giving up."""
        delay = POLL_FIRST
        while self._card is None:
            if await self._read_card() or not wait:
                break
            await trio.sleep(delay)
            delay = min(BACKOFF_MAX, delay * 2)
        if self._card is None:
            raise ToolError(
                f"a2a agent {self.name!r} is unreachable ({self._last_error}); try again later"
            )
        return self._card

    async def _start(
        self, card: Card, message: JsonObject, key: tuple[str, str, str] | None
    ) -> tuple[JsonObject | None, str | None]:
        """Send the call's message; (the task, None), or (None, the answer) when the
        agent answered with a message. The task id is kept as soon as it is seen; a
        connection lost after that returns the task as last seen, to be followed."""
        task: JsonObject | None = None
        try:
            if card.streaming:
                async with self._connection.stream(
                    card.url, "SendStreamingMessage", send_params(message, return_immediately=False)
                ) as events:
                    async for event in events:
                        seen, reply = fold(task, event)
                        if reply is not None:
                            return None, _message_text(self.name, reply)
                        if task is None and seen is not None:
                            await self._keep(key, message, seen)
                        task = seen
                if task is None:
                    raise WireError("the stream ended before it named a task")
                self._ready()
                return task, None
            result = await self._connection.call(
                card.url, "SendMessage", send_params(message, return_immediately=True)
            )
            kind, value = send_result(result)
            self._ready()
            if kind == "message":
                return None, _message_text(self.name, value)
            await self._keep(key, message, value)
            return value, None
        except Unreachable as error:
            self._trouble(str(error))
            if task is not None:
                return task, None  # known and kept: followed, not sent again
            raise ToolError(f"a2a agent {self.name!r} is unreachable: {error}") from error
        except (Refused, RpcFault, WireError) as error:
            raise ToolError(f"a2a agent {self.name!r} refused the message: {error}") from error

    async def _keep(
        self, key: tuple[str, str, str] | None, message: JsonObject, task: JsonObject
    ) -> None:
        if key is not None:
            message_id = str(message["messageId"])
            await self._calls.keep(*key, message_id=message_id, task_id=str(task["id"]))

    async def _follow(self, card: Card, task: JsonObject) -> str:
        """Follow ``task`` to its end, asking the person when it needs input."""
        while True:
            found = outcome(self.name, task)
            if isinstance(found, Done):
                return found.text
            if isinstance(found, Failed):
                raise ToolError(found.message)
            if isinstance(found, Asks):
                task = await self._answer(card, task, found.question)
                continue
            assert isinstance(found, Pending)
            task = await self._next(card, str(task["id"]))

    async def _next(self, card: Card, task_id: str) -> JsonObject:
        """The task once it changed (streaming) or a moment later (polling); an agent
        that does not answer is asked again with backoff."""
        wait = POLL_FIRST
        while True:
            try:
                if card.streaming:
                    task = await self._subscribe(card, task_id)
                    if isinstance(outcome(self.name, task), Pending):
                        await trio.sleep(wait)  # its stream ended early: do not spin on it
                    return task
                await trio.sleep(wait)
                return await self._get_once(card, task_id)
            except Unreachable as error:
                self._trouble(f"following task {task_id!r}: {error}")
                await trio.sleep(wait)
                wait = min(BACKOFF_MAX, wait * 2)
            wait = min(POLL_MAX, wait * 2)

    async def _subscribe(self, card: Card, task_id: str) -> JsonObject:
        task: JsonObject | None = None
        try:
            async with self._connection.stream(
                card.url, "SubscribeToTask", {"id": task_id}
            ) as events:
                async for event in events:
                    task, _ = fold(task, event)
        except RpcFault as fault:
            if fault.code != -32004:  # not "a finished task has no updates": a real error
                raise ToolError(
                    f"a2a agent {self.name!r} cannot follow task {task_id!r}: {fault}"
                ) from fault
        except (Refused, WireError) as error:
            raise ToolError(
                f"a2a agent {self.name!r} cannot follow task {task_id!r}: {error}"
            ) from error
        self._ready()
        if task is None or isinstance(outcome(self.name, task), Pending):
            return await self._get_once(card, task_id)  # the stream ended early: read it
        return task

    async def _get(self, card: Card, task_id: str) -> JsonObject:
        """GetTask, asked again with backoff while the agent does not answer."""
        wait = POLL_FIRST
        while True:
            try:
                return await self._get_once(card, task_id)
            except Unreachable as error:
                self._trouble(f"reading task {task_id!r}: {error}")
                await trio.sleep(wait)
                wait = min(BACKOFF_MAX, wait * 2)

    async def _get_once(self, card: Card, task_id: str) -> JsonObject:
        try:
            result = await self._connection.call(card.url, "GetTask", {"id": task_id})
        except (Refused, RpcFault, WireError) as error:
            raise ToolError(
                f"a2a agent {self.name!r} cannot read task {task_id!r}: {error}"
            ) from error
        self._ready()
        task = result
        if not isinstance(task.get("id"), str):
            raise ToolError(f"a2a agent {self.name!r} answered GetTask without a task")
        return task

    # -- input required ----------------------------------------------------------

    async def _answer(self, card: Card, task: JsonObject, question: Question) -> JsonObject:
        """Ask the person; send the answer on the task; the task as the agent answers."""
        task_id = str(task["id"])
        action, content = await self._questions.ask(question, task_id)
        parts = answer_parts(question, action, content)
        if parts is None:
            with contextlib.suppress(Unreachable, Refused, RpcFault, WireError):
                await self._connection.call(card.url, "CancelTask", {"id": task_id})
            raise ToolError(
                f"a2a agent {self.name!r} asked for input and the person {action}d;"
                f" its task {task_id!r} was cancelled"
            )
        context = task.get("contextId")
        message = user_message(
            parts,
            message_id=f"agentik-{uuid.uuid4().hex}",
            context_id=context if isinstance(context, str) else None,
            task_id=task_id,
        )
        try:
            if card.streaming:
                latest: JsonObject | None = None
                async with self._connection.stream(
                    card.url, "SendStreamingMessage", send_params(message, return_immediately=False)
                ) as events:
                    async for event in events:
                        latest, _ = fold(latest, event)
                if latest is not None and latest.get("id") == task_id and "status" in latest:
                    return latest
                return await self._get(card, task_id)
            await self._connection.call(
                card.url, "SendMessage", send_params(message, return_immediately=True)
            )
        except Unreachable as error:
            self._trouble(f"answering task {task_id!r}: {error}")
        except (Refused, RpcFault, WireError) as error:
            raise ToolError(f"a2a agent {self.name!r} refused the answer: {error}") from error
        return await self._get(card, task_id)

    def pending_elicitations(self, conversation_id: str) -> tuple[ElicitationRequest, ...]:
        """The questions this agent's running tasks ask in the conversation."""
        return self._questions.open.pending(conversation_id)

    def answer_elicitation(
        self,
        conversation_id: str,
        elicitation_id: str,
        *,
        action: ElicitationAction,
        content: JsonObject | None,
    ) -> bool:
        """Answer one of this agent's questions (True), or False if it is not one of them."""
        return self._questions.open.answer(
            conversation_id, elicitation_id, action=action, content=content
        )


def _message_text(agent: str, message: JsonObject) -> str:
    return parts_text(message.get("parts")) or f"a2a agent {agent!r} answered with no text"
