"""Turns through a real agent on the in-memory store: the loop, persistence,
tool faults, step limit, cancellation, idempotency, backpressure."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agentik import (
    ModelRequest,
    ModelResponse,
    NamedTool,
    OverloadedError,
    Role,
    TokenUsage,
    TurnError,
)
from agentik.agent import (
    ChatAgent,
    ToolCallFinished,
    ToolCallStarted,
    TurnFailed,
    TurnFinished,
    open_chat_agent,
)
from agentik.models import ScriptedModel, TextDelta
from agentik.storage import in_memory_storage
from agentik.testing import Script, assert_tool_called, history, tool_result
from tests.agent.helpers import assert_valid_history, by_turn, call, stored


def echo_tool(name: str = "echo") -> NamedTool:
    async def handler(arguments: dict[str, object]) -> str:
        return f"echo:{arguments.get('text', '')}"

    return NamedTool(
        name,
        "Echo the text.",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        handler,
    )


@pytest.fixture
def agentik_agent_options() -> dict[str, object]:
    """For the tests on the agentik.testing plugin's agent: the echo tool."""
    return {"tools": [echo_tool()]}


@pytest.mark.parametrize("agentik_backend", ["memory", "sqlite"])
async def test_text_turn_is_committed_with_seqs(
    agentik_agent: ChatAgent, agentik_script: Script
) -> None:
    """A plain answer: two messages, both committed with seq 1 and 2 and usage."""
    agentik_script.when_user_says("hello").answer("hi!", usage=TokenUsage(5, 2))
    result = await agentik_agent.send("c", "hello")
    assert result.text == "hi!"
    assert [(m.role, m.content, m.seq) for m in result.messages] == [
        (Role.USER, "hello", 1),
        (Role.ASSISTANT, "hi!", 2),
    ]
    assert result.usage == TokenUsage(5, 2)
    assert await history(agentik_agent, "c") == list(result.messages)
    stats = await agentik_agent.storage.message_store.token_stats("c")
    assert (stats.prompt_tokens, stats.completion_tokens) == (5, 2)


@pytest.mark.parametrize("agentik_backend", ["memory", "sqlite"])
async def test_tool_call_round_trip(agentik_agent: ChatAgent, agentik_script: Script) -> None:
    """The model calls a core tool; its result is recorded and seen by the model."""
    agentik_script.when_user_says("go").call("echo", {"text": "x"}).answer("got it")
    result = await agentik_agent.send("c", "go")
    assert result.text == "got it"
    roles = [m.role for m in result.messages]
    assert roles == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    call_ = assert_tool_called(result.messages, "echo", {"text": "x"})
    assert tool_result(result.messages, call_) == "echo:x"
    seen = agentik_script.requests
    assert seen[0].messages[0].role is Role.SYSTEM
    assert "echo" in {t.name for t in seen[0].tools}
    assert seen[1].messages[-1].content == "echo:x", "the model saw the tool's result"
    assert_valid_history(await history(agentik_agent, "c"))


async def test_system_message_is_not_stored() -> None:
    """messages[0] is built per request and never persisted."""
    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(lambda r: ModelResponse(text="ok")),
        storage=storage,
        system_prompt="BASE PROMPT",
    ) as agent:
        await agent.send("c", "one")
    assert all(m.role is not Role.SYSTEM for m in await stored(storage, "c"))


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (call("nope"), "error: tool 'nope' not found"),
        (call("echo", raw="{not json"), "error: "),
        (call("echo", {"text": 3}), "error: "),
        (call("boom"), "error: tool 'boom' failed: RuntimeError: kaput"),
    ],
    ids=["unknown", "malformed-json", "wrong-type", "raises"],
)
async def test_bad_calls_become_error_results(response: ModelResponse, expected: str) -> None:
    """Unknown tools, bad arguments and raising tools give an error result the
    model sees; the turn goes on to an answer."""

    async def boom(arguments: dict[str, object]) -> str:
        raise RuntimeError("kaput")

    storage = in_memory_storage()
    model = ScriptedModel(by_turn({"go": [response, "recovered"]}))
    tools = [echo_tool(), NamedTool("boom", "Fails.", {"type": "object"}, boom)]
    async with open_chat_agent(model=model, storage=storage, tools=tools) as agent:
        result = await agent.send("c", "go")
    assert result.text == "recovered"
    tool_result = result.messages[2]
    assert tool_result.role is Role.TOOL
    assert tool_result.content.startswith(expected)
    assert agent.stats.tool_errors == 1
    assert_valid_history(await stored(storage, "c"))


