"""Tool faults: a tool that raises, one that hangs, one that returns 10 MB,
all in one turn, while other conversations run at the same time.

The clock is trio's MockClock, advanced by hand once the other
conversations are done, so "unaffected" is exact: they finish with no time
passing at all while the hanging tool waits for its timeout. The clock also
jumps by itself after 10 real seconds of idleness, so a regression (the others
stuck behind the hang) fails the time assertions instead of hanging the suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from agentik import ModelRequest, ModelResponse, NamedTool, Role, ToolCall
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from tests.reliability.helpers import BACKENDS, Backend, check_history, history

TIMEOUT = 5.0
CAP = 64 * 1024
OTHERS = 5
BIG = 10 * 1024 * 1024


def respond(request: ModelRequest) -> ModelResponse:
    messages = request.messages
    user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
    text = messages[user_at].content
    if messages[-1].role is Role.TOOL:
        results = [m.content for m in messages[user_at:] if m.role is Role.TOOL]
        return ModelResponse(text=f"{text}: saw {len(results)} results")
    names = ["boom", "big", "hang"] if text == "faults" else ["echo"]
    calls = tuple(ToolCall(f"{text}-{name}", name, "{}") for name in names)
    return ModelResponse(tool_calls=calls)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_tool_faults_fail_alone(
    backend: str, tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """Raise, hang and a 10 MB output become error (or capped) results and the
    turn goes on; meanwhile other conversations finish with no delay."""
    mock_clock.autojump_threshold = 10.0  # a regression guard only, see module docstring
    hanging = trio.Event()

    async def boom(arguments: dict[str, object]) -> str:
        raise RuntimeError("kaput")

    async def big(arguments: dict[str, object]) -> str:
        return "x" * BIG

    async def hang(arguments: dict[str, object]) -> str:
        hanging.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def echo(arguments: dict[str, object]) -> str:
        return "echoed"

    tools = [
        NamedTool(name, name, {"type": "object"}, handler)
        for name, handler in [("boom", boom), ("big", big), ("hang", hang), ("echo", echo)]
    ]
    store = Backend(backend, tmp_path / "db")
    finished: dict[str, float] = {}
    async with store.open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(respond),
            storage=storage,
            tools=tools,
            tool_timeout=TIMEOUT,
            max_tool_output=CAP,
            builtin_tools=False,
        ) as agent:
            start = trio.current_time()

            async def turn(conversation: str, text: str) -> None:
                result = await agent.send(conversation, text)
                assert result.text == f"{text}: saw {3 if text == 'faults' else 1} results"
                finished[conversation] = trio.current_time() - start

            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn, "bad", "faults")
                await hanging.wait()
                async with trio.open_nursery() as others:
                    for i in range(OTHERS):
                        others.start_soon(turn, f"other-{i}", f"hello {i}")
                assert all(finished[f"other-{i}"] == 0 for i in range(OTHERS)), finished
                assert "bad" not in finished
                mock_clock.jump(TIMEOUT)
            assert finished["bad"] == pytest.approx(TIMEOUT)
        bad = await history(storage, "bad")
        for i in range(OTHERS):
            check_history(await history(storage, f"other-{i}"), once=(f"hello {i}",))
    check_history(bad, once=("faults",))
    results = {m.tool_call_id: m.content for m in bad if m.role is Role.TOOL}
    assert results["faults-boom"] == "error: tool 'boom' failed: RuntimeError: kaput"
    assert results["faults-hang"] == f"error: tool 'hang' timed out after {TIMEOUT:g} s"
    capped = results["faults-big"]
    assert capped.startswith("x" * CAP)
    assert len(capped) < CAP + 100
    assert f"{BIG - CAP} more characters" in capped


@pytest.mark.parametrize("backend", BACKENDS)
async def test_many_big_outputs_stay_capped(backend: str, tmp_path: Path) -> None:
    """Twenty conversations each get a 10 MB tool output at once: every stored
    result is capped, so the store holds about 20 x the cap, not 200 MB."""

    async def big(arguments: dict[str, object]) -> str:
        return "y" * BIG

    def answer(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return ModelResponse(text=f"{len(last.content)}")
        return ModelResponse(tool_calls=(ToolCall(f"call-{last.content}", "big", "{}"),))

    store = Backend(backend, tmp_path / "db")
    async with store.open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(answer),
            storage=storage,
            tools=[NamedTool("big", "Big.", {"type": "object"}, big)],
            max_tool_output=CAP,
            builtin_tools=False,
        ) as agent:
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(agent.send, f"c{i}", f"t{i}")
        total = 0
        for i in range(20):
            messages = await history(storage, f"c{i}")
            check_history(messages, once=(f"t{i}",))
            total += sum(len(m.content) for m in messages)
    assert total < 20 * (CAP + 200)
