"""ScriptedModel and its responders: deterministic answers without HTTP."""

from __future__ import annotations

import json
from contextlib import aclosing

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from agentik._errors import ModelBackendError
from agentik._json import JsonObject
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.models import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ScriptedModel,
    StreamingChatModel,
    TextDelta,
    ToolCallDelta,
    bench_responder,
    demo_responder,
    replay,
)
from agentik.toolsets._named_tool import NamedTool


async def _handler(arguments: JsonObject) -> str:
    return "12:00"


def tool(name: str) -> NamedTool:
    return NamedTool(name=name, description=name, parameters={"type": "object"}, handler=_handler)


def user(text: str) -> Message:
    return Message(role=Role.USER, content=text)


SYSTEM = Message(role=Role.SYSTEM, content="You are a demo.")
ASK = ModelRequest(messages=[SYSTEM, user("hi")])


async def collect(model: ScriptedModel, request: ModelRequest = ASK) -> list[ModelStreamEvent]:
    async with aclosing(model.stream(request)) as stream:
        return [event async for event in stream]


class TestScriptedModel:
    async def test_sync_and_async_responders(self) -> None:
        """Both a plain function and a coroutine function can answer."""

        async def later(request: ModelRequest) -> ModelResponse:
            await trio.lowlevel.checkpoint()
            return ModelResponse(text=f"{len(request.messages)} messages")

        assert await ScriptedModel(lambda r: ModelResponse(text="now")).complete(ASK) == (
            ModelResponse(text="now")
        )
        assert (await ScriptedModel(later).complete(ASK)).text == "2 messages"

    async def test_satisfies_both_protocols(self) -> None:
        """The turn loop can use it as a chat model and as a streaming one."""
        model = ScriptedModel(demo_responder)
        assert isinstance(model, ChatModel)
        assert isinstance(model, StreamingChatModel)

    async def test_latency_waits_on_the_trio_clock(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        """``latency`` is a trio sleep before each answer."""
        model = ScriptedModel(demo_responder, latency=0.25)
        start = trio.current_time()
        await model.complete(ASK)
        await collect(model)
        assert trio.current_time() - start == pytest.approx(0.5)

    async def test_wrong_answer_type(self) -> None:
        """A responder returning something else is a clear error."""
        model = ScriptedModel(lambda r: "hello")  # type: ignore[arg-type,return-value]
        with pytest.raises(
            ModelBackendError,
            match=r"^a scripted responder must return a ModelResponse, got 'hello'$",
        ):
            await model.complete(ASK)

    def test_negative_latency(self) -> None:
        """A negative latency is refused."""
        with pytest.raises(ModelBackendError, match=r"^latency must be >= 0 seconds, got -1$"):
            ScriptedModel(demo_responder, latency=-1)

    async def test_stream_shape(self) -> None:
        """Text comes in three pieces, each call in two, then the response itself."""
        calls = [
            ToolCall(id="c1", name="a", arguments='{"x": 1}'),
            ToolCall(id="c2", name="b", arguments="{}"),
        ]
        answer = ModelResponse(text="Hello world", tool_calls=calls, finish_reason="tool_calls")
        events = await collect(ScriptedModel(lambda r: answer))
        assert events == [
            TextDelta(text="Hell"),
            TextDelta(text="o wo"),
            TextDelta(text="rld"),
            ToolCallDelta(index=0, arguments='{"x"', id="c1", name="a"),
            ToolCallDelta(index=0, arguments=": 1}"),
            ToolCallDelta(index=1, arguments="{", id="c2", name="b"),
            ToolCallDelta(index=1, arguments="}"),
            answer,
        ]

    @given(
        st.text(max_size=30),
        st.lists(st.text(max_size=12), max_size=3),
    )
    async def test_stream_reassembles_to_the_answer(self, text: str, arguments: list[str]) -> None:
        """Joined, the deltas are exactly the final response's text and calls."""
        calls = [ToolCall(id=f"c{i}", name="t", arguments=a) for i, a in enumerate(arguments)]
        answer = ModelResponse(text=text or None, tool_calls=calls)
        events = await collect(ScriptedModel(lambda r: answer))
        assert events[-1] is answer
        texts = [e.text for e in events if isinstance(e, TextDelta)]
        assert "".join(texts) == text
        assert len(texts) <= 3
        assert all(texts)
        for i, call in enumerate(calls):
            own = [e for e in events if isinstance(e, ToolCallDelta) and e.index == i]
            assert "".join(e.arguments for e in own) == call.arguments
            assert (own[0].id, own[0].name) == (call.id, call.name)


class TestReplay:
    async def test_answers_in_order_then_runs_out(self) -> None:
        """Responses come back in order; strings are text answers; then an error."""
        call = ModelResponse(tool_calls=[ToolCall(id="c", name="t", arguments="{}")])
        model = ScriptedModel(replay([call, "done"]))
        assert await model.complete(ASK) == call
        assert await model.complete(ASK) == ModelResponse(text="done")
        with pytest.raises(
            ModelBackendError, match=r"^scripted model ran out of responses: all 2 were used$"
        ):
            await model.complete(ASK)


class TestDemoResponder:
    def test_echoes_the_user(self) -> None:
        """A plain message is echoed, with a rough token count."""
        response = demo_responder(ModelRequest(messages=[SYSTEM, user("hello there")]))
        assert response == ModelResponse(
            text="You said: hello there",
            usage=TokenUsage(prompt_tokens=4 + 3, completion_tokens=6),
            finish_reason="stop",
        )

    def test_calls_a_named_tool(self) -> None:
        """Naming an offered tool calls it, with the JSON object that follows as arguments."""
        request = ModelRequest(
            messages=[SYSTEM, user('please call enable_toolset {"name": "files"} now')],
            tools=[tool("time_now"), tool("enable_toolset")],
        )
        response = demo_responder(request)
        assert response.text is None
        assert response.finish_reason == "tool_calls"
        assert response.tool_calls == (
            ToolCall(id="call_2", name="enable_toolset", arguments='{"name": "files"}'),
        )

    @pytest.mark.parametrize(
        ("text", "called"),
        [
            ("call time_now", "time_now"),
            ("time_now_utc or time_now?", "time_now"),
            ("what is my_time_now", None),
            ("time_nowadays", None),
            ("time_now then files_read", "time_now"),
            ("files_read then time_now", "files_read"),
        ],
    )
    def test_whole_word_earliest_mention(self, text: str, called: str | None) -> None:
        """Only a whole-word mention counts; the earliest one wins; arguments default to {}."""
        request = ModelRequest(
            messages=[SYSTEM, user(text)], tools=[tool("time_now"), tool("files_read")]
        )
        calls = demo_responder(request).tool_calls
        assert [(c.name, c.arguments) for c in calls] == ([(called, "{}")] if called else [])

    def test_unoffered_tools_are_not_called(self) -> None:
        """A tool the request does not offer is just echoed."""
        response = demo_responder(ModelRequest(messages=[SYSTEM, user("call time_now")]))
        assert response.text == "You said: call time_now"

    def test_summarises_tool_results(self) -> None:
        """After tool results it reports each, naming its tool."""
        calls = [
            ToolCall(id="call_2", name="time_now", arguments="{}"),
            ToolCall(id="call_3", name="weather", arguments="{}"),
        ]
        request = ModelRequest(
            messages=[
                SYSTEM,
                user("call time_now and weather"),
                Message(role=Role.ASSISTANT, content="", tool_calls=calls),
                Message(role=Role.TOOL, content="12:00", tool_call_id="call_2"),
                Message(role=Role.TOOL, content="sunny", tool_call_id="call_3"),
            ]
        )
        response = demo_responder(request)
        assert response.text == "time_now returned: 12:00\nweather returned: sunny"
        assert response.finish_reason == "stop"

    def test_is_deterministic(self) -> None:
        """The same request always gets the same answer."""
        request = ModelRequest(messages=[SYSTEM, user("call time_now {")], tools=[tool("time_now")])
        assert demo_responder(request) == demo_responder(request)
        assert demo_responder(request).tool_calls[0].arguments == "{}"


class TestBenchResponder:
    def test_one_tool_call_then_a_fixed_size_answer(self) -> None:
        """User message → the tool call; tool result → a reply of ``reply_chars``."""
        respond = bench_responder("time_now", arguments='{"tz": "UTC"}', reply_chars=10)
        first = respond(ModelRequest(messages=[SYSTEM, user("go")]))
        assert isinstance(first, ModelResponse)
        assert first.tool_calls == (
            ToolCall(id="call_2", name="time_now", arguments='{"tz": "UTC"}'),
        )
        result = Message(role=Role.TOOL, content="12:00", tool_call_id="call_2")
        assistant = Message(role=Role.ASSISTANT, content="", tool_calls=first.tool_calls)
        second = respond(ModelRequest(messages=[SYSTEM, user("go"), assistant, result]))
        assert isinstance(second, ModelResponse)
        assert second.text == "ok ok ok o"
        assert second.tool_calls == ()

    @pytest.mark.parametrize("size", [0, 1, 64, 1000])
    def test_reply_size(self, size: int) -> None:
        """The answer is exactly ``reply_chars`` long."""
        respond = bench_responder("t", reply_chars=size)
        answer = respond(ModelRequest(messages=[SYSTEM]))
        assert isinstance(answer, ModelResponse)
        assert len(answer.text or "") == size

    def test_negative_reply_size(self) -> None:
        """A negative size is refused."""
        with pytest.raises(ModelBackendError, match=r"^reply_chars must be >= 0, got -1$"):
            bench_responder("t", reply_chars=-1)

    async def test_streams_through_scripted_model(self) -> None:
        """Used as a ScriptedModel, its call streams as deltas that parse back to JSON."""
        model = ScriptedModel(bench_responder("t", arguments='{"n": 12345}'))
        events = await collect(model, ModelRequest(messages=[SYSTEM, user("go")]))
        arguments = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
        assert json.loads(arguments) == {"n": 12345}