async def test_malformed_arguments_name_the_field() -> None:
    """A schema violation names the bad field so the model can fix it."""
    storage = in_memory_storage()
    model = ScriptedModel(by_turn({"go": [call("echo", {"text": 3}), "ok"]}))
    async with open_chat_agent(model=model, storage=storage, tools=[echo_tool()]) as agent:
        result = await agent.send("c", "go")
    assert "text" in result.messages[2].content


async def test_hanging_tool_times_out(autojump_clock: trio.testing.MockClock) -> None:
    """A tool past tool_timeout gets an error result; the turn continues."""

    async def hang(arguments: dict[str, object]) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    storage = in_memory_storage()
    model = ScriptedModel(by_turn({"go": [call("hang"), "done"]}))
    tools = [NamedTool("hang", "Hangs.", {"type": "object"}, hang)]
    async with open_chat_agent(model=model, storage=storage, tools=tools, tool_timeout=3) as agent:
        start = trio.current_time()
        result = await agent.send("c", "go")
        assert 3 <= trio.current_time() - start < 4
    assert result.messages[2].content == "error: tool 'hang' timed out after 3 s"
    assert result.text == "done"


async def test_tool_output_is_capped() -> None:
    """A huge tool result is cut to max_tool_output characters, with a note."""

    async def big(arguments: dict[str, object]) -> str:
        return "x" * 10_000_000

    storage = in_memory_storage()
    model = ScriptedModel(by_turn({"go": [call("big"), "ok"]}))
    tools = [NamedTool("big", "Big.", {"type": "object"}, big)]
    async with open_chat_agent(
        model=model, storage=storage, tools=tools, max_tool_output=1000
    ) as agent:
        result = await agent.send("c", "go")
    content = result.messages[2].content
    assert content.startswith("x" * 1000)
    assert len(content) < 1100
    assert "9999000 more characters" in content


async def test_runaway_model_stops_at_step_limit() -> None:
    """A model that calls tools forever ends with a step_limit error; every
    recorded call has its result and the next turn works."""
    storage = in_memory_storage()
    calls = 0

    def respond(request: ModelRequest) -> ModelResponse:
        nonlocal calls
        calls += 1
        if request.messages[-1].content == "again":
            return ModelResponse(text="fine")
        return call("echo", {"text": "loop"}, id=f"c{calls}")

    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, tools=[echo_tool()], max_tool_rounds=4
    ) as agent:
        with pytest.raises(TurnError, match="after 4 model calls") as info:
            await agent.send("c", "loop")
        assert info.value.code == "step_limit"
        assert calls == 4
        history = await stored(storage, "c")
        assert len(history) == 1 + 4 * 2
        assert_valid_history(history)
        assert (await agent.send("c", "again")).text == "fine"
    assert_valid_history(await stored(storage, "c"))


async def test_model_failure_fails_the_turn_and_keeps_history_valid() -> None:
    """A model error ends the turn with code model_error; the user message stays."""
    from agentik import ModelBackendError

    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role is Role.TOOL:
            raise ModelBackendError("503 from upstream")
        return call("echo", {"text": "a"})

    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, tools=[echo_tool()]
    ) as agent:
        with pytest.raises(TurnError, match="503 from upstream") as info:
            await agent.send("c", "go")
    assert info.value.code == "model_error"
    history = await stored(storage, "c")
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.TOOL]
    assert_valid_history(history)


async def test_cancel_mid_tool_records_a_result(autojump_clock: trio.testing.MockClock) -> None:
    """Cancelling a turn while a tool runs records an error result for that
    call (and the calls after it); the next turn works."""
    started = trio.Event()

    async def slow(arguments: dict[str, object]) -> str:
        started.set()
        await trio.sleep(1000)
        return "late"

    two_calls = ModelResponse(
        tool_calls=(
            call("slow", id="a").tool_calls[0],
            call("slow", id="b").tool_calls[0],
        )
    )
    storage = in_memory_storage()
    model = ScriptedModel(by_turn({"go": [two_calls, "never"], "next": ["ok"]}))
    tools = [NamedTool("slow", "Slow.", {"type": "object"}, slow)]
    async with open_chat_agent(
        model=model, storage=storage, tools=tools, tool_timeout=5000
    ) as agent:
        async with trio.open_nursery() as nursery:
            outcome: list[BaseException] = []

            async def run() -> None:
                try:
                    await agent.send("c", "go")
                except TurnError as exc:
                    outcome.append(exc)

            nursery.start_soon(run)
            await started.wait()
            assert await agent.cancel("c") == 1
        assert isinstance(outcome[0], TurnError)
        assert outcome[0].code == "cancelled"
        history = await stored(storage, "c")
        assert_valid_history(history)
        assert [m.tool_call_id for m in history if m.role is Role.TOOL] == ["a", "b"]
        assert all("stopped" in m.content for m in history if m.role is Role.TOOL)
        assert (await agent.send("c", "next")).text == "ok"
    assert await agent.cancel("c") == 0


