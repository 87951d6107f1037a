"""Closing an agent with a deadline (issue 30, item 3): ``ChatAgent.close(grace=)``
and ``open_chat_agent(close_grace=)``.

No new request is taken once closing; turns under way get the grace, then
are interrupted: their calls are answered ``interrupted: …``, nothing marks
them failed, and the next start resumes them. Requests still queued then are
answered without running. A request whose caller left before it started is
never started, closing or not. Timing on trio's MockClock."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from agentik import (
    AgentikError,
    ContextPolicy,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    TurnError,
    in_memory_storage,
    open_chat_agent,
)
from agentik.agent._optional_work import OPTIONAL_WORK_GRACE
from agentik.agent._turn_events import INTERRUPTED
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle
from tests.agent.helpers import assert_valid_history, call, stored
from tests.reliability.helpers import Gate, GatedMessageStore, gated

SEEN: list[str] = []


def respond(request: ModelRequest) -> ModelResponse:
    """``wait N``: a call of ``wait`` for N seconds, then ``done``."""
    last = request.messages[-1]
    if last.role.value == "user":
        SEEN.append(last.content)
        if last.content.startswith("wait"):
            return call("wait", {"seconds": int(last.content.split()[1])}, id="w1")
        return ModelResponse(text="hi")
    return ModelResponse(text="done")


async def _wait(arguments: dict[str, object]) -> str:
    seconds = arguments["seconds"]
    assert isinstance(seconds, int)
    await trio.sleep(seconds)
    return "waited"


WAIT = NamedTool("wait", "Wait.", {"type": "object"}, _wait)


def agent(storage: StorageBundle, **changes: object):  # type: ignore[no-untyped-def]
    return open_chat_agent(
        model=ScriptedModel(respond), storage=storage, tools=[WAIT], builtin_tools=False, **changes
    )


async def outcome_of(coroutine: object, into: list[str]) -> None:
    try:
        result = await coroutine  # type: ignore[misc]
        into.append(result.text)
    except TurnError as error:
        into.append(error.code)


@pytest.fixture(autouse=True)
def _seen() -> None:
    SEEN.clear()


async def test_a_turn_past_the_grace_is_interrupted_and_resumed_at_the_next_start(
    autojump_clock: trio.testing.MockClock,
) -> None:
    storage = in_memory_storage()
    outcomes: list[str] = []
    async with agent(storage, close_grace=3) as a:
        a_turn = a.send("c", "wait 1000")
        a._nursery.start_soon(outcome_of, a_turn, outcomes)
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
    assert trio.current_time() - began == 3, "the grace, no more, no less"
    assert outcomes == ["interrupted"]
    history = await stored(storage, "c")
    assert [m.content for m in history] == ["wait 1000", "", INTERRUPTED]
    async with agent(storage) as a:  # the next start resumes it
        with trio.fail_after(10):
            while len(await stored(storage, "c")) < 4:  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert a.stats.turns_resumed == 1
    history = await stored(storage, "c")
    assert [m.content for m in history] == ["wait 1000", "", INTERRUPTED, "done"]
    assert_valid_history(history)


async def test_a_turn_cut_before_its_message_is_stored_is_told_to_send_it_again(
    nursery: trio.Nursery,
) -> None:
    """Past the grace while the conversation still loads, the turn has stored
    nothing: nothing resumes it, so its caller hears ``unavailable`` (send it
    again), not ``interrupted`` (it resumes), which would lose the message.
    Found by tests/agent/test_cut_short_fuzz.py (a close at time 0, SQLite)."""
    bundle = in_memory_storage()
    await bundle.message_store.append("c", Message(Role.USER, "hello"))
    await bundle.message_store.append("c", Message(Role.ASSISTANT, "hi"))
    gate = Gate()
    gate.arm("load")
    held = GatedMessageStore(bundle.message_store, gate, nursery)
    outcomes: list[str] = []
    async with agent(gated(bundle, held), resume_interrupted=False) as a:
        a._nursery.start_soon(outcome_of, a.send("c", "wait 1"), outcomes)
        await gate.reached.wait()
        a.close(grace=0)
    assert outcomes == ["unavailable"]
    assert [m.content for m in await stored(bundle, "c")] == ["hello", "hi"]


async def test_queued_turns_run_within_the_grace_and_not_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A turn queued behind a short one runs while the grace lasts; one queued
    behind a turn that outlasts it never runs (``unavailable``)."""
    storage = in_memory_storage()
    outcomes: dict[str, list[str]] = {"a": [], "b": []}
    async with agent(storage, turn_queue_size=4) as a:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outcome_of, a.send("a", "wait 2"), outcomes["a"])
            nursery.start_soon(outcome_of, a.send("b", "wait 1000"), outcomes["b"])
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(outcome_of, a.send("a", "next"), outcomes["a"])
            nursery.start_soon(outcome_of, a.send("b", "next"), outcomes["b"])
            await trio.testing.wait_all_tasks_blocked()
            a.close(grace=10)
            with pytest.raises(AgentikError, match=r"^the agent is closed$"):
                await a.send("a", "too late")
    assert outcomes == {"a": ["done", "hi"], "b": ["interrupted", "unavailable"]}
    assert sorted(SEEN) == ["next", "wait 1000", "wait 2"]


