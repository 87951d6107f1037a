"""Questions a tool asks a person mid-call (MCP elicitation), as the agent sees them.

A tool that needs input while it runs (an MCP server's ``elicitation/create``)
holds its call open; the conversation's turn waits in that call, so nothing
else in the conversation runs until a person answers, and other
conversations go on. ``ChatAgent.pending_elicitations`` lists what waits;
``ChatAgent.answer_elicitation`` answers (accept with content, decline,
cancel). The source of the question (``ElicitationSource``: an MCP toolset,
a remote A2A agent) owns the wait and its timeout (which declines); it keeps
its open questions in an ``OpenQuestions``, which checks the answers.

``current_tool_call`` is how a tool learns which conversation runs it (and
which call it is): the turn sets it around each tool call, with the call's
timeout scope, which the
source extends by the time a person took (a person's pause is not the
tool's slowness).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Literal, Protocol, final, runtime_checkable

import attrs
import jsonschema
import jsonschema.exceptions
import trio

from agentik._errors import AgentikError
from agentik._json import JsonObject, JsonValue

ElicitationAction = Literal["accept", "decline", "cancel"]


@final
@attrs.frozen(kw_only=True)
class ToolCallContext:
    """The tool call running in this task: whose it is and its timeout scope."""

    conversation_id: str
    scope: trio.CancelScope
    announce: Callable[[ElicitationRequest], Awaitable[None]] | None = None
    """Tells the turn's stream (if it streams) that a question waits, so a
    transport can put it to the person (``ElicitationAsked``)."""
    call_id: str = ""
    """The id the model gave the call."""
    call_seq: int = 0
    """The seq of the assistant message that made the call: with ``call_id``
    it names the call uniquely in its conversation (a model may give the
    same id again in a later turn), and it is the same when a resumed turn
    runs the call again (``agent_tool`` derives its child conversation from
    both)."""


current_tool_call: contextvars.ContextVar[ToolCallContext | None] = contextvars.ContextVar(
    "agentik_tool_call", default=None
)


@final
@attrs.frozen(kw_only=True)
class ElicitationRequest:
    """A question a running tool asks the person behind a conversation.

    Form mode asks for fields (``schema``). URL mode (``url`` set, ``schema``
    empty) asks the person to open a URL, for instance to authorize agentik
    at an MCP server that needs a wider OAuth scope mid-call; the question
    ends when what the URL leads to completes (or the person declines).
    """

    conversation_id: str
    id: str
    """Unique while it waits; answer with it."""
    source: str
    """Who asks: the toolset name of the MCP server (or of the remote A2A agent
    whose task needs input)."""
    message: str
    schema: JsonObject
    """A flat JSON Schema object of the fields asked for; ``default`` values are
    filled in for fields an accepting answer leaves out. Empty in URL mode."""
    url: str | None = None
    """URL mode: the page the person opens. Accepting says "I opened it" and
    changes nothing else; declining or cancelling ends the wait."""


@final
class ElicitationError(AgentikError):
    """An answer the agent cannot take.

    ``code``: ``not_waiting`` (no such question waits in the conversation),
    ``invalid`` (the content does not match the question's schema, or the
    action is unknown); nothing changes.
    """

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


@runtime_checkable
class ElicitationSource(Protocol):
    """A toolset source whose tools may ask a person mid-call."""

    def pending_elicitations(self, conversation_id: str) -> tuple[ElicitationRequest, ...]: ...

    def answer_elicitation(
        self,
        conversation_id: str,
        elicitation_id: str,
        *,
        action: ElicitationAction,
        content: JsonObject | None,
    ) -> bool:
        """Answer the question if it is this source's (True); raises
        ``ElicitationError`` (``invalid``) for an answer that does not fit."""
        ...


# A form question's answer, as MCP's SEP-1034 has it and a remote A2A agent's
# question reuses: a field the person leaves out takes the schema's
# ``default`` ("accept" with no content accepts the defaults), and the
# filled-in answer must match the schema, refused before anything is sent.
def form_answer(schema: JsonObject, content: JsonObject | None) -> JsonObject:
    """``content`` with the schema's defaults for the fields it leaves out, validated.

    Raises:
        ElicitationError: ``invalid``, naming the field and what it must be.
    """
    answer: dict[str, JsonValue] = dict(content or {})
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, field in properties.items():
            if name not in answer and isinstance(field, dict) and "default" in field:
                answer[name] = field["default"]
    try:
        jsonschema.Draft202012Validator(schema).validate(answer)
    except jsonschema.exceptions.ValidationError as error:
        where = ".".join(str(p) for p in error.absolute_path) or "the answer"
        raise ElicitationError(f"{where}: {error.message}", code="invalid") from None
    except jsonschema.exceptions.SchemaError as error:
        raise ElicitationError(
            f"the question's schema is invalid: {error.message}", code="invalid"
        ) from None
    return answer


@attrs.define(eq=False)
class AskedQuestion:
    """A question waiting for its person: the answer, once ``answered`` is set
    (``action`` None: no answer came)."""

    request: ElicitationRequest
    answered: trio.Event = attrs.Factory(trio.Event)
    action: ElicitationAction | None = None
    content: JsonObject | None = None
    """A form question's accepted answer, its defaults filled in and checked
    (``form_answer``); None otherwise."""


@final
class OpenQuestions:
    """The questions one source's running calls put to people now, by id (an MCP
    server's, a remote A2A agent's). Only a call's own task waits on one
    (``waiting``); an answer comes from another task (``answer``), and the first
    answer stands."""

    def __init__(self) -> None:
        self._asked: dict[str, AskedQuestion] = {}

    @contextlib.contextmanager
    def waiting(
        self, request: ElicitationRequest, scopes: Sequence[trio.CancelScope]
    ) -> Iterator[AskedQuestion]:
        """While the block runs the question is open and the calls' timeouts
        (``scopes``) stand still: a person's pause is not the tool's slowness
        (the question's own timeout bounds the pause)."""
        asked = AskedQuestion(request)
        self._asked[request.id] = asked
        now = trio.current_time()
        paused = [(scope, scope.deadline - now) for scope in scopes]
        for scope, _ in paused:
            scope.deadline = math.inf
        try:
            yield asked
        finally:
            del self._asked[request.id]
            now = trio.current_time()
            for scope, left in paused:
                scope.deadline = now + left

    def pending(self, conversation_id: str) -> tuple[ElicitationRequest, ...]:
        """The open questions in the conversation."""
        return tuple(
            a.request for a in self._asked.values() if a.request.conversation_id == conversation_id
        )

    def answer(
        self,
        conversation_id: str,
        elicitation_id: str,
        *,
        action: ElicitationAction,
        content: JsonObject | None,
    ) -> bool:
        """Answer one of the open questions (True), or False if it is not one of
        them. A form question's accepted content gets its defaults and is checked
        (``form_answer``); a URL question takes no content.

        Raises:
            ElicitationError: ``invalid``: an unknown action, or content that does
                not match the question's schema; nothing changes.
        """
        asked = self._asked.get(elicitation_id)
        if asked is None or asked.request.conversation_id != conversation_id:
            return False
        if asked.answered.is_set():
            return True  # answered twice: the first answer stands
        if action == "accept":
            if asked.request.url is None:
                asked.content = form_answer(asked.request.schema, content)
        elif action not in ("decline", "cancel"):
            raise ElicitationError(
                f"action must be 'accept', 'decline' or 'cancel', got {action!r}", code="invalid"
            )
        asked.action = action
        asked.answered.set()
        return True