async def test_idempotent_retry_returns_first_result() -> None:
    """The same key returns the first result and adds nothing, also after the
    agent is reopened on the same storage."""
    storage = in_memory_storage()
    counter = 0

    def respond(request: ModelRequest) -> ModelResponse:
        nonlocal counter
        counter += 1
        return ModelResponse(text=f"answer {counter}")

    model = ScriptedModel(respond)
    async with open_chat_agent(model=model, storage=storage) as agent:
        first = await agent.send("c", "q", idempotency_key="k1")
        again = await agent.send("c", "q", idempotency_key="k1")
        other = await agent.send("c", "q2", idempotency_key="k2")
    assert again == first
    assert other.text == "answer 2"
    async with open_chat_agent(model=model, storage=storage) as agent:
        after_restart = await agent.send("c", "q", idempotency_key="k1")
        assert agent.stats.turns_replayed == 1
    assert after_restart.text == "answer 1"
    assert [m.seq for m in after_restart.messages] == [1, 2]
    assert counter == 2
    assert len(await stored(storage, "c")) == 4


async def test_unfinished_keyed_turn_is_resumed_not_duplicated() -> None:
    """A keyed turn that failed (model error) is retried without a second user
    message: the retry resumes it."""
    from agentik import ModelBackendError

    fail = True

    def respond(request: ModelRequest) -> ModelResponse:
        if fail:
            raise ModelBackendError("down")
        return ModelResponse(text="back")

    storage = in_memory_storage()
    async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:
        with pytest.raises(TurnError):
            await agent.send("c", "q", idempotency_key="k")
        fail = False
        result = await agent.send("c", "q", idempotency_key="k")
    assert result.text == "back"
    assert [m.role for m in result.messages] == [Role.USER, Role.ASSISTANT]
    history = await stored(storage, "c")
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT]


async def test_overload_past_max_queued_turns(autojump_clock: trio.testing.MockClock) -> None:
    """Past the bound, send raises OverloadedError at once; queued turns all run."""
    storage = in_memory_storage()
    model = ScriptedModel(lambda r: ModelResponse(text="ok"), latency=1.0)
    async with open_chat_agent(
        model=model, storage=storage, turn_queue_size=1, max_queued_turns=3
    ) as agent:
        done: list[str] = []
        refused: list[OverloadedError] = []

        async def one(i: int) -> None:
            try:
                await agent.send("c", f"t{i}")
                done.append(f"t{i}")
            except OverloadedError as exc:
                refused.append(exc)

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(one, i)
                await trio.testing.wait_all_tasks_blocked()
    # One running, three waiting; the other six refused.
    assert len(done) == 4
    assert len(refused) == 6
    assert "max_queued_turns=3" in str(refused[0])
    assert agent.stats.overloaded == 6
    assert len(await stored(storage, "c")) == 8


async def test_turns_of_one_conversation_run_in_order() -> None:
    """Concurrent sends to one conversation are served one at a time, in order."""
    storage = in_memory_storage()
    model = ScriptedModel(lambda r: ModelResponse(text=r.messages[-1].content.upper()))
    async with open_chat_agent(model=model, storage=storage, max_queued_turns=100) as agent:
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(agent.send, "c", f"m{i}")
                await trio.testing.wait_all_tasks_blocked()
    history = await stored(storage, "c")
    users = [m.content for m in history if m.role is Role.USER]
    assert users == [f"m{i}" for i in range(20)]
    for i in range(20):
        assert history[2 * i + 1].content == f"M{i}"


async def test_stream_yields_events_in_order() -> None:
    """A streamed turn yields text deltas, tool start/finish, then TurnFinished."""
    storage = in_memory_storage()
    model = ScriptedModel(by_turn({"go": [call("echo", {"text": "z"}), "all done"]}))
    async with open_chat_agent(model=model, storage=storage, tools=[echo_tool()]) as agent:
        async with agent.stream("c", "go") as events:
            seen = [e async for e in events]
    kinds = [type(e).__name__ for e in seen]
    assert kinds.index("ToolCallStarted") < kinds.index("ToolCallFinished")
    assert isinstance(seen[-1], TurnFinished)
    finished = [e for e in seen if isinstance(e, ToolCallFinished)][0]
    assert finished.content == "echo:z" and not finished.is_error
    started = [e for e in seen if isinstance(e, ToolCallStarted)][0]
    assert started.call.name == "echo"
    text = "".join(e.text for e in seen if isinstance(e, TextDelta))
    assert text == "all done"
    assert seen[-1].result.text == "all done"