async def test_a_second_close_brings_the_deadline_nearer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    outcomes: list[str] = []
    async with agent(in_memory_storage()) as a:
        a._nursery.start_soon(outcome_of, a.send("c", "wait 1000"), outcomes)
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
        a.close(grace=100)
        a.close(grace=500)  # later: changes nothing
        await trio.sleep(5)
        assert outcomes == []
        a.close(grace=0)  # a second signal
        await trio.testing.wait_all_tasks_blocked()
        assert outcomes == ["interrupted"]
        assert trio.current_time() - began == 5


async def test_without_a_grace_the_end_of_the_block_waits_for_the_turns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    outcomes: list[str] = []
    async with agent(in_memory_storage()) as a:
        a._nursery.start_soon(outcome_of, a.send("c", "wait 50"), outcomes)
        await trio.testing.wait_all_tasks_blocked()
        began = trio.current_time()
    assert trio.current_time() - began == 50
    assert outcomes == ["done"]


async def test_bad_graces_are_refused() -> None:
    with pytest.raises(ValueError, match=r"^close_grace must be a number of seconds >= 0"):
        async with agent(in_memory_storage(), close_grace=-1):
            pass
    async with agent(in_memory_storage()) as a:
        with pytest.raises(ValueError, match=r"^grace must be a number of seconds >= 0"):
            a.close(grace=float("nan"))


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_queued_turn_whose_caller_left_never_starts(
    streamed: bool, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Its caller gave up (a client that disconnected) while it waited
    behind another turn: it is dropped, the model never sees it."""
    caplog.set_level(logging.INFO, logger="agentik")
    outcomes: list[str] = []
    storage = in_memory_storage()
    async with agent(storage) as a:
        a._nursery.start_soon(outcome_of, a.send("c", "wait 10"), outcomes)
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(1):
            if streamed:
                async with a.stream("c", "gone") as events:
                    async for _ in events:
                        pass
            else:
                await a.send("c", "gone")
        assert (await a.send("c", "after")).text == "hi"
    assert outcomes == ["done"]
    assert SEEN == ["wait 10", "after"]
    assert "gone" not in [m.content for m in await stored(storage, "c")]
    assert any("whose caller left was dropped" in r.getMessage() for r in caplog.records)


async def test_a_summary_under_way_gets_a_short_grace_at_close(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent closes while a summary runs: it gets ``OPTIONAL_WORK_GRACE``
    seconds, is then cut short, stores nothing and is logged once."""
    caplog.set_level(logging.INFO, logger="agentik")
    storage = in_memory_storage()

    async def slow(request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            await trio.sleep(1000)
        return ModelResponse(text="ok")

    async with open_chat_agent(
        model=ScriptedModel(slow), storage=storage, context=ContextPolicy(max_tokens=300)
    ) as a:
        for i in range(12):
            await a.send("c", f"question {i} " * 5)
        began = trio.current_time()
    assert trio.current_time() - began == OPTIONAL_WORK_GRACE
    assert await storage.message_store.latest_summary("c") is None
    cut = [r for r in caplog.records if "summary under way was cut short" in r.getMessage()]
    assert len(cut) == 1
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
