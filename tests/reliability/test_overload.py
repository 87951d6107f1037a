"""Overload, in process: ten times more concurrent turns than the configured
bound, against a slow scripted model (trio's autojump clock).

What holds: the turns past the bound are refused at once with
``OverloadedError`` (no virtual time passes); resident memory grows by a
bounded amount; every send that returned a result has its messages in the
store exactly once, and no refused turn left anything behind.
"""

from __future__ import annotations

import collections
import gc

import trio
import trio.testing

from agentik import ModelRequest, ModelResponse, OverloadedError, Role
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage
from tests.reliability.helpers import check_history, history, rss_bytes

CONVERSATIONS = 50
QUEUE = 2
BOUND = 4  # max_queued_turns
PER_CONVERSATION = 10 * BOUND
LATENCY = 3.0


def echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"re: {request.messages[-1].content}")


async def test_ten_times_the_bound(autojump_clock: trio.testing.MockClock) -> None:
    """2,000 concurrent sends over 50 conversations with room for 4 each: the
    rest are refused at once, memory stays bounded, no acknowledged turn is
    lost or doubled, and the refused ones stored nothing."""
    storage = in_memory_storage()
    model = ScriptedModel(echo, latency=LATENCY)
    done: dict[str, list[str]] = collections.defaultdict(list)
    refused: dict[str, list[str]] = collections.defaultdict(list)
    refusal_times: list[float] = []
    retry_after: list[float] = []
    gc.collect()
    before = rss_bytes()
    async with open_chat_agent(
        model=model,
        storage=storage,
        turn_queue_size=QUEUE,
        max_queued_turns=BOUND,
        builtin_tools=False,
    ) as agent:
        start = trio.current_time()

        async def one(conversation: str, text: str) -> None:
            try:
                result = await agent.send(conversation, text)
            except OverloadedError as exc:
                retry_after.append(exc.retry_after)
                refused[conversation].append(text)
                refusal_times.append(trio.current_time() - start)
                return
            assert result.text == f"re: {text}"
            done[conversation].append(text)

        async with trio.open_nursery() as nursery:
            for c in range(CONVERSATIONS):
                for t in range(PER_CONVERSATION):
                    nursery.start_soon(one, f"c{c}", f"c{c}-t{t}")
        assert agent.stats.overloaded == sum(len(v) for v in refused.values())
    gc.collect()
    grown = rss_bytes() - before
    # Every send arrives before any conversation takes its first turn, so BOUND
    # are queued per conversation and the other 36 refused.
    for c in range(CONVERSATIONS):
        conversation = f"c{c}"
        assert len(done[conversation]) == BOUND, conversation
        assert len(refused[conversation]) == PER_CONVERSATION - BOUND
        stored = await history(storage, conversation)
        check_history(stored, once=tuple(done[conversation]))
        users = [m.content for m in stored if m.role is Role.USER]
        assert sorted(users) == sorted(done[conversation])
        assert not set(users) & set(refused[conversation])
    assert min(retry_after) > 0
    assert max(refusal_times) == 0  # refused at once, not after waiting
    assert grown < 64 * 1024 * 1024, f"RSS grew by {grown / 1e6:.1f} MB"
