"""Long conversations under a context policy, through real turns (issue 16).

Every model request, turn or summary, must fit the budget and be a valid
history: checked on random conversations (text, tool calls, parallel calls,
huge tool outputs, errors) under random budgets, on both backends. Summaries
that fail, answer nothing or are cut short change nothing; a conversation
holds only what its summary does not cover, and loads in time independent of
its length.
"""

from __future__ import annotations

import collections
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import (
    ContextPolicy,
    Message,
    ModelBackendError,
    ModelRequest,
    ModelResponse,
    Role,
    ToolCall,
    TurnError,
    in_memory_storage,
    open_chat_agent,
    open_sqlite_storage,
    tool,
)
from agentik.agent import _runtime
from agentik.agent._context import estimate_tokens, message_tokens
from agentik.models import ScriptedModel
from tests.agent.helpers import assert_valid_history, live_conversation, stored
from tests.reliability.helpers import BACKENDS, Backend


@tool
async def echo(text: str) -> str:
    """Echo the text back."""
    return text


@tool
async def big(size: int) -> str:
    """A large result."""
    return "x" * size


def request_tokens(request: ModelRequest) -> int:
    return sum(message_tokens(m, estimate_tokens) for m in request.messages)


def check_request(request: ModelRequest, budget: int) -> None:
    """The rules every request keeps under a context policy."""
    assert request_tokens(request) <= budget, (request_tokens(request), budget)
    messages = request.messages
    assert messages[0].role is Role.SYSTEM
    if request.purpose == "summary":
        return
    assert messages[1].role is Role.USER, "the first message after the system one"
    calls: set[str] = set()
    for message in messages[1:]:
        calls.update(c.id for c in message.tool_calls)
        if message.tool_call_id is not None:
            assert message.tool_call_id in calls, "a result without its call"
    answered = {m.tool_call_id for m in messages}
    assert calls <= answered, "a call without its result"


def summarizer_and(respond):  # type: ignore[no-untyped-def]
    """Answer summary requests with a short summary; others with ``respond``."""

    def model(request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            return ModelResponse(text=f"summary of {len(request.messages[1].content)} chars")
        return respond(request)

    return model


@st.composite
def scripts(draw: st.DrawFn) -> list[list[ModelResponse]]:
    """Per turn, the model's answers: rounds of calls (parallel, erroring, with
    huge outputs), then text."""
    turns = []
    for t in range(draw(st.integers(1, 12))):
        answers = []
        for r in range(draw(st.integers(0, 2))):
            width = draw(st.integers(1, 3))
            calls = []
            for c in range(width):
                kind = draw(st.sampled_from(["echo", "big", "missing", "bad"]))
                if kind == "echo":
                    args = json.dumps({"text": draw(st.text(max_size=60))})
                elif kind == "big":
                    args = json.dumps({"size": draw(st.integers(0, 4000))})
                elif kind == "missing":
                    args = "{}"
                else:
                    args = "{not json"
                name = "nope" if kind == "missing" else ("big" if kind == "big" else "echo")
                calls.append(ToolCall(f"t{t}r{r}c{c}", name, args))
            answers.append(ModelResponse(tool_calls=tuple(calls)))
        answers.append(ModelResponse(text=draw(st.text(max_size=200))))
        turns.append(answers)
    return turns


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts(), budget=st.integers(300, 6000), user_size=st.integers(1, 400))
def test_every_request_fits_and_is_valid(
    script: list[list[ModelResponse]], budget: int, user_size: int
) -> None:
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if request.purpose == "summary":
            return ModelResponse(text="what happened so far, briefly")
        messages = request.messages
        user = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        turn = int(messages[user].content.split(":")[0])
        step = sum(1 for m in messages[user:] if m.role is Role.ASSISTANT)
        answers = script[turn]
        return answers[min(step, len(answers) - 1)]

    async def main() -> None:
        storage = in_memory_storage()
        policy = ContextPolicy(max_tokens=budget)
        async with open_chat_agent(
            model=ScriptedModel(respond), storage=storage, tools=[echo, big], context=policy
        ) as agent:
            for turn in range(len(script)):
                text = f"{turn}:" + "u" * user_size
                try:
                    await agent.send("c", text)
                except TurnError as exc:
                    codes.append(exc.code)
        assert_valid_history(await stored(storage, "c"))

    codes: list[str] = []
    trio.run(main)
    assert set(codes) <= {"context_exhausted", "step_limit"}, codes
    assert requests
    for request in requests:
        check_request(request, budget)
    latest_users = [
        [m for m in r.messages if m.role is Role.USER][-1] for r in requests if r.purpose == "turn"
    ]
    assert all(":" in m.content for m in latest_users), "the latest user message is carried"


