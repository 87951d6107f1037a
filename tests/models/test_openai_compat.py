"""OpenAICompatibleModel against a real scripted Chat Completions server on 127.0.0.1.

Every request the model sends is checked by the server against the openai
package's request types. Waits between retries go through an injected sleep
that records the delay, so no test sleeps for real; the one timeout test
runs on trio's autojump clock.
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import AsyncIterator
from contextlib import aclosing

import httpx2
import pytest
import trio
import trio.testing

from agentik._errors import ModelBackendError
from agentik._json import JsonObject
from agentik._messages import Message, Role, TokenUsage, ToolCall
from agentik.models import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    OpenAICompatibleModel,
    RetryPolicy,
    StreamingChatModel,
    TextDelta,
    ToolCallDelta,
)
from agentik.toolsets._named_tool import NamedTool
from tests.models.blackhole import blackholed_port
from tests.models.chat_server import (
    ChatServer,
    Hang,
    Held,
    Json,
    Raw,
    Sse,
    call_delta,
    chunk,
    completion,
)
from tests.models.conftest import RecordedSleep

KEY = "sk-test-secret-0123456789"


async def _now(arguments: JsonObject) -> str:
    return "12:00"


TIME_TOOL = NamedTool(
    name="time_now",
    description="The current time.",
    parameters={"type": "object", "properties": {"tz": {"type": "string"}}},
    handler=_now,
)
REQUEST = ModelRequest(
    messages=[
        Message(role=Role.SYSTEM, content="Be brief."),
        Message(role=Role.USER, content="hi"),
    ],
    tools=[TIME_TOOL],
)


@pytest.fixture
async def model(
    chat_server: ChatServer, sleep: RecordedSleep
) -> AsyncIterator[OpenAICompatibleModel]:
    async with OpenAICompatibleModel(
        chat_server.base_url, "m", KEY, sleep=sleep, jitter=lambda: 0.0
    ) as model:
        yield model


async def collect(
    model: OpenAICompatibleModel, request: ModelRequest = REQUEST
) -> tuple[list[ModelStreamEvent], BaseException | None]:
    """The events a stream yielded, and the error that ended it, if any."""
    events: list[ModelStreamEvent] = []
    try:
        async with aclosing(model.stream(request)) as stream:
            async for event in stream:
                events.append(event)
    except ModelBackendError as exc:
        return events, exc
    return events, None


class TestComplete:
    async def test_text_answer_with_usage(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """A plain answer comes back as text, usage and finish_reason."""
        chat_server.script(Json(completion("Hello there.", usage=(12, 4))))
        response = await model.complete(REQUEST)
        assert response == ModelResponse(
            text="Hello there.",
            usage=TokenUsage(prompt_tokens=12, completion_tokens=4),
            finish_reason="stop",
        )

    async def test_request_body_and_headers(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """Messages of every role and the tools map onto the Chat Completions body."""
        chat_server.script(Json(completion("ok")))
        call = ToolCall(id="call_0", name="time_now", arguments='{"tz":"UTC"}')
        request = ModelRequest(
            messages=[
                Message(role=Role.SYSTEM, content="s"),
                Message(role=Role.USER, content="q"),
                Message(role=Role.ASSISTANT, content="", tool_calls=[call]),
                Message(role=Role.TOOL, content="12:00", tool_call_id="call_0"),
                Message(role=Role.ASSISTANT, content="It is noon."),
            ],
            tools=[TIME_TOOL],
        )
        await model.complete(request)
        [received] = chat_server.received
        assert received.body == {
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": "time_now", "arguments": '{"tz":"UTC"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_0", "content": "12:00"},
                {"role": "assistant", "content": "It is noon."},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "time_now",
                        "description": "The current time.",
                        "parameters": TIME_TOOL.parameters,
                    },
                }
            ],
        }
        assert received.headers["authorization"] == f"Bearer {KEY}"
        assert received.headers["accept"] == "application/json"

    async def test_no_tools_key_without_tools_and_extra_params(
        self, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """Without tools the body has no ``tools``; extra params are sent as given."""
        chat_server.script(Json(completion("ok")))
        params = {"temperature": 0.2, "max_tokens": 50, "tool_choice": "auto"}
        async with OpenAICompatibleModel(chat_server.base_url + "/", "m", params=params) as model:
            await model.complete(ModelRequest(messages=[Message(role=Role.USER, content="q")]))
        [received] = chat_server.received
        assert received.body == {
            "model": "m",
            "messages": [{"role": "user", "content": "q"}],
            **params,
        }
        assert "authorization" not in received.headers

    async def test_tool_calls(self, model: OpenAICompatibleModel, chat_server: ChatServer) -> None:
        """Tool calls come back in order with their raw argument text."""
        calls = [("call_a", "time_now", '{"tz":"UTC"}'), ("call_b", "time_now", "{}")]
        chat_server.script(Json(completion(None, calls, finish_reason="tool_calls")))
        response = await model.complete(REQUEST)
        assert response.text is None
        assert response.finish_reason == "tool_calls"
        assert response.tool_calls == tuple(
            ToolCall(id=i, name=n, arguments=a) for i, n, a in calls
        )

    async def test_length_drops_truncated_tool_calls(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """With finish_reason=length a call whose arguments were cut off is not returned."""
        calls = [("call_a", "time_now", '{"tz":"UTC"}'), ("call_b", "time_now", '{"tz":"Eu')]
        chat_server.script(Json(completion("Let me", calls, finish_reason="length")))
        response = await model.complete(REQUEST)
        assert response == ModelResponse(
            text="Let me",
            tool_calls=[ToolCall(id="call_a", name="time_now", arguments='{"tz":"UTC"}')],
            usage=TokenUsage(prompt_tokens=7, completion_tokens=3),
            finish_reason="length",
        )

    async def test_retry_after_429_then_success(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A 429 is retried after the Retry-After the server asked for."""
        limited = {"error": {"message": "slow down", "type": "throttling_error", "code": "429"}}
        chat_server.script(
            Json(limited, status=429, headers={"Retry-After": "1"}), Json(completion("done"))
        )
        response = await model.complete(REQUEST)
        assert response.text == "done"
        assert sleep.delays == [1.0]
        assert len(chat_server.received) == 2

    async def test_retry_after_ms(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """``retry-after-ms`` wins over ``retry-after``."""
        chat_server.script(
            Json({}, status=503, headers={"retry-after-ms": "250", "retry-after": "9"}),
            Json(completion("done")),
        )
        assert (await model.complete(REQUEST)).text == "done"
        assert sleep.delays == [0.25]

    async def test_5xx_retries_are_bounded(
        self, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A 500 storm gets 1 + max_retries attempts with growing backoff, then an error."""
        error = {"error": {"message": "boom", "type": "server_error"}}
        chat_server.script(*[Json(error, status=500)] * 4)
        async with OpenAICompatibleModel(
            chat_server.base_url,
            "m",
            sleep=sleep,
            jitter=lambda: 0.999,
            retry=RetryPolicy(max_retries=3),
        ) as model:
            with pytest.raises(ModelBackendError) as caught:
                await model.complete(REQUEST)
        assert str(caught.value) == (
            f"model backend answered HTTP 500 for {chat_server.base_url}/chat/completions: "
            "boom (server_error) (gave up after 4 attempts)"
        )
        assert len(chat_server.received) == 4
        assert sleep.delays == pytest.approx([0.5 * 0.75025, 1.0 * 0.75025, 2.0 * 0.75025])

    async def test_retry_after_past_the_deadline_fails_at_once(
        self, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A wait that could only end in a timeout is not started."""
        chat_server.script(
            Json({"error": {"message": "busy"}}, status=429, headers={"retry-after": "60"})
        )
        async with OpenAICompatibleModel(
            chat_server.base_url, "m", timeout=30, sleep=sleep
        ) as model:
            with pytest.raises(
                ModelBackendError,
                match=r": busy \(not retried: waiting 60 s would pass the 30 s timeout\)$",
            ):
                await model.complete(REQUEST)
        assert sleep.delays == []

    async def test_default_policy_makes_three_attempts(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """By default (like the openai SDK) a failing call is retried twice."""
        chat_server.script(*[Raw(b"<html>bad gateway</html>", status=502)] * 3)
        with pytest.raises(ModelBackendError, match=r"HTTP 502 .*bad gateway.*3 attempts\)$"):
            await model.complete(REQUEST)
        assert sleep.delays == [0.5, 1.0]

    async def test_client_errors_are_not_retried_and_hide_the_key(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A 401 fails at once, with the server's message and without the API key."""
        chat_server.script(Json({"error": {"message": "bad key"}}, status=401))
        with pytest.raises(ModelBackendError, match=r"HTTP 401 .*: bad key$") as caught:
            await model.complete(REQUEST)
        assert KEY not in str(caught.value)
        assert KEY not in repr(model)
        assert sleep.delays == []

    async def test_should_retry_header_overrides_status(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """``x-should-retry: false`` stops retrying a 500; ``true`` retries a 400."""
        chat_server.script(
            Json({}, status=400, headers={"x-should-retry": "true"}),
            Json({}, status=500, headers={"x-should-retry": "false"}),
        )
        with pytest.raises(ModelBackendError, match=r"HTTP 500"):
            await model.complete(REQUEST)
        assert len(chat_server.received) == 2

    async def test_non_json_body(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A 200 whose body is not JSON is a clear error, not retried."""
        chat_server.script(Raw(b"<html>maintenance</html>"))
        with pytest.raises(
            ModelBackendError,
            match=r"^model response body is not JSON: '<html>maintenance</html>'$",
        ):
            await model.complete(REQUEST)
        assert len(chat_server.received) == 1

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            ({"choices": []}, r"^completion 'choices' must be a non-empty list, got \[\]$"),
            ([1, 2], r"^completion must be a JSON object, got \[1, 2\]$"),
            ({"choices": [{"message": {"content": 5}}]}, r"content must be a string or null"),
            (
                {"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]},
                r"^tool_calls\[0\]\.function\.name must be a non-empty string, got None$",
            ),
            (
                {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": "1"}},
                r"^usage prompt_tokens must be an integer >= 0, got '1'$",
            ),
            ({"error": {"message": "quota"}}, r"^model backend reported an error: quota$"),
        ],
    )
    async def test_malformed_completion(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, body: object, message: str
    ) -> None:
        """A 200 JSON body that is not a completion raises a clear error."""
        chat_server.script(Json(body))
        with pytest.raises(ModelBackendError, match=message):
            await model.complete(REQUEST)

    async def test_body_cut_midway_is_retried(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A connection dropped in the middle of the JSON body is retried."""
        chat_server.script(
            Raw(b'{"choices": [', content_type="application/json", cut=True),
            Json(completion("whole")),
        )
        assert (await model.complete(REQUEST)).text == "whole"
        assert sleep.delays == [0.5]

    async def test_connection_refused_is_retried_then_fails(self, sleep: RecordedSleep) -> None:
        """Connection errors are retried a bounded number of times."""
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        async with OpenAICompatibleModel(
            f"http://127.0.0.1:{port}/v1", "m", KEY, sleep=sleep, jitter=lambda: 0.0
        ) as model:
            with pytest.raises(ModelBackendError, match=r"^could not reach .*3 attempts\)$") as e:
                await model.complete(REQUEST)
        assert KEY not in str(e.value)
        assert len(sleep.delays) == 2

    async def test_total_timeout(
        self, chat_server: ChatServer, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A server that never answers makes the call fail at the deadline."""
        chat_server.script(Hang())
        async with OpenAICompatibleModel(chat_server.base_url, "m", timeout=30) as model:
            start = trio.current_time()
            with (
                pytest.raises(ModelBackendError, match=r"timed out after 30 s$"),
                trio.fail_after(60),
            ):
                await model.complete(REQUEST)
            assert trio.current_time() - start == pytest.approx(30)

    async def test_shared_client_stays_open(self, chat_server: ChatServer) -> None:
        """A caller's httpx2 client is used and left open for its owner to close."""
        chat_server.script(Json(completion("one")), Json(completion("two")))
        async with httpx2.AsyncClient() as client:
            async with OpenAICompatibleModel(chat_server.base_url, "m", client=client) as model:
                assert (await model.complete(REQUEST)).text == "one"
            assert not client.is_closed
            again = OpenAICompatibleModel(chat_server.base_url, "m", client=client)
            assert (await again.complete(REQUEST)).text == "two"


class TestStream:
    async def test_is_a_streaming_chat_model(self, model: OpenAICompatibleModel) -> None:
        """The model satisfies the protocol the turn loop checks for."""
        assert isinstance(model, StreamingChatModel)

    async def test_text_with_usage_from_final_chunk(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """Text deltas stream in order; the final response has the usage-only chunk's usage."""
        chat_server.script(
            Sse(
                [
                    chunk(role=True, content=""),
                    chunk("Hel"),
                    chunk("lo"),
                    chunk(finish_reason="stop"),
                    chunk(usage=(20, 2)),
                ]
            )
        )
        events, error = await collect(model)
        assert error is None
        assert events == [
            TextDelta(text="Hel"),
            TextDelta(text="lo"),
            ModelResponse(
                text="Hello",
                usage=TokenUsage(prompt_tokens=20, completion_tokens=2),
                finish_reason="stop",
            ),
        ]
        [received] = chat_server.received
        assert received.body["stream"] is True
        assert received.body["stream_options"] == {"include_usage": True}
        assert received.headers["accept"] == "text/event-stream"

    async def test_split_interleaved_tool_call_deltas(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """Fragments of two calls, interleaved even within one chunk, are joined per index."""
        chat_server.script(
            Sse(
                [
                    chunk(role=True, tool_calls=[call_delta(0, "", id="call_a", name="time_now")]),
                    chunk(
                        tool_calls=[
                            call_delta(1, '{"tz"', id="call_b", name="time_now"),
                            call_delta(0, '{"tz":'),
                        ]
                    ),
                    chunk(tool_calls=[call_delta(0, ' "UTC"}')]),
                    chunk(tool_calls=[call_delta(1, ': "CET"}')], finish_reason="tool_calls"),
                    chunk(usage=(30, 9)),
                ]
            )
        )
        events, error = await collect(model)
        assert error is None
        assert events[:-1] == [
            ToolCallDelta(index=0, arguments="", id="call_a", name="time_now"),
            ToolCallDelta(index=1, arguments='{"tz"', id="call_b", name="time_now"),
            ToolCallDelta(index=0, arguments='{"tz":'),
            ToolCallDelta(index=0, arguments=' "UTC"}'),
            ToolCallDelta(index=1, arguments=': "CET"}'),
        ]
        assert events[-1] == ModelResponse(
            tool_calls=[
                ToolCall(id="call_a", name="time_now", arguments='{"tz": "UTC"}'),
                ToolCall(id="call_b", name="time_now", arguments='{"tz": "CET"}'),
            ],
            usage=TokenUsage(prompt_tokens=30, completion_tokens=9),
            finish_reason="tool_calls",
        )

    async def test_cut_midway_raises_without_retry(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A stream cut after events were yielded raises; it is not retried."""
        chat_server.script(
            Sse([chunk(role=True, content="Hel"), chunk("lo")], done=False, cut=True)
        )
        events, error = await collect(model)
        assert events == [TextDelta(text="Hel"), TextDelta(text="lo")]
        assert isinstance(error, ModelBackendError)
        assert str(error).startswith("model stream from ")
        assert "broke after 2 events: the stream was cut: RemoteProtocolError" in str(error)
        assert len(chat_server.received) == 1
        assert sleep.delays == []

    async def test_cut_mid_tool_call_arguments_returns_no_call(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """A stream cut inside a call's arguments never yields a runnable call."""
        chat_server.script(
            Sse(
                [
                    chunk(tool_calls=[call_delta(0, '{"tz": "U', id="call_a", name="time_now")]),
                ],
                done=False,
                cut=True,
            )
        )
        events, error = await collect(model)
        assert isinstance(error, ModelBackendError)
        assert not any(isinstance(event, ModelResponse) for event in events)

    async def test_cut_before_first_event_is_retried(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """Nothing was yielded yet, so a cut stream is retried like a failed request."""
        chat_server.script(
            Sse([chunk(role=True)], done=False, cut=True),
            Sse([], done=False),  # ends cleanly but before any finish_reason
            Sse([chunk("ok", finish_reason="stop")]),
        )
        events, error = await collect(model)
        assert error is None
        assert events == [TextDelta(text="ok"), ModelResponse(text="ok", finish_reason="stop")]
        assert len(chat_server.received) == 3
        assert sleep.delays == [0.5, 1.0]

    async def test_finished_stream_without_done_is_complete(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """A stream that said its finish_reason may end without ``[DONE]``."""
        chat_server.script(Sse([chunk("ok", finish_reason="stop")], done=False))
        events, error = await collect(model)
        assert error is None
        assert events[-1] == ModelResponse(text="ok", finish_reason="stop")

    async def test_length_drops_truncated_tool_calls(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """finish_reason=length: the complete call is kept, the cut-off one dropped."""
        chat_server.script(
            Sse(
                [
                    chunk(tool_calls=[call_delta(0, "{}", id="call_a", name="time_now")]),
                    chunk(tool_calls=[call_delta(1, '{"tz": "U', id="call_b", name="time_now")]),
                    chunk(finish_reason="length"),
                ]
            )
        )
        events, error = await collect(model)
        assert error is None
        assert events[-1] == ModelResponse(
            tool_calls=[ToolCall(id="call_a", name="time_now", arguments="{}")],
            finish_reason="length",
        )

    async def test_error_frame_mid_stream(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A LiteLLM-style ``data: {"error": …}`` frame raises with its message."""
        error_frame = {"error": {"message": "upstream died", "type": "api_error", "code": "500"}}
        chat_server.script(Sse([chunk("par"), error_frame], done=False))
        events, error = await collect(model)
        assert events == [TextDelta(text="par")]
        assert str(error) == "model backend reported an error mid-stream: upstream died (api_error)"

    async def test_non_json_event(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """An event whose data is not JSON raises a clear error."""
        chat_server.script(Sse(["{not json"]))
        events, error = await collect(model)
        assert events == []
        assert str(error) == "stream event is not JSON: '{not json'"

    async def test_429_before_stream_is_retried(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """An HTTP error before the stream starts is retried like ``complete``."""
        chat_server.script(
            Json({}, status=429, headers={"retry-after": "2"}),
            Sse([chunk("ok", finish_reason="stop")]),
        )
        events, error = await collect(model)
        assert error is None
        assert events[-1] == ModelResponse(text="ok", finish_reason="stop")
        assert sleep.delays == [2.0]

    async def test_unicode_line_separators_inside_json_strings(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """SSE lines end only at CR, LF or CRLF: U+2028, U+2029 and U+0085, which
        JSON strings may hold raw (and servers writing UTF-8 send raw), are text.
        A key cut by one of them is no key, and stays as sent."""
        text = f"a\u2028b\u2029c\x85d {KEY[:5]}\u2028{KEY[5:]}"
        raw = json.dumps(chunk(text, finish_reason="stop"), ensure_ascii=False)
        chat_server.script(Sse([raw]))
        events, error = await collect(model)
        assert error is None
        assert events == [TextDelta(text=text), ModelResponse(text=text, finish_reason="stop")]

    async def test_server_ignoring_stream_flag(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """A plain JSON answer to a streaming request still streams its parts."""
        chat_server.script(Json(completion("hi", [("call_a", "time_now", "{}")])))
        events, error = await collect(model)
        assert error is None
        assert events == [
            TextDelta(text="hi"),
            ToolCallDelta(index=0, arguments="{}", id="call_a", name="time_now"),
            ModelResponse(
                text="hi",
                tool_calls=[ToolCall(id="call_a", name="time_now", arguments="{}")],
                usage=TokenUsage(prompt_tokens=7, completion_tokens=3),
                finish_reason="stop",
            ),
        ]

    async def test_plain_answer_cut_midway_is_retried(
        self, model: OpenAICompatibleModel, chat_server: ChatServer, sleep: RecordedSleep
    ) -> None:
        """A plain JSON answer to a streaming request, cut short, is retried."""
        chat_server.script(
            Raw(b'{"choices": [', content_type="application/json", cut=True),
            Sse([chunk("ok", finish_reason="stop")]),
        )
        events, error = await collect(model)
        assert error is None
        assert events[-1] == ModelResponse(text="ok", finish_reason="stop")
        assert sleep.delays == [0.5]

    async def test_total_timeout(
        self, chat_server: ChatServer, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A stream that never starts fails at the deadline."""
        chat_server.script(Hang())
        async with OpenAICompatibleModel(chat_server.base_url, "m", timeout=5) as model:
            with trio.fail_after(60):  # fail, rather than hang, if the deadline is ignored
                events, error = await collect(model)
        assert events == []
        assert str(error).endswith("timed out after 5 s")

    async def test_total_timeout_covers_reads(
        self, chat_server: ChatServer, autojump_clock: trio.testing.MockClock
    ) -> None:
        """A stream that stalls after it started fails at the deadline too."""
        chat_server.script(Sse([chunk("a")], done=False, hang=True))
        async with OpenAICompatibleModel(chat_server.base_url, "m", timeout=5) as model:
            with trio.fail_after(60):  # fail, rather than hang, if the deadline is ignored
                events, error = await collect(model)
        assert str(error).endswith("timed out after 5 s")
        assert not any(isinstance(event, ModelResponse) for event in events)

    async def test_one_model_serves_concurrent_calls(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """One instance (and its connection pool) serves many conversations at once."""
        texts = [f"answer {i}" for i in range(8)]
        chat_server.script(*(Sse([chunk(t, finish_reason="stop")]) for t in texts))
        answers: list[str | None] = []

        async def one() -> None:
            events, error = await collect(model)
            assert error is None
            final = events[-1]
            assert isinstance(final, ModelResponse)
            answers.append(final.text)

        async with trio.open_nursery() as nursery:
            for _ in texts:
                nursery.start_soon(one)
        assert sorted(answers, key=str) == texts


def _escaped(text: str) -> str:
    """``text`` as a JSON string literal of ``\\u`` escapes only."""
    return '"' + "".join(f"\\u{ord(c):04x}" for c in text) + '"'


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class TestSecretsInAnswers:
    """The key the model sends is masked in every answer, however the backend
    cuts or escapes it; the streamed deltas never show it, even joined."""

    async def test_a_key_in_three_character_pieces(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """Text and tool-call arguments quoting the key (and "Bearer <key>") in
        3-character deltas: joined, the deltas are the final answer, masked."""
        text = f"you sent Bearer {KEY}; the key is {KEY}"
        arguments = json.dumps({"tz": KEY})
        first = call_delta(0, "", id="call_a", name="time_now")
        chat_server.script(
            Sse(
                [
                    *(chunk(piece) for piece in _pieces(text, 3)),
                    chunk(tool_calls=[first]),
                    *(chunk(tool_calls=[call_delta(0, p)]) for p in _pieces(arguments, 3)),
                    chunk(finish_reason="tool_calls"),
                ]
            )
        )
        events, error = await collect(model)
        assert error is None
        final = events[-1]
        assert final == ModelResponse(
            text="you sent Bearer ***; the key is ***",
            tool_calls=[ToolCall(id="call_a", name="time_now", arguments='{"tz": "***"}')],
            finish_reason="tool_calls",
        )
        deltas = events[:-1]
        joined = "".join(e.text for e in deltas if isinstance(e, TextDelta))
        joined_arguments = "".join(e.arguments for e in deltas if isinstance(e, ToolCallDelta))
        assert (joined, joined_arguments) == (final.text, final.tool_calls[0].arguments)
        assert KEY not in repr(events)

    async def test_text_that_cannot_start_a_key_is_not_held_back(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """The common case: each delta goes on as it came; only an end that may
        begin the key ("s", "sk", "sk-t") waits, and goes on when it turns out not to."""
        pieces = ["Hel", "lo, ", "thi", "s", "k", " is sk-t", "ea."]
        chat_server.script(Sse([*(chunk(p) for p in pieces), chunk(finish_reason="stop")]))
        events, error = await collect(model)
        assert error is None
        assert events[:-1] == [
            TextDelta(text=t) for t in ["Hel", "lo, ", "thi", "sk is ", "sk-tea."]
        ]

    async def test_a_held_end_goes_out_when_the_stream_ends(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        chat_server.script(Sse([chunk("ask"), chunk("-t", finish_reason="stop")]))
        events, error = await collect(model)
        assert error is None
        assert events == [
            TextDelta(text="a"),
            TextDelta(text="sk-t"),
            ModelResponse(text="ask-t", finish_reason="stop"),
        ]

    async def test_a_key_in_json_escapes(
        self, model: OpenAICompatibleModel, chat_server: ChatServer
    ) -> None:
        """No raw byte spells a key sent as ``\\u`` escapes; the decoded answer
        is masked all the same, whole and streamed."""
        body = completion("x", [("call_a", "time_now", "{}")])
        raw = json.dumps(body).replace('"x"', _escaped(f"key {KEY}"))
        raw = raw.replace('"{}"', _escaped(json.dumps({"tz": KEY})))
        streamed = json.dumps(chunk("x", finish_reason="stop")).replace('"x"', _escaped(KEY))
        chat_server.script(Raw(raw.encode(), content_type="application/json"), Sse([streamed]))
        whole = await model.complete(REQUEST)
        assert whole.text == "key ***"
        assert whole.tool_calls[0].arguments == '{"tz": "***"}'
        events, error = await collect(model)
        assert error is None
        assert events == [TextDelta(text="***"), ModelResponse(text="***", finish_reason="stop")]


class TestConstruction:
    def test_rejects_params_agentik_sets(self) -> None:
        """Extra params may not replace the fields agentik controls."""
        with pytest.raises(ModelBackendError, match=r"^params may not set model, stream; "):
            OpenAICompatibleModel("http://x/v1", "m", params={"stream": False, "model": "n"})

    def test_rejects_a_base_url_without_scheme(self) -> None:
        """A base_url must be an http(s) URL."""
        with pytest.raises(ModelBackendError, match=r"^base_url must start with http"):
            OpenAICompatibleModel("localhost:8000/v1", "m")

    def test_repr_hides_the_key(self) -> None:
        """The API key never appears in the repr."""
        model = OpenAICompatibleModel("http://x/v1", "m", KEY)
        assert (
            repr(model) == "OpenAICompatibleModel(base_url='http://x/v1', model='m', api_key='***')"
        )

    def test_tool_message_without_call_id(self) -> None:
        """A tool message without its call id cannot be sent."""
        request = ModelRequest(messages=[Message(role=Role.TOOL, content="x")])
        model = OpenAICompatibleModel("http://x/v1", "m")
        with pytest.raises(ModelBackendError, match=r"^a tool message needs a tool_call_id"):
            model._encode(request, stream=False)


def test_request_bodies_are_valid_json() -> None:
    """Non-ASCII text survives encoding unescaped."""
    model = OpenAICompatibleModel("http://x/v1", "m")
    request = ModelRequest(messages=[Message(role=Role.USER, content="héllo ☃")])
    assert json.loads(model._encode(request, stream=True))["messages"][0]["content"] == "héllo ☃"


class TestConnectTimeout:
    """``connect_timeout``: a connect nobody answers fails after it, as a
    refused connection does (a failed attempt, retried), not at ``timeout``."""

    async def test_a_blackholed_connect_fails_after_connect_timeout(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        with blackholed_port() as port:
            async with OpenAICompatibleModel(
                f"http://127.0.0.1:{port}/v1",
                "m",
                timeout=600,
                connect_timeout=5,
                retry=RetryPolicy(max_retries=1, initial_delay=1.0),
                jitter=lambda: 0.0,
            ) as model:
                start = trio.current_time()
                with pytest.raises(
                    ModelBackendError,
                    match=r"^could not reach .*: ConnectTimeout.* \(gave up after 2 attempts\)$",
                ):
                    await model.complete(REQUEST)
                # two attempts of 5 s each, and the 1 s wait between them
                assert trio.current_time() - start == pytest.approx(11)

    async def test_without_it_only_the_call_timeout_ends_the_connect(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        with blackholed_port() as port:
            async with OpenAICompatibleModel(
                f"http://127.0.0.1:{port}/v1", "m", timeout=30
            ) as model:
                start = trio.current_time()
                with pytest.raises(ModelBackendError, match=r"timed out after 30 s$"):
                    await model.complete(REQUEST)
                assert trio.current_time() - start == pytest.approx(30)

    async def test_a_stream_connects_within_it_too(
        self, autojump_clock: trio.testing.MockClock
    ) -> None:
        with blackholed_port() as port:
            async with OpenAICompatibleModel(
                f"http://127.0.0.1:{port}/v1",
                "m",
                connect_timeout=2,
                retry=RetryPolicy(max_retries=0),
            ) as model:
                start = trio.current_time()
                events, error = await collect(model)
                assert events == []
                assert "ConnectTimeout" in str(error)
                assert trio.current_time() - start == pytest.approx(2)

    async def test_an_answering_server_is_unaffected(
        self, chat_server: ChatServer, autojump_clock: trio.testing.MockClock
    ) -> None:
        """It bounds the connect only: an answer slower than it still arrives."""
        release = trio.Event()
        chat_server.script(Held(Json(completion("late")), release))
        async with OpenAICompatibleModel(
            chat_server.base_url, "m", connect_timeout=1, retry=RetryPolicy(max_retries=0)
        ) as model:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_release_after, release, 10)
                assert (await model.complete(REQUEST)).text == "late"

    @pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
    def test_nonsense_is_refused(self, bad: float) -> None:
        with pytest.raises(ModelBackendError, match=r"^connect_timeout must be > 0 seconds"):
            OpenAICompatibleModel("http://127.0.0.1:9/v1", "m", connect_timeout=bad)

    async def test_a_callers_client_keeps_its_own_timeouts(self) -> None:
        async with httpx2.AsyncClient() as client:
            with pytest.raises(ModelBackendError, match=r"^give connect_timeout or client"):
                OpenAICompatibleModel(
                    "http://127.0.0.1:9/v1", "m", client=client, connect_timeout=1
                )


async def _release_after(event: trio.Event, seconds: float) -> None:
    await trio.sleep(seconds)
    event.set()
