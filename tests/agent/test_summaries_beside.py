"""Summaries and reflections run beside the conversation, never in a turn's
path (issue 30, item 2).

Every test runs on trio's MockClock (``autojump_clock``): a turn against an
instant scripted model takes no mock time at all, so any wait for a
summarizer that sleeps 5 s or hangs shows as latency. Turns use the
in-memory store (a thread would let the clock jump while it works).
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from agentik import (
    ChatAgent,
    ContextPolicy,
    ModelBackendError,
    ModelRequest,
    ModelResponse,
    TurnResult,
    in_memory_storage,
    open_chat_agent,
)
from agentik.agent._compaction import SUMMARY_HEADER
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle, Summary
from tests.agent.helpers import assert_valid_history, stored
from tests.agent.test_long_conversations import check_request

WORDS = 30
TURNS = 60
BUDGET = 1000


def question(i: int) -> str:
    """A user message of ``WORDS`` words."""
    return " ".join(f"w{i}x{j}" for j in range(WORDS))


class Summarizer:
    """A scripted model: turns answer at once; a summary request sleeps
    ``delay`` seconds (None: hangs until ``fixed``), raises, or answers."""

    def __init__(self, mode: str, delay: float | None = 5.0) -> None:
        self.mode = mode
        self.delay = delay
        self.requests: list[ModelRequest] = []
        self.summaries_asked = 0
        self.fixed = False

    async def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if request.purpose == "reflection":
            await trio.sleep(5)
            return ModelResponse(text="a lesson")
        if request.purpose != "summary":
            return ModelResponse(text="ok")
        self.summaries_asked += 1
        if not self.fixed:
            if self.mode == "raises":
                raise ModelBackendError("summarizer down")
            if self.mode == "hangs":
                await trio.sleep_forever()
            if self.mode == "slow":
                assert self.delay is not None
                await trio.sleep(self.delay)
        return ModelResponse(text=f"summary number {self.summaries_asked}")


STUCK = 600.0
"""Mock seconds after which a turn counts as stuck (behind a summary)."""


async def send(agent: ChatAgent, text: str) -> TurnResult:
    with trio.fail_after(STUCK):
        return await agent.send("c", text)


async def timed_turns(agent: ChatAgent, count: int, start: int = 0) -> list[float]:
    """Run ``count`` turns one after another; the mock time each took."""
    latencies = []
    for i in range(start, start + count):
        began = trio.current_time()
        result = await send(agent, question(i))
        assert result.text == "ok"
        latencies.append(trio.current_time() - began)
    return latencies


async def summaries_of(storage: StorageBundle) -> list[Summary]:
    store = storage.message_store
    return await store.list_summaries("c", after_seq=0, limit=1000)  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("mode", ["slow", "hangs"])
async def test_a_slow_or_hung_summarizer_adds_nothing_to_any_turn(
    mode: str, autojump_clock: trio.testing.MockClock
) -> None:
    """60 turns of 30 words under a 1,000-token budget: every turn takes no
    time at all, whether the summarizer takes 5 s or never answers, and
    the conversation never stops."""
    storage = in_memory_storage()
    model = Summarizer(mode)
    policy = ContextPolicy(max_tokens=BUDGET)
    async with open_chat_agent(
        model=ScriptedModel(model), storage=storage, context=policy, close_grace=1
    ) as agent:
        latencies = await timed_turns(agent, TURNS)
        assert latencies == [0.0] * TURNS, "a turn waited for a summary"
        assert model.summaries_asked >= 1, "no summary was ever started"
        if mode == "hangs":
            assert model.summaries_asked == 1, "at most one summary at a time"
            assert agent.stats.summaries == 0
    history = await stored(storage, "c")
    assert len(history) == 2 * TURNS
    assert_valid_history(history)
    for request in model.requests:
        check_request(request, BUDGET)


async def test_summaries_land_between_turns_and_chain(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A summarizer that takes 5 s: the turns that follow carry less of the
    older history until it lands (each still within budget), then carry the
    summary; and the next summary folds the previous one in."""
    storage = in_memory_storage()
    model = Summarizer("slow")
    async with open_chat_agent(
        model=ScriptedModel(model), storage=storage, context=ContextPolicy(max_tokens=BUDGET)
    ) as agent:
        for i in range(TURNS):
            assert (await send(agent, question(i))).text == "ok"
            await trio.sleep(1)  # a user reading the answer: summaries land meanwhile
        assert agent.stats.summaries >= 3
        assert agent.stats.summaries_failed == 0
    chain = await summaries_of(storage)
    assert len(chain) == agent.stats.summaries
    assert [s.through_seq for s in chain] == sorted({s.through_seq for s in chain})
    asked = [r for r in model.requests if r.purpose == "summary"]
    # Every summary after the first folds in the one before it.
    for request, previous in zip(asked[1:], chain, strict=False):
        assert previous.text in request.messages[1].content
    last_turn = [r for r in model.requests if r.purpose == "turn"][-1]
    assert last_turn.messages[1].content.startswith(SUMMARY_HEADER)
    assert_valid_history(await stored(storage, "c"))