async def test_a_turn_larger_than_the_budget_fails_clearly() -> None:
    storage = in_memory_storage()
    model = ScriptedModel(lambda r: ModelResponse(text="ok"))
    async with open_chat_agent(
        model=model, storage=storage, context=ContextPolicy(max_tokens=100)
    ) as agent:
        await agent.send("c", "short")
        with pytest.raises(TurnError, match=r"needs \d+ tokens of context") as info:
            await agent.send("c", "x" * 2000)
        assert info.value.code == "context_exhausted"
        assert (await agent.send("c", "short again")).text == "ok"
    assert_valid_history(await stored(storage, "c"))


@pytest.mark.parametrize("backend", BACKENDS)
async def test_older_turns_are_summarized_and_the_cache_stays_small(
    backend: str, tmp_path: Path
) -> None:
    """Many turns under a small budget: summaries chain, history stays whole in
    the store, the live conversation holds a bounded tail, a keyed retry of a
    summarized turn replays it from the store, and a restart loads the tail."""
    store = Backend(backend, tmp_path / "db")
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"answer {len(requests)}")

    def record(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return summarizer_and(respond)(request)

    policy = ContextPolicy(max_tokens=400)
    async with store.open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(record), storage=storage, context=policy
        ) as agent:
            first = await agent.send("c", "first question " * 5, idempotency_key="k0")
            for i in range(1, 60):
                await agent.send("c", f"question {i} " * 5, idempotency_key=f"k{i}")
            assert agent.stats.summaries >= 3
            conversation = live_conversation(agent, "c")
            assert len(conversation.cache.history) < 30, "the cache holds only the tail"
            assert conversation.cache.first_seq > 60
            again = await agent.send("c", "first question " * 5, idempotency_key="k0")
            assert again.text == first.text, "a summarized turn replays from the store"
        history = await stored(storage, "c")
        assert len(history) == 120, "summaries never delete history"
        assert_valid_history(history)
    async with store.open() as storage:
        async with open_chat_agent(
            model=ScriptedModel(record), storage=storage, context=policy
        ) as agent:
            await agent.send("c", "after the restart")
            conversation = live_conversation(agent, "c")
            assert len(conversation.cache.history) < 30
    # A summary runs beside the turns (none waits for it), one at a time: the
    # first has landed by the time the second starts, and from then on every
    # turn's request carries a summary first.
    summaries = 0
    for request in requests:
        check_request(request, 400)
        if request.purpose == "summary":
            summaries += 1
        elif summaries >= 2:
            assert request.messages[1].content.startswith("[Summary"), "the summary comes first"
    assert summaries >= 3


