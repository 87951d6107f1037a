"""Elicitation: an MCP server asks the person mid-call (form mode, SEP-1034 defaults).

The tiny server's ``book`` tool asks "Who is the booking for?" with a schema
(``name``, ``guests`` defaulting to 2). A real agent turn calls it over real
HTTP; the test plays the person through ``agent.pending_elicitations`` and
``agent.answer_elicitation``. Real time, bounded by ``fail_after``; the two
timing tests use timeouts well under a second and say why.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
import trio

from agentik import (
    ChatAgent,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ToolCall,
    TurnResult,
    in_memory_storage,
    open_chat_agent,
)
from agentik.agent import ElicitationAsked, ElicitationError, ElicitationRequest, TurnFinished
from agentik.mcp import McpToolset, open_mcp_toolsets
from tests.mcp.conftest import tiny_http
from tests.mcp.test_stdio import LIMIT


def _books(request: ModelRequest) -> ModelResponse:
    """Book when the user asks to; answer with the tool's result afterwards."""
    last = request.messages[-1]
    if last.role.value == "user" and "book" in last.content:
        return ModelResponse(tool_calls=(ToolCall(id="c1", name="web_book", arguments="{}"),))
    return ModelResponse(text=last.content)


@asynccontextmanager
async def _agent(url: str, **options: object) -> AsyncIterator[tuple[ChatAgent, McpToolset]]:
    async with (
        open_mcp_toolsets([tiny_http(url, name="web", **options)]) as (src,),
        open_chat_agent(
            model=ScriptedModel(_books), storage=in_memory_storage(), toolsets=[src]
        ) as agent,
    ):
        yield agent, src


async def _asked(agent: ChatAgent, conversation: str) -> ElicitationRequest:
    while not (pending := await agent.pending_elicitations(conversation)):  # noqa: ASYNC110
        await trio.sleep(0.02)  # the question comes from the server over HTTP
    (request,) = pending
    return request


async def _turn(
    agent: ChatAgent, conversation: str, person: Callable[[ElicitationRequest], object]
) -> TurnResult:
    """Run a booking turn; ``person`` answers the question (it may be async)."""
    results: list[TurnResult] = []
    async with trio.open_nursery() as nursery:

        async def send() -> None:
            results.append(await agent.send(conversation, "please book"))

        nursery.start_soon(send)
        answered = person(await _asked(agent, conversation))
        if answered is not None:
            await answered  # type: ignore[misc]
    (result,) = results
    return result


def _tool_result(result: TurnResult) -> str:
    return next(m.content for m in result.messages if m.role.value == "tool")


class TestFormMode:
    @pytest.mark.parametrize("protocol", ["auto", "legacy"])
    async def test_an_accepted_answer_gets_the_schema_defaults(
        self, http_url: str, protocol: str
    ) -> None:
        """The turn waits in the call; the question names the conversation and the server;
        a field left out takes its default (SEP-1034)."""
        with trio.fail_after(LIMIT):
            async with _agent(http_url, protocol=protocol) as (agent, _):

                async def person(request: ElicitationRequest) -> None:
                    assert (request.conversation_id, request.source) == ("c", "web")
                    assert request.message == "Who is the booking for?"
                    assert request.schema["properties"]["guests"]["default"] == 2
                    await agent.answer_elicitation("c", request.id, content={"name": "Ada"})

                result = await _turn(agent, "c", person)
                assert _tool_result(result) == "booked for Ada, 2 guests"
                assert result.status == "finished"
                assert await agent.pending_elicitations("c") == ()

    async def test_an_invalid_answer_is_refused_and_changes_nothing(self, http_url: str) -> None:
        """Content that does not match the schema: ElicitationError, the question still
        waits; a decline then reaches the server."""
        with trio.fail_after(LIMIT):
            async with _agent(http_url) as (agent, _):

                async def person(request: ElicitationRequest) -> None:
                    with pytest.raises(ElicitationError, match=r"^guests: 'many' is not of type"):
                        await agent.answer_elicitation(
                            "c", request.id, content={"name": "Ada", "guests": "many"}
                        )
                    with pytest.raises(
                        ElicitationError, match=r"^the answer: 'name' is a required"
                    ):
                        await agent.answer_elicitation("c", request.id, content={})
                    assert await agent.pending_elicitations("c") == (request,)
                    with pytest.raises(ElicitationError) as error:
                        await agent.answer_elicitation("other", request.id, action="decline")
                    assert error.value.code == "not_waiting"
                    await agent.answer_elicitation("c", request.id, action="decline")

                result = await _turn(agent, "c", person)
                assert _tool_result(result) == "not booked: decline"

    async def test_other_conversations_go_on_while_one_waits(self, http_url: str) -> None:
        """A question holds its own conversation's turn only."""
        with trio.fail_after(LIMIT):
            async with _agent(http_url) as (agent, _):

                async def person(request: ElicitationRequest) -> None:
                    other = await agent.send("d", "hello")
                    assert (other.status, other.text) == ("finished", "hello")
                    await agent.answer_elicitation("c", request.id, content={"name": "Bo"})

                result = await _turn(agent, "c", person)
                assert _tool_result(result) == "booked for Bo, 2 guests"


class TestTimeouts:
    async def test_no_answer_in_time_declines(self, http_url: str) -> None:
        """Nobody answers within elicitation_timeout (0.3 s: a real server, so real time):
        the server gets a decline and the turn finishes."""
        with trio.fail_after(LIMIT):
            async with _agent(http_url, elicitation_timeout=0.3) as (agent, _):
                result = await _turn(agent, "c", lambda request: None)
                assert _tool_result(result) == "not booked: decline"
                assert await agent.pending_elicitations("c") == ()

    async def test_the_call_timeout_stands_still_while_a_person_thinks(self, http_url: str) -> None:
        """An answer after longer than call_timeout (0.5 s; real time, the server is real)
        still completes the call: the wait for a person does not count."""
        with trio.fail_after(LIMIT):
            async with _agent(http_url, call_timeout=0.5) as (agent, _):

                async def person(request: ElicitationRequest) -> None:
                    await trio.sleep(0.8)
                    await agent.answer_elicitation("c", request.id, content={"name": "Cy"})

                result = await _turn(agent, "c", person)
                assert _tool_result(result) == "booked for Cy, 2 guests"


class TestStreamed:
    async def test_a_streamed_turn_yields_the_question(self, http_url: str) -> None:
        """``agent.stream`` yields ``ElicitationAsked`` (what the HTTP transports put to
        the person) between the call's start and its result."""
        with trio.fail_after(LIMIT):
            async with _agent(http_url) as (agent, _):
                kinds: list[str] = []
                async with agent.stream("c", "please book") as events:
                    async for event in events:
                        kinds.append(type(event).__name__)
                        if isinstance(event, ElicitationAsked):
                            assert event.request == (await agent.pending_elicitations("c"))[0]
                            await agent.answer_elicitation(
                                "c", event.request.id, content={"name": "Ed"}
                            )
                        elif isinstance(event, TurnFinished):
                            assert _tool_result(event.result) == "booked for Ed, 2 guests"
                assert kinds.index("ToolCallStarted") < kinds.index("ElicitationAsked")
                assert kinds.index("ElicitationAsked") < kinds.index("ToolCallFinished")
                assert kinds[-1] == "TurnFinished"