async def test_stream_reports_failure_last() -> None:
    """A failing streamed turn ends with TurnFailed carrying the code."""
    from agentik import ModelBackendError

    def respond(request: ModelRequest) -> ModelResponse:
        raise ModelBackendError("nope")

    async with (
        open_chat_agent(model=ScriptedModel(respond), storage=in_memory_storage()) as agent,
        agent.stream("c", "go") as events,
    ):
        seen = [e async for e in events]
    assert isinstance(seen[-1], TurnFailed)
    assert seen[-1].code == "model_error"


async def test_leaving_a_stream_early_does_not_stop_the_turn() -> None:
    """A reader that leaves (client disconnect) leaves a complete, valid turn."""
    storage = in_memory_storage()
    model = ScriptedModel(by_turn({"go": [call("echo", {"text": "q"}), "end"]}))
    async with open_chat_agent(model=model, storage=storage, tools=[echo_tool()]) as agent:
        async with agent.stream("c", "go") as events:
            async for _ in events:
                break
    history = await stored(storage, "c")
    assert [m.role for m in history][-1] is Role.ASSISTANT
    assert history[-1].content == "end"
    assert_valid_history(history)


async def test_bad_input_is_refused_before_anything_runs() -> None:
    """Empty ids and texts raise ValueError and store nothing."""
    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(lambda r: ModelResponse(text="x")), storage=storage
    ) as agent:
        with pytest.raises(ValueError, match="conversation_id must be a non-empty string"):
            await agent.send("", "hi")
        with pytest.raises(ValueError, match="text must be a non-empty string"):
            await agent.send("c", "")
        with pytest.raises(ValueError, match="at most 256"):
            await agent.send("x" * 257, "hi")
    assert await storage.message_store.list_conversations() == []


async def test_idle_conversation_retires_and_respawns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """After idle_timeout the task exits; the next turn reloads from storage."""
    storage = in_memory_storage()
    model = ScriptedModel(lambda r: ModelResponse(text=str(len(r.messages))))
    async with open_chat_agent(model=model, storage=storage, idle_timeout=30) as agent:
        assert (await agent.send("c", "a")).text == "2"
        assert agent.live_conversations == 1
        await trio.sleep(29)
        assert agent.live_conversations == 1
        await trio.sleep(10)  # idle 30 s, noticed within a quarter of that
        assert agent.live_conversations == 0
        # system + 2 old + new user = 4 messages: the history came back.
        assert (await agent.send("c", "b")).text == "4"


async def test_a_crashing_turn_fails_alone() -> None:
    """A bug-type exception (here from a prompt contributor) fails that turn
    with code internal_error; other conversations and later turns go on."""

    class Fragile:
        def render(self, context: object) -> str | None:
            if getattr(context, "conversation_id", "") == "bad":
                raise KeyError("boom")
            return "base"

    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(lambda r: ModelResponse(text="ok")),
        storage=storage,
        contributors=[Fragile()],
    ) as agent:
        with pytest.raises(TurnError, match="KeyError") as info:
            await agent.send("bad", "hi")
        assert info.value.code == "internal_error"
        assert (await agent.send("good", "hi")).text == "ok"
    assert_valid_history(await stored(storage, "bad"))


async def test_live_conversations_are_bounded(autojump_clock: trio.testing.MockClock) -> None:
    """Past max_conversations live tasks, a turn for a new conversation is
    refused at once; existing ones go on, and room comes back as they retire."""
    storage = in_memory_storage()
    model = ScriptedModel(lambda r: ModelResponse(text="ok"))
    async with open_chat_agent(
        model=model, storage=storage, max_conversations=3, idle_timeout=10
    ) as agent:
        for i in range(3):
            await agent.send(f"c{i}", "hi")
        with pytest.raises(OverloadedError, match="max_conversations=3"):
            await agent.send("c3", "hi")
        assert (await agent.send("c0", "again")).text == "ok"
        await trio.sleep(20)  # all three idle: retired
        assert (await agent.send("c3", "hi")).text == "ok"
    assert await storage.message_store.list_conversations() == ["c0", "c1", "c2", "c3"]


async def test_an_error_in_the_agent_block_comes_out_as_itself() -> None:
    """No ExceptionGroup wrapping: the body's error is raised as it was."""
    with pytest.raises(KeyError, match="mine"):  # noqa: PT012
        async with open_chat_agent(
            model=ScriptedModel(lambda r: ModelResponse(text="ok")), storage=in_memory_storage()
        ) as agent:
            await agent.send("c", "hi")
            raise KeyError("mine")