async def test_after_a_hung_summarizer_is_fixed_summaries_resume_and_chain(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The hung summary times out (``summary_timeout``), is logged once and
    changes nothing; once the summarizer answers again, summaries resume and
    chain."""
    storage = in_memory_storage()
    model = Summarizer("hangs")
    policy = ContextPolicy(max_tokens=BUDGET, summary_timeout=30)
    caplog.set_level(logging.WARNING, logger="agentik")
    async with open_chat_agent(
        model=ScriptedModel(model), storage=storage, context=policy
    ) as agent:
        assert await timed_turns(agent, 20) == [0.0] * 20
        assert model.summaries_asked == 1
        await trio.sleep(31)  # the hung summary times out
        assert agent.stats.summaries_failed == 1
        failures = [r for r in caplog.records if "summary step failed" in r.getMessage()]
        assert len(failures) == 1, "a failed summary is logged once"
        assert "no summary within 30 s" in failures[0].getMessage()
        assert await summaries_of(storage) == []
        model.fixed = True
        for i in range(20, TURNS):
            await send(agent, question(i))
            await trio.lowlevel.checkpoint()
        assert agent.stats.summaries >= 2
    chain = await summaries_of(storage)
    assert len(chain) >= 2
    assert chain[0].text in next(
        r.messages[1].content
        for r in model.requests
        if r.purpose == "summary" and chain[0].text in r.messages[1].content
    )
    assert chain[0].through_seq < chain[1].through_seq
    history = await stored(storage, "c")
    assert len(history) == 2 * TURNS
    assert_valid_history(history)
    for request in model.requests:
        check_request(request, BUDGET)


async def test_a_failing_summarizer_changes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Summaries that raise: every turn still answers at once, each request
    is valid and within budget, history is whole, no summary is stored."""
    storage = in_memory_storage()
    model = Summarizer("raises")
    async with open_chat_agent(
        model=ScriptedModel(model), storage=storage, context=ContextPolicy(max_tokens=BUDGET)
    ) as agent:
        assert await timed_turns(agent, TURNS) == [0.0] * TURNS
        assert agent.stats.summaries == 0
        assert agent.stats.summaries_failed == model.summaries_asked >= 2
    assert await summaries_of(storage) == []
    history = await stored(storage, "c")
    assert [m.content for m in history[::2]] == [question(i) for i in range(TURNS)]
    assert_valid_history(history)
    for request in model.requests:
        check_request(request, BUDGET)


async def test_a_delete_stops_the_summary_under_way(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A conversation deleted while its summary runs: the summary is
    cancelled first, so none is stored after the delete, and the
    conversation starts again at seq 1."""
    storage = in_memory_storage()
    model = Summarizer("slow")
    async with open_chat_agent(
        model=ScriptedModel(model), storage=storage, context=ContextPolicy(max_tokens=BUDGET)
    ) as agent:
        i = 0
        while model.summaries_asked == 0:
            await send(agent, question(i))
            i += 1
        assert await agent.delete_conversation("c")
        await trio.sleep(10)  # long past the summarizer's 5 s
        assert await storage.message_store.latest_summary("c") is None
        result = await agent.send("c", "again")
        assert [m.seq for m in result.messages] == [1, 2]
    assert await summaries_of(storage) == []


async def test_a_slow_reflection_adds_nothing_to_the_next_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``reflection=True`` with a model that takes 5 s to reflect: turns take
    no time, and the reflections are stored beside them."""
    storage = in_memory_storage()
    model = Summarizer("slow")
    async with open_chat_agent(
        model=ScriptedModel(model), storage=storage, reflection=True
    ) as agent:
        latencies = await timed_turns(agent, 5)
        assert latencies == [0.0] * 5
        await trio.sleep(6)
        assert await storage.reflection_store.count() >= 1
        assert agent.stats.reflections_failed == 0
