"""No exception from a model, tool, prompt contributor, toolset source or the
reflection step ends the agent or another conversation (issue 14, defect 5).

Such an exception fails that turn with a ``TurnError`` that has a code and
names what failed (a tool's failure is an error result the model sees, and
the turn goes on; a reflection's failure fails the reflection step alone,
after the turn finished); it is logged exactly once; history stays valid;
and another conversation's turn running at the same time finishes as if
nothing happened.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import datetime

import attrs
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import (
    AgentikError,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Reflection,
    Role,
    ToolCall,
    ToolsetContribution,
    TurnError,
)
from agentik._json import JsonObject
from agentik.agent import ChatAgent, PromptContext, TurnFailed, TurnFinished, open_chat_agent
from agentik.agent._optional_work import REFLECT
from agentik.models import ModelStreamEvent, ScriptedModel, TextDelta
from agentik.storage import ReflectionStore, in_memory_storage
from tests.agent.helpers import assert_valid_history, stored


def last_user_text(request: ModelRequest) -> str:
    """The user text of the turn the request is about (for a reflection, the
    turn just finished)."""
    texts = [m.content for m in request.messages if m.role is Role.USER and m.content != REFLECT]
    return texts[-1]


def agentik_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name.startswith("agentik") and r.levelno >= logging.WARNING
    ]


async def test_a_crashing_reflection_fails_only_the_reflection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A model that raises RuntimeError while reflecting on one conversation's
    turn: that turn has already finished and keeps its answer, the other
    conversation's turn running meanwhile finishes, both go on, and the
    failure is logged once."""
    caplog.set_level(logging.WARNING, logger="agentik")
    good_waits = trio.Event()
    release_good = trio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        about = last_user_text(request)
        if request.messages[-1].content == REFLECT:
            if about == "boom":
                raise RuntimeError("reflection exploded")
            return ModelResponse(text=f"lesson about {about}")
        if about == "hold":
            good_waits.set()
            await release_good.wait()
        return ModelResponse(text=f"answer to {about}")

    storage = in_memory_storage()
    async with (
        open_chat_agent(model=ScriptedModel(respond), storage=storage, reflection=True) as agent,
        trio.open_nursery() as nursery,
    ):
        answers: list[str] = []

        async def good() -> None:
            answers.append((await agent.send("good", "hold")).text)

        nursery.start_soon(good)
        await good_waits.wait()
        assert (await agent.send("bad", "boom")).text == "answer to boom"
        # The next turn queues behind the reflection: when it is answered, the
        # reflection has run (and failed).
        assert (await agent.send("bad", "again")).text == "answer to again"
        release_good.set()
    assert answers == ["answer to hold"]
    lessons = sorted(r.text for r in await storage.reflection_store.list_recent(10))
    assert lessons == ["lesson about again", "lesson about hold"]
    for cid in ("good", "bad"):
        assert_valid_history(await stored(storage, cid))
    [record] = agentik_records(caplog)
    assert "reflection exploded" in record.getMessage()
    assert "RuntimeError" in record.getMessage()


# --- the class: any component, any exception ---------------------------------

MARKER = "fault-marker"


class CustomError(Exception):
    pass


