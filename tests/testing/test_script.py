"""``agentik.testing``: the scripted model builder and the history assertions,
through real turns of real agents (the plugin's own fixtures where they fit)."""

from __future__ import annotations

import json

import pytest
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, ModelRequest, NamedTool, Role, ToolCall, TurnError, tool
from agentik.agent import ChatAgent, open_chat_agent
from agentik.storage import in_memory_storage
from agentik.testing import (
    Script,
    UnexpectedModelRequest,
    assert_tool_called,
    assert_toolset_active,
    assert_toolset_inactive,
    assert_valid_history,
    history,
    tool_result,
)
from agentik.toolsets import ToolsetContribution


@tool
async def echo(text: str) -> str:
    """Repeat the text."""
    return f"echo: {text}"


async def _weather(arguments: dict[str, object]) -> str:
    return f"sunny in {arguments['city']}"


WEATHER = ToolsetContribution(
    "weather",
    "Forecasts.",
    [
        NamedTool(
            "weather_today",
            "Today's weather.",
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            _weather,
        )
    ],
)


@pytest.fixture
def agentik_agent_options() -> dict[str, object]:
    return {"tools": [echo], "toolsets": [WEATHER], "activation_timeout": 60.0}


@pytest.fixture(params=["memory", "sqlite"])
def agentik_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_a_scripted_turn_reads_like_the_conversation(
    agentik_agent: ChatAgent, agentik_script: Script
) -> None:
    """when_user_says(...).call(...).answer(...) plays as written, on both backends."""
    agentik_script.when_user_says("weather in Paris?").call(
        "weather_today", {"city": "Paris"}
    ).answer("Sunny.")
    result = await agentik_agent.send("c", "weather in Paris?")
    assert result.text == "Sunny."
    messages = await history(agentik_agent, "c")
    assert_valid_history(messages)
    call = assert_tool_called(messages, "weather_today", {"city": "Paris"})
    assert tool_result(messages, call) == "sunny in Paris"
    assert_toolset_active(agentik_agent, "c", "weather")
    agentik_script.verify(all_used=True)


# Memory only: while SQLite's writer thread works, trio sees every task
# blocked and the autojump clock jumps (docs/testing.md).
@pytest.mark.parametrize("agentik_backend", ["memory"])
async def test_toolsets_expire_on_the_mock_clock(
    agentik_agent: ChatAgent, agentik_script: Script, autojump_clock: trio.testing.MockClock
) -> None:
    """The fixtures read no wall clock: a toolset expires after activation_timeout of mock time."""
    agentik_script.when_user_says("go").call("weather_today", {"city": "Oslo"}).answer("ok")
    await agentik_agent.send("c", "go")
    assert_toolset_active(agentik_agent, "c", "weather")
    await trio.sleep(61)
    assert_toolset_inactive(agentik_agent, "c", "weather")


async def test_an_unexpected_request_fails_the_turn_and_is_kept() -> None:
    """An unscripted user text, and a step past the script, are unexpected:
    the turn fails and verify() names both."""
    script = Script()
    script.when_user_says("one step").call("echo", {"text": "x"})
    async with open_chat_agent(
        model=script.model(), storage=in_memory_storage(), tools=[echo]
    ) as agent:
        with pytest.raises(TurnError):
            await agent.send("c", "never scripted")
        with pytest.raises(TurnError):
            await agent.send("d", "one step")
        assert_valid_history(await history(agent, "d"))
    assert script.unexpected == [
        "unexpected model request: nothing is scripted for the user saying 'never scripted'",
        "unexpected model request: step 2 for the user saying 'one step', but the script has 1",
    ]
    with pytest.raises(AssertionError, match=r"^unexpected model request: nothing is scripted"):
        script.verify()


def test_verify_all_used_names_the_unplayed_turns() -> None:
    script = Script()
    script.when_user_says("hi").answer("hello")
    script.when_asked_for("summary").answer("a summary")
    script.verify()
    with pytest.raises(
        AssertionError,
        match=r"^never used: the script for user says 'hi'; "
        r"never used: the script for a summary request$",
    ):
        script.verify(all_used=True)


