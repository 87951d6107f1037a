"""Model faults through real agent turns: ``OpenAICompatibleModel`` against
the scripted Chat Completions server of the model tests (``ChatServer``, a
real hypercorn server on 127.0.0.1, imported, not copied).

Every test checks the history the store holds afterwards, counts the requests
the server saw (retries are bounded), and runs a next turn on the same
conversation. A tool the model names is a probe that records every run: a
call cut off mid-arguments must never run. Waits between retries go through a
recording sleep; the timeouts run on a mock clock that the test jumps only
once the server holds the request, so the number of requests is exact.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.lowlevel
import trio.testing

from agentik import NamedTool, Role, TurnError
from agentik.agent import ChatAgent, TurnFailed, TurnFinished, open_chat_agent
from agentik.models import OpenAICompatibleModel, RetryPolicy
from agentik.storage import StorageBundle, in_memory_storage
from tests.models.chat_server import (
    ChatServer,
    Hang,
    Json,
    Raw,
    Sse,
    call_delta,
    chunk,
    completion,
)
from tests.reliability.helpers import check_history, history

RETRIES = 2


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[ChatServer]:
    """The scripted server; the test fails if the agent sent an invalid request."""
    chat = ChatServer()
    await chat.start(nursery)
    yield chat
    assert chat.problems == []


class Probe:
    def __init__(self) -> None:
        self.runs: list[dict[str, object]] = []

    async def handler(self, arguments: dict[str, object]) -> str:
        self.runs.append(arguments)
        return "probed"

    def tool(self) -> NamedTool:
        schema = {"type": "object", "properties": {"x": {"type": "string"}}}
        return NamedTool("probe", "Probe.", schema, self.handler)


class Setup:
    """An agent over an ``OpenAICompatibleModel`` pointed at the server."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server
        self.probe = Probe()
        self.storage: StorageBundle = in_memory_storage()
        self.delays: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        await trio.lowlevel.checkpoint()

    def model(self, timeout: float = 600.0) -> OpenAICompatibleModel:
        return OpenAICompatibleModel(
            self.server.base_url,
            "m",
            "sk-test",
            timeout=timeout,
            retry=RetryPolicy(max_retries=RETRIES),
            sleep=self.sleep,
            jitter=lambda: 0.0,
        )

    def agent(self, model: OpenAICompatibleModel):  # type: ignore[no-untyped-def]
        return open_chat_agent(
            model=model, storage=self.storage, tools=[self.probe.tool()], builtin_tools=False
        )

    async def next_turn_works(self, agent: ChatAgent) -> None:
        self.server.script(Json(completion("fine")))
        seen = len(self.server.received)
        assert (await agent.send("c", "next")).text == "fine"
        assert len(self.server.received) == seen + 1
        # the next request carried the whole stored history, valid per the openai types
        body = self.server.received[-1].body
        stored = await history(self.storage, "c")
        assert [m["role"] for m in body["messages"][1:]] == [m.role.value for m in stored[:-1]]
        check_history(stored, once=("go", "next"))


async def failing_turn(agent: ChatAgent, *, stream: bool) -> TurnError | TurnFailed:
    if not stream:
        with pytest.raises(TurnError) as info:
            await agent.send("c", "go")
        return info.value
    async with agent.stream("c", "go") as events:
        seen = [e async for e in events]
    assert isinstance(seen[-1], TurnFailed), seen[-1]
    return seen[-1]


async def held(server: ChatServer, count: int) -> None:
    """Wait (by checkpoints, not time) until the server has ``count`` requests."""
    # ChatServer has no event to wait on; the request arrives over a real socket.
    while len(server.received) < count:
        await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("stream", [False, True], ids=["send", "stream"])
async def test_model_timeout(
    server: ChatServer, mock_clock: trio.testing.MockClock, stream: bool
) -> None:
    """A model that never answers fails the turn at the deadline, with one
    request (a timeout is not retried past the deadline); history valid."""
    setup = Setup(server)
    server.script(Hang())
    async with setup.model(timeout=30) as model, setup.agent(model) as agent:
        failure: list[TurnError | TurnFailed] = []

        async def turn() -> None:
            failure.append(await failing_turn(agent, stream=stream))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(turn)
            await held(server, 1)
            mock_clock.jump(31)
        assert failure[0].code == "model_error"
        assert "timed out after 30 s" in str(
            failure[0].message if isinstance(failure[0], TurnFailed) else failure[0]
        )
        assert len(server.received) == 1
        assert [m.role for m in await history(setup.storage, "c")] == [Role.USER]
        await setup.next_turn_works(agent)


async def test_stream_stalls_mid_tool_call(
    server: ChatServer, mock_clock: trio.testing.MockClock
) -> None:
    """A stream that stops sending halfway through a tool call's arguments
    fails at the deadline; the call never runs and is not recorded."""
    setup = Setup(server)
    events = [chunk(role=True), chunk(tool_calls=[call_delta(0, '{"x": "a', id="k", name="probe")])]
    server.script(Sse(events, done=False, hang=True))
    async with setup.model(timeout=30) as model, setup.agent(model) as agent:
        async with trio.open_nursery() as nursery:
            failure: list[TurnFailed | TurnError] = []

            async def turn() -> None:
                failure.append(await failing_turn(agent, stream=True))

            nursery.start_soon(turn)
            await held(server, 1)
            mock_clock.jump(31)
        assert failure[0].code == "model_error"
        assert setup.probe.runs == []
        assert [m.role for m in await history(setup.storage, "c")] == [Role.USER]
        await setup.next_turn_works(agent)