class PluginError(AgentikError):
    """An agentik error raised by code that is not agentik's."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be printed")


leaf_exceptions = st.sampled_from(
    [RuntimeError, ValueError, KeyError, AttributeError, CustomError, Unprintable, PluginError]
).map(lambda cls: cls(MARKER))
exceptions = leaf_exceptions | st.lists(leaf_exceptions, min_size=1, max_size=3).map(
    lambda members: ExceptionGroup(MARKER, members)
)
COMPONENTS = [
    "model",
    "model_stream",
    "tool",
    "contributor",
    "source",
    "reflection",
    "reflection_store",
]
TURN_COMPONENTS = {"model", "model_stream", "contributor", "source"}
"""Components whose failure fails the turn (a tool's is a result, a
reflection's fails the step after the turn)."""


@attrs.define
class Fault:
    """The one failure of an example: ``component`` raises ``error`` the first
    time it is reached while the condition of its hook holds."""

    component: str
    error: Exception
    armed: bool = False
    """Set while the failing conversation's turn runs (for hooks that cannot
    tell conversations apart)."""
    fired: int = 0

    def fire(self, component: str) -> None:
        if component == self.component and not self.fired:
            self.fired += 1
            raise self.error


@attrs.define
class FaultyModel:
    """Answers ``answer to <text>``; for "boom" it calls the tool first. Holds
    the other conversation's turn ("hold") until released."""

    fault: Fault
    holding: trio.Event = attrs.Factory(trio.Event)
    release: trio.Event = attrs.Factory(trio.Event)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        about = last_user_text(request)
        if request.messages[-1].content == REFLECT:
            if about == "boom":
                self.fault.fire("reflection")
            return ModelResponse(text=f"lesson about {about}")
        if about == "hold" and not self.holding.is_set():
            self.holding.set()
            await self.release.wait()
        if about == "boom":
            self.fault.fire("model")
            if request.messages[-1].role is Role.USER:
                return ModelResponse(tool_calls=(ToolCall("call-1", "fragile", "{}"),))
        return ModelResponse(text=f"answer to {about}")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        if last_user_text(request) == "boom":
            yield TextDelta("partial ")
            self.fault.fire("model_stream")
        response = await self.complete(request)
        if response.text:
            yield TextDelta(response.text)
        yield response


@attrs.define
class FaultyContributor:
    fault: Fault

    def render(self, context: PromptContext) -> str | None:
        if context.conversation_id == "bad":
            self.fault.fire("contributor")
        return "You are a test."


@attrs.define
class FaultySource:
    """A toolset source (as an MCP server is one) whose tools may change."""

    fault: Fault
    current: ToolsetContribution = ToolsetContribution(
        "extras",
        "Extra tools.",
        (NamedTool("extras_ping", "Ping.", {"type": "object"}, lambda arguments: _pong()),),
    )

    @property
    def contribution(self) -> ToolsetContribution:
        if self.fault.armed:
            self.fault.fire("source")
        return self.current


async def _pong() -> str:
    return "pong"


@attrs.define
class FaultyReflections:
    """The real reflection store, failing to insert the lesson about "boom"."""

    inner: ReflectionStore
    fault: Fault

    async def insert(self, conversation_id: str, text: str) -> Reflection:
        if "boom" in text:
            self.fault.fire("reflection_store")
        return await self.inner.insert(conversation_id, text)

    async def list_recent(self, limit: int) -> list[Reflection]:
        return await self.inner.list_recent(limit)

    async def count(self) -> int:
        return await self.inner.count()

    async def list_for_conversation(self, conversation_id: str) -> list[Reflection]:
        return await self.inner.list_for_conversation(conversation_id)

    async def delete_older_than(self, cutoff: datetime) -> int:
        return await self.inner.delete_older_than(cutoff)


@attrs.frozen
class Outcome:
    text: str | None = None
    """The answer, when the turn finished."""
    code: str | None = None
    message: str | None = None
    """The failure, when it did not."""


async def run_bad_turn(agent: ChatAgent, via_stream: bool) -> Outcome:
    """The failing conversation's turn, by ``send`` or ``stream``; a failure is
    a ``TurnError`` (send) or a last ``TurnFailed`` event (stream)."""
    if not via_stream:
        try:
            return Outcome(text=(await agent.send("bad", "boom")).text)
        except TurnError as error:
            return Outcome(code=error.code, message=str(error))
    async with agent.stream("bad", "boom") as events:
        seen = [event async for event in events]
    last = seen[-1]
    if isinstance(last, TurnFinished):
        return Outcome(text=last.result.text)
    assert isinstance(last, TurnFailed), seen
    return Outcome(code=last.code, message=last.message)


async def fault_scenario(fault: Fault, via_stream: bool) -> tuple[Outcome, InMemoryReport]:
    model = FaultyModel(fault)
    base = in_memory_storage()
    storage = attrs.evolve(base, reflection_store=FaultyReflections(base.reflection_store, fault))

    async def fragile(arguments: JsonObject) -> str:
        fault.fire("tool")
        return "fine"

    good: list[str] = []
    with trio.fail_after(60):
        async with (
            open_chat_agent(
                model=model,
                storage=storage,
                tools=[NamedTool("fragile", "May fail.", {"type": "object"}, fragile)],
                toolsets=[FaultySource(fault)],
                contributors=[FaultyContributor(fault)],
                reflection=True,
            ) as agent,
            trio.open_nursery() as nursery,
        ):

            async def other_conversation() -> None:
                good.append((await agent.send("good", "hold")).text)

            nursery.start_soon(other_conversation)
            await model.holding.wait()  # its turn is under way while "bad" fails
            fault.armed = True
            bad = await run_bad_turn(agent, via_stream)
            fault.armed = False
            # The failing conversation goes on (and its reflection, if any, has run).
            again = (await agent.send("bad", "again")).text
            model.release.set()
        report = InMemoryReport(
            good=good,
            again=again,
            histories={cid: await stored(base, cid) for cid in ("good", "bad")},
            lessons=sorted(r.text for r in await base.reflection_store.list_recent(10)),
            reflections_failed=agent.stats.reflections_failed,
        )
    return bad, report


@attrs.frozen
class InMemoryReport:
    good: list[str]
    again: str
    histories: dict[str, list[Message]]
    lessons: list[str]
    reflections_failed: int


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(component=st.sampled_from(COMPONENTS), error=exceptions, via_stream=st.booleans())
def test_no_component_failure_ends_the_agent(
    caplog: pytest.LogCaptureFixture, component: str, error: Exception, via_stream: bool
) -> None:
    """Any component raising any exception: that turn (or step) fails with a
    clear coded error, or (a tool) the model sees an error result; the agent
    and the other conversation go on; history stays valid; logged once."""
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="agentik")
    if component == "model_stream":
        via_stream = True
    fault = Fault(component, error)
    bad, report = trio.run(
        fault_scenario, fault, via_stream, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    name = type(error).__name__
    assert fault.fired == 1, "the fault never fired: the example tests nothing"
    assert report.good == ["answer to hold"]
    assert report.again == "answer to again"
    for history in report.histories.values():
        assert_valid_history(history)
    if component in TURN_COMPONENTS:
        model_error = component.startswith("model") and isinstance(error, AgentikError)
        assert bad.code == ("model_error" if model_error else "internal_error"), bad
        assert bad.message is not None
        assert (MARKER if model_error else name) in bad.message, bad
    else:
        assert bad.text == "answer to boom", bad
    if component == "tool":
        [result] = [m for m in report.histories["bad"] if m.role is Role.TOOL]
        assert result.content.startswith(f"error: tool 'fragile' failed: {name}"), result
    reflection = component.startswith("reflection")
    assert report.reflections_failed == (1 if reflection else 0)
    if reflection:
        assert not any("boom" in lesson for lesson in report.lessons)
    [record] = agentik_records(caplog)
    logged = record.getMessage()
    assert name in logged or MARKER in logged, logged