async def test_a_verbose_summarizer_does_not_stop_compaction() -> None:
    """A model whose summaries are far longer than the budget (here: it
    repeats its whole request three times): each stored summary is cut to what
    a window carries, the next request cuts the summary so far rather than
    giving up, so summaries keep advancing and every request fits."""
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        if request.purpose == "summary":
            return ModelResponse(text=request.messages[1].content * 3)
        return ModelResponse(text=f"answer {len(requests)}")

    storage = in_memory_storage()
    policy = ContextPolicy(max_tokens=400)
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, context=policy
    ) as agent:
        covered = []
        for i in range(60):
            await agent.send("c", f"question {i} " * 5)
            summary = live_conversation(agent, "c").cache.summary
            covered.append(0 if summary is None else summary.through_seq)
        assert agent.stats.summaries_failed == 0
        assert agent.stats.summaries >= 5
        assert covered[-1] > 100, "compaction stopped advancing"
        summary = live_conversation(agent, "c").cache.summary
        assert summary is not None
        assert estimate_tokens(summary.text) <= 2 * (400 // 4)
    for request in requests:
        check_request(request, 400)
    turns = [r for r in requests if r.purpose == "turn"]
    assert turns[-1].messages[1].content.startswith("[Summary"), "the window carries the summary"
    assert_valid_history(await stored(storage, "c"))


@pytest.mark.parametrize("failure", ["raises", "answers nothing", "cancelled"])
async def test_a_summary_that_fails_changes_nothing(
    failure: str, autojump_clock: trio.testing.MockClock
) -> None:
    """A summarizer that raises, answers nothing, or is cut short by the agent
    closing (a shutdown mid-summary): no summary, history valid."""
    storage = in_memory_storage()
    summary_started = trio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose != "summary":
            return ModelResponse(text="ok")
        summary_started.set()
        if failure == "raises":
            raise ModelBackendError("summarizer down")
        if failure == "answers nothing":
            return ModelResponse(text="  ")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    policy = ContextPolicy(max_tokens=300)
    with trio.fail_after(60):
        async with open_chat_agent(
            model=ScriptedModel(respond), storage=storage, context=policy
        ) as agent:
            for i in range(12):
                await agent.send("c", f"question {i} " * 5)
                if summary_started.is_set():
                    break
            assert summary_started.is_set()
            if failure != "cancelled":
                assert agent.stats.summaries == 0
                assert agent.stats.summaries_failed > 0
        # Leaving the block closed the agent: a summary under way was cancelled.
    assert await storage.message_store.latest_summary("c") is None
    assert_valid_history(await stored(storage, "c"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def test_a_5000_turn_conversation_stays_bounded(tmp_path: Path) -> None:
    """5,000 turns of one conversation on SQLite (issue 16): every request
    within the budget, the process's resident memory flat from turn 1,000 on
    beyond SQLite's own page caches, Python's allocated blocks flat, and loading the
    conversation after a restart as fast at turn 5,000 as at turn 100 (within
    2x: the load reads the summary and what follows)."""
    path = tmp_path / "db"
    budget = 600
    policy = ContextPolicy(max_tokens=budget)
    largest = 0

    def respond(request: ModelRequest) -> ModelResponse:
        nonlocal largest
        largest = max(largest, request_tokens(request))
        return summarizer_and(lambda r: ModelResponse(text="fine"))(request)

    model = ScriptedModel(respond)
    rss: dict[int, int] = {}
    sqlite: dict[int, int] = {}
    blocks: dict[int, int] = {}

    async def grow(first: int, last: int) -> None:
        async with open_sqlite_storage(path, synchronous="NORMAL") as storage:
            async with open_chat_agent(model=model, storage=storage, context=policy) as agent:
                for i in range(first, last):
                    await agent.send("long", f"message number {i}")
                    if i + 1 in (1000, 5000):
                        gc.collect()
                        rss[i + 1] = rss_bytes()
                        sqlite[i + 1] = apsw.memory_used()
                        blocks[i + 1] = sys.getallocatedblocks()

    async def load_time() -> float:
        async with open_sqlite_storage(path) as storage:
            async with open_chat_agent(model=model, storage=storage, context=policy) as agent:
                began = time.perf_counter()
                await agent.pending_approvals("long")  # loads, runs no turn
                return time.perf_counter() - began

    await grow(0, 100)
    short = min([await load_time() for _ in range(5)])
    await grow(100, 5000)
    long = min([await load_time() for _ in range(5)])
    assert largest <= budget
    # SQLite's page caches fill as the database grows (up to their size);
    # beyond them nothing may grow. The whole history cached would add some
    # 40,000 Python blocks and several MiB by turn 5,000.
    growth = (rss[5000] - rss[1000]) - (sqlite[5000] - sqlite[1000])
    assert growth < 2**20, f"RSS beyond SQLite grew {growth / 2**20:.1f} MiB, turn 1,000 to 5,000"
    assert blocks[5000] - blocks[1000] < 5000, (blocks[1000], blocks[5000])
    assert long < 2 * short + 0.005, (short, long)


async def test_a_failed_turn_is_not_resumed_when_its_record_is_lost_after_summaries() -> None:
    """A turn fails and its failure record cannot be written: the process
    remembers the failure by the user message's seq, so the reload that
    follows does not take the turn for interrupted and resume it. Under a
    context policy the cache starts after the summary, so that seq is not
    the message's place in the cache (it was taken for it)."""
    from agentik import ModelBackendError, StoreError, in_memory_storage

    asked: list[str] = []

    def respond(request: ModelRequest) -> ModelResponse:
        user = [m for m in request.messages if m.role is Role.USER][-1].content
        asked.append(user)
        if user == "fail now":
            raise ModelBackendError("down")
        return ModelResponse(text="ok")

    storage = in_memory_storage()
    store = storage.message_store

    async def lost(*args: object, **kwargs: object) -> object:
        raise StoreError("the failure record is lost")

    async with open_chat_agent(
        model=ScriptedModel(summarizer_and(respond)),
        storage=storage,
        context=ContextPolicy(max_tokens=300),
    ) as agent:
        for i in range(30):
            await agent.send("c", f"question {i} " * 5)
        assert live_conversation(agent, "c").cache.first_seq > 1, "summaries folded the cache"
        store.submit_turn_failure = lost  # type: ignore[method-assign]
        with pytest.raises(TurnError):
            await agent.send("c", "fail now")
        seq = [m.seq for m in await stored(storage, "c") if m.content == "fail now"][0]
        assert agent._runtime.failures.get(("c", seq)) == "model_error"
        asked.clear()
        assert (await agent.send("c", "next")).text == "ok"
        assert "fail now" not in asked, "the failed turn was resumed"
    assert_valid_history(await stored(storage, "c"))


async def test_each_stored_message_is_counted_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every request's window and the check for a summary read the costs of
    the whole tail: each stored message is counted once (kept by seq), not
    once per request, and the kept costs are trimmed with the tail."""
    counted: collections.Counter[int | None] = collections.Counter()

    def counting(message: Message, count: Callable[[str], int]) -> int:
        counted[message.seq] += 1
        return message_tokens(message, count)

    monkeypatch.setattr(_runtime, "message_tokens", counting)
    model = ScriptedModel(summarizer_and(lambda r: ModelResponse(text="fine")))
    policy = ContextPolicy(max_tokens=1000)
    async with open_chat_agent(model=model, storage=in_memory_storage(), context=policy) as agent:
        for i in range(100):
            await agent.send("c", f"question {i}")
        assert agent.stats.summaries >= 1
        stored = {seq: n for seq, n in counted.items() if seq is not None}
        assert len(stored) == 200
        assert max(stored.values()) == 1, sorted(stored.items(), key=lambda kv: -kv[1])[:3]
        conversation = live_conversation(agent, "c")
        costs = dict(conversation.cache.costs)
        seqs = {m.seq for m in conversation.cache.history}
    assert set(costs) <= seqs, "costs kept for messages the tail no longer holds"
    by_seq = {m.seq: m for m in conversation.cache.history}
    for seq, tokens in costs.items():
        assert tokens == message_tokens(by_seq[seq], estimate_tokens)