@pytest.mark.parametrize("stream", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize(
    ("status", "code"), [(503, "model_unavailable"), (500, "model_error")], ids=["503", "500"]
)
async def test_5xx_storm_past_the_retry_budget(
    server: ChatServer, stream: bool, status: int, code: str
) -> None:
    """5xx after 5xx: exactly 1 + max_retries requests, then the turn fails
    (``model_unavailable`` for an overloaded backend's 503, ``model_error``
    for a 500); the user message stays, nothing else; the next turn works."""
    setup = Setup(server)
    error = {"error": {"message": "overloaded", "type": "server_error"}}
    server.script(*[Json(error, status=status) for _ in range(RETRIES + 1)])
    async with setup.model() as model, setup.agent(model) as agent:
        failure = await failing_turn(agent, stream=stream)
        assert failure.code == code
        assert len(server.received) == RETRIES + 1
        assert len(setup.delays) == RETRIES
        assert [m.role for m in await history(setup.storage, "c")] == [Role.USER]
        await setup.next_turn_works(agent)


@pytest.mark.parametrize("stream", [False, True], ids=["send", "stream"])
async def test_malformed_json_body(server: ChatServer, stream: bool) -> None:
    """A 200 whose body is not JSON fails the turn once, without retries."""
    setup = Setup(server)
    server.script(Raw(b'{"choices": [', content_type="application/json"))
    async with setup.model() as model, setup.agent(model) as agent:
        failure = await failing_turn(agent, stream=stream)
        assert failure.code == "model_error"
        assert len(server.received) == 1
        assert [m.role for m in await history(setup.storage, "c")] == [Role.USER]
        await setup.next_turn_works(agent)


async def test_malformed_tool_arguments_from_the_model(server: ChatServer) -> None:
    """Tool-call arguments that are not JSON get an error result the model
    sees; the tool never runs; the turn goes on to an answer."""
    setup = Setup(server)
    server.script(
        Json(completion(None, [("call-1", "probe", '{"x": ')], finish_reason="tool_calls")),
        Json(completion("recovered")),
    )
    async with setup.model() as model, setup.agent(model) as agent:
        result = await agent.send("c", "go")
        assert result.text == "recovered"
        assert setup.probe.runs == []
        assert result.messages[2].content.startswith("error: ")
        second = server.received[1].body["messages"]
        assert second[-1]["role"] == "tool" and second[-1]["content"].startswith("error: ")
        await setup.next_turn_works(agent)


async def test_stream_cut_mid_tool_call_arguments(server: ChatServer) -> None:
    """The connection drops halfway through a tool call's arguments: the turn
    fails with model_error, the truncated call never runs and is not stored,
    and it is not retried (events were already passed on)."""
    setup = Setup(server)
    events = [
        chunk(role=True),
        chunk(tool_calls=[call_delta(0, '{"x": "ab', id="call-1", name="probe")]),
    ]
    server.script(Sse(events, done=False, cut=True))
    async with setup.model() as model, setup.agent(model) as agent:
        failure = await failing_turn(agent, stream=True)
        assert failure.code == "model_error"
        assert setup.probe.runs == []
        assert len(server.received) == 1
        assert [m.role for m in await history(setup.storage, "c")] == [Role.USER]
        await setup.next_turn_works(agent)


async def test_stream_cut_before_any_event_is_retried_within_budget(server: ChatServer) -> None:
    """A stream that dies before its first event is retried, at most
    max_retries times; a retry that succeeds finishes the turn normally."""
    setup = Setup(server)
    cut = Sse([], done=False, cut=True)
    good = Sse([chunk(role=True), chunk("ok", finish_reason="stop"), chunk(usage=(3, 1))])
    server.script(cut, cut, good)
    async with setup.model() as model, setup.agent(model) as agent:
        async with agent.stream("c", "go") as stream:
            seen = [e async for e in stream]
        assert isinstance(seen[-1], TurnFinished)
        assert seen[-1].result.text == "ok"
        assert len(server.received) == 3
        await setup.next_turn_works(agent)


@pytest.mark.parametrize("stream", [False, True], ids=["send", "stream"])
async def test_length_with_partial_tool_call_arguments(server: ChatServer, stream: bool) -> None:
    """finish_reason=length with a call cut mid-arguments: the call is dropped,
    never run and never recorded; the turn ends with the text it got."""
    setup = Setup(server)
    partial = '{"x": "ab'
    if stream:
        server.script(
            Sse(
                [
                    chunk(role=True),
                    chunk("Let me"),
                    chunk(tool_calls=[call_delta(0, partial, id="call-1", name="probe")]),
                    chunk(finish_reason="length"),
                ]
            )
        )
    else:
        server.script(
            Json(completion("Let me", [("call-1", "probe", partial)], finish_reason="length"))
        )
    async with setup.model() as model, setup.agent(model) as agent:
        if stream:
            async with agent.stream("c", "go") as events:
                seen = [e async for e in events]
            assert isinstance(seen[-1], TurnFinished)
            result = seen[-1].result
        else:
            result = await agent.send("c", "go")
        assert result.text == "Let me"
        assert setup.probe.runs == []
        stored = await history(setup.storage, "c")
        assert all(not m.tool_calls for m in stored)
        assert len(server.received) == 1
        await setup.next_turn_works(agent)
