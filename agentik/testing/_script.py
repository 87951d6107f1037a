"""``Script``: a scripted model that reads like the conversation it plays.

    script = Script()
    script.when_user_says("weather in Paris?").call("weather_today", {"city": "Paris"}).answer(
        "Sunny."
    )
    async with open_chat_agent(model=script.model(), storage=in_memory_storage()) as agent:
        ...

A turn's model requests are told apart by the turn's user text (the last user
message of the request) and the step (how many assistant messages the turn
already has), so the same script serves any number of conversations, in any
order, concurrently: it holds no cursor. A summary or reflection request
(``ModelRequest.purpose``) is matched by its purpose alone.

Anything unscripted (a user text no rule names, a step past a rule's last, a
purpose never scripted) is an *unexpected request*: the model raises
``UnexpectedModelRequest`` (the turn fails) and the script keeps it, so
``verify()`` (and the ``agentik_script`` fixture, at teardown) fails the test
even when the agent turned the failure into an error value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import final

import attrs

from agentik._errors import AgentikError
from agentik._json import JsonObject
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.models import ModelRequest, ModelResponse, ScriptedModel


@final
class UnexpectedModelRequest(AgentikError, AssertionError):
    """The model got a request its ``Script`` does not cover. An ``AssertionError``
    too: it fails the test that made the request."""


@final
@attrs.define(eq=False)
class ScriptedTurn:
    """The model's steps for one user text, built with ``call`` and ``answer``."""

    description: str
    """How ``Script.verify`` names it: ``user says 'X'`` or ``a summary request``."""
    steps: list[ModelResponse | tuple[tuple[str, str, str | None], ...]] = attrs.Factory(list)
    """Each step: the answer, or the calls (tool, JSON arguments, id or None)."""
    uses: int = 0
    """How many requests it answered."""
    finished: bool = False

    def call(
        self, tool: str, arguments: Mapping[str, object] | None = None, *, id: str | None = None
    ) -> ScriptedTurn:
        """Next, the model calls ``tool`` with ``arguments`` (a JSON object; ``{}``
        when None). Without ``id`` the call gets ``call_<n>``, n counting every
        call the script has made, so ids never repeat in a conversation."""
        return self.calls((tool, arguments, id))

    def calls(self, *calls: tuple[str, Mapping[str, object] | None, str | None]) -> ScriptedTurn:
        """Next, the model calls several tools at once: ``(tool, arguments, id)``
        triples (id None: ``call_<n>`` as for ``call``)."""
        self._check_open()
        if not calls:
            raise ValueError("calls() needs at least one (tool, arguments, id)")
        self.steps.append(
            tuple(
                (tool, json.dumps(dict(arguments) if arguments is not None else {}), call_id)
                for tool, arguments, call_id in calls
            )
        )
        return self

    def answer(self, text: str, *, usage: TokenUsage | None = None) -> None:
        """Last, the model answers ``text``; the turn's script ends here."""
        self._check_open()
        self.steps.append(ModelResponse(text=text, usage=usage))
        self.finished = True

    def _check_open(self) -> None:
        if self.finished:
            raise ValueError(f"the script for {self.description} already ends with an answer")


@final
class Script:
    """Rules of a scripted model, and the requests it saw."""

    def __init__(self) -> None:
        self._turns: dict[str, ScriptedTurn] = {}
        self._purposes: dict[str, ScriptedTurn] = {}
        self.requests: list[ModelRequest] = []
        """Every request the model got, in order."""
        self.unexpected: list[str] = []
        """What was wrong with each unexpected request, in order."""
        self._calls = 0

    def when_user_says(self, text: str) -> ScriptedTurn:
        """The steps of a turn whose user message is ``text`` (every such turn)."""
        if text in self._turns:
            raise ValueError(f"the user text {text!r} is scripted already")
        turn = self._turns[text] = ScriptedTurn(f"user says {text!r}")
        return turn

    def when_asked_for(self, purpose: str) -> ScriptedTurn:
        """The answer to ``summary`` or ``reflection`` requests (``answer`` only)."""
        if purpose not in ("summary", "reflection"):
            raise ValueError(f"purpose must be 'summary' or 'reflection', got {purpose!r}")
        if purpose in self._purposes:
            raise ValueError(f"{purpose} requests are scripted already")
        turn = self._purposes[purpose] = ScriptedTurn(f"a {purpose} request")
        return turn

    def model(self, *, latency: float = 0.0) -> ScriptedModel:
        """A ``ScriptedModel`` playing this script (``latency``: seconds of
        ``trio.sleep`` before each answer, for tests on a MockClock)."""
        return ScriptedModel(self.respond, latency=latency)

    def respond(self, request: ModelRequest) -> ModelResponse:
        """Answer one request from the script, or raise ``UnexpectedModelRequest``."""
        self.requests.append(request)
        if request.purpose != "turn":
            turn = self._purposes.get(request.purpose)
            return self._step(turn, 0, f"a {request.purpose} request")
        user_at = _last_user(request.messages)
        if user_at is None:
            return self._step(None, 0, "a request without a user message")
        text = request.messages[user_at].content
        step = sum(m.role is Role.ASSISTANT for m in request.messages[user_at:])
        return self._step(self._turns.get(text), step, f"the user saying {text!r}")

    def _step(self, turn: ScriptedTurn | None, step: int, what: str) -> ModelResponse:
        if turn is None:
            problem = f"unexpected model request: nothing is scripted for {what}"
        elif step >= len(turn.steps):
            problem = (
                f"unexpected model request: step {step + 1} for {what}, but the script"
                f" has {len(turn.steps)}"
            )
        else:
            turn.uses += 1
            return self._response(turn.steps[step])
        self.unexpected.append(problem)
        raise UnexpectedModelRequest(problem)

    def _response(
        self, step: ModelResponse | tuple[tuple[str, str, str | None], ...]
    ) -> ModelResponse:
        if isinstance(step, ModelResponse):
            return step
        calls = []
        for tool, arguments, call_id in step:
            if call_id is None:
                self._calls += 1
                call_id = f"call_{self._calls}"
            calls.append(ToolCall(call_id, tool, arguments))
        return ModelResponse(tool_calls=tuple(calls))

    def verify(self, *, all_used: bool = False) -> None:
        """Raise ``AssertionError`` naming every unexpected request; with
        ``all_used``, also every scripted turn the model never played."""
        problems = list(self.unexpected)
        if all_used:
            problems += [
                f"never used: the script for {turn.description}"
                for turn in (*self._turns.values(), *self._purposes.values())
                if turn.uses == 0
            ]
        if problems:
            raise AssertionError("; ".join(problems))


def _last_user(messages: Sequence[Message]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role is Role.USER:
            return index
    return None


def arguments_of(call: ToolCall) -> JsonObject | None:
    """A call's arguments parsed, or None when they are not a JSON object."""
    try:
        parsed = json.loads(call.arguments)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