def test_purposes_are_matched_by_purpose() -> None:
    script = Script()
    script.when_asked_for("reflection").answer("a lesson")
    system = Message(Role.SYSTEM, "s")
    answer = script.respond(ModelRequest([system], purpose="reflection"))
    assert answer.text == "a lesson"
    with pytest.raises(UnexpectedModelRequest, match=r"nothing is scripted for a summary request"):
        script.respond(ModelRequest([system], purpose="summary"))


def test_bad_scripts_are_refused() -> None:
    script = Script()
    turn = script.when_user_says("hi")
    turn.answer("hello")
    with pytest.raises(ValueError, match=r"^the script for user says 'hi' already ends"):
        turn.answer("again")
    with pytest.raises(ValueError, match=r"^the user text 'hi' is scripted already$"):
        script.when_user_says("hi")
    with pytest.raises(ValueError, match=r"^purpose must be 'summary' or 'reflection'"):
        script.when_asked_for("turn")


def test_assertions_say_what_was_there() -> None:
    messages = [
        Message(Role.USER, "u", seq=1),
        Message(Role.ASSISTANT, "", (ToolCall("a", "echo", '{"text": "x"}'),), seq=2),
        Message(Role.TOOL, "echo: x", tool_call_id="a", seq=3),
    ]
    assert_valid_history(messages)
    with pytest.raises(AssertionError, match=r"^tool 'other' was not called; calls: \['echo'\]$"):
        assert_tool_called(messages, "other")
    with pytest.raises(AssertionError, match=r"^tool 'echo' was not called with \{'text': 'y'\}"):
        assert_tool_called(messages, "echo", {"text": "y"})
    with pytest.raises(AssertionError, match=r"^calls without results: \[.a.\] \(for a"):
        assert_valid_history(messages[:2])
    with pytest.raises(AssertionError, match=r"^the call 'a' of tool 'echo' has no stored result$"):
        assert_tool_called(messages[:2], "echo")
    with pytest.raises(AssertionError, match=r"^seqs are not 1, 2, 3 …: \[1, 3\]$"):
        assert_valid_history([messages[0], messages[2]])


# A conversation of turns, each some rounds of echo calls (one or several at
# once) and then an answer: the script plays it exactly, and nothing else.
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_ROUND = st.lists(_TEXT, min_size=1, max_size=3)
_TURN = st.tuples(st.lists(_ROUND, max_size=3), _TEXT)


@settings(max_examples=25, deadline=None)
@given(turns=st.lists(_TURN, min_size=1, max_size=4), extra=st.booleans())
async def test_any_script_plays_exactly(
    turns: list[tuple[list[list[str]], str]], extra: bool
) -> None:
    """Every scripted call runs with its arguments and the answer is the
    scripted one; a turn nobody scripted is the one unexpected request."""
    script = Script()
    for number, (rounds, answer) in enumerate(turns):
        turn = script.when_user_says(f"turn {number}")
        for texts in rounds:
            if len(texts) == 1:
                turn.call("echo", {"text": texts[0]})
            else:
                turn.calls(*[("echo", {"text": t}, None) for t in texts])
        turn.answer(answer)
    async with open_chat_agent(
        model=script.model(), storage=in_memory_storage(), tools=[echo]
    ) as agent:
        for number, (_, answer) in enumerate(turns):
            assert (await agent.send("c", f"turn {number}")).text == answer
        if extra:
            with pytest.raises(TurnError):
                await agent.send("c", "unscripted")
        messages = await history(agent, "c")
    assert_valid_history(messages)
    for rounds, _ in turns:
        for texts in rounds:
            for text in texts:
                call = assert_tool_called(messages, "echo", {"text": text})
                assert tool_result(messages, call) == f"echo: {text}"
    played = [json.loads(c.arguments)["text"] for m in messages for c in m.tool_calls]
    assert played == [t for rounds, _ in turns for texts in rounds for t in texts]
    assert len(script.unexpected) == int(extra)
    script.verify(all_used=True) if not extra else None
