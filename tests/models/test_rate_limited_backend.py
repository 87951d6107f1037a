"""A rate-limited backend, through ``OpenAICompatibleModel`` against a real
HTTP server on 127.0.0.1 (``chat_server``):

- past its retries, a 429 or 503 fails the turn with ``model_unavailable``
  and the backend's ``retry_after`` (another status stays ``model_error``);
- under ``ModelLimits`` every attempt waits in the scheduler
  (``with_admission``): a 429 with Retry-After pauses every call there, once,
  and the model adds no backoff of its own.

Time is trio's MockClock, moved by hand (``mock_clock.jump``) so the test
says exactly when the pause is over.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import trio
import trio.testing

from agentik import (
    Message,
    ModelBackendError,
    ModelLimits,
    ModelRequest,
    OpenAICompatibleModel,
    Role,
    TurnError,
    in_memory_storage,
    open_chat_agent,
)
from agentik.agent import TurnFailed
from agentik.models import FifoGate, ModelScheduler, RetryPolicy, current_fairness_key, schedule
from tests.models.chat_server import ChatServer, Held, Json, completion
from tests.models.conftest import RecordedSleep

LIMITED = {"error": {"message": "slow down", "type": "rate_limit_error"}}


def _model(server: ChatServer, sleep: RecordedSleep, **options: object) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(
        server.base_url,
        "m",
        sleep=sleep,
        jitter=lambda: 0.0,
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("status", "headers", "code", "retry_after"),
    [
        (429, {"Retry-After": "7"}, "model_unavailable", 7.0),
        (429, {"retry-after-ms": "1500"}, "model_unavailable", 1.5),
        (503, {}, "model_unavailable", None),
        (500, {"Retry-After": "7"}, "model_error", None),
    ],
)
async def test_a_backend_refusing_past_its_retries_fails_the_turn_so(
    chat_server: ChatServer,
    sleep: RecordedSleep,
    status: int,
    headers: dict[str, str],
    code: str,
    retry_after: float | None,
) -> None:
    """Three refusals (two retries): ``send`` raises ``TurnError`` with the code
    and what the backend asked to wait; ``stream`` ends with ``TurnFailed``
    carrying both; history stays valid (the user's message alone)."""
    chat_server.script(*[Json(LIMITED, status=status, headers=headers)] * 6)
    async with (
        _model(chat_server, sleep) as model,
        open_chat_agent(model=model, storage=in_memory_storage(), builtin_tools=False) as agent,
    ):
        with pytest.raises(TurnError) as raised:
            await agent.send("c", "hello")
        assert (raised.value.code, raised.value.retry_after) == (code, retry_after)
        async with agent.stream("c", "again") as events:
            last = [event async for event in events][-1]
        assert last == TurnFailed(str(last.message), code, retry_after)
        messages = [m async for m in agent.storage.message_store.get_messages("c")]
        assert [m.role for m in messages] == [Role.USER, Role.USER]
    assert len(chat_server.received) == 6


async def test_a_backend_error_keeps_status_and_retry_after(
    chat_server: ChatServer, sleep: RecordedSleep
) -> None:
    """The error the model raises says what the backend answered."""
    chat_server.script(*[Json(LIMITED, status=429, headers={"Retry-After": "3"})] * 3)
    async with _model(chat_server, sleep) as model:
        with pytest.raises(ModelBackendError) as raised:
            await model.complete(ModelRequest([Message(Role.USER, "hi")]))
    error = raised.value
    assert (error.status, error.retry_after, error.headers["retry-after"]) == (429, 3.0, "3")
    assert sleep.delays == [3.0, 3.0]


async def _settle(condition: Callable[[], bool]) -> None:
    """Let the server and the client run (real sockets) until ``condition``."""
    for _ in range(2000):
        if condition():
            return
        await trio.testing.wait_all_tasks_blocked(cushion=0.001)
    raise AssertionError("the condition never held")


async def test_a_429_pauses_every_call_in_the_scheduler_once(
    chat_server: ChatServer, sleep: RecordedSleep, mock_clock: trio.testing.MockClock
) -> None:
    """Five calls of one key, paced at one a second. The first is answered 429
    with Retry-After 10: no call reaches the server for the next 10 s, then
    all go, the refused one first (it keeps its place), and the model never
    backs off on its own; the scheduler saw one refusal and paused once."""
    chat_server.script(
        Json(LIMITED, status=429, headers={"Retry-After": "10"}),
        *[Json(completion("ok"))] * 5,
    )
    scheduler = ModelScheduler(ModelLimits(requests_per_minute=60, max_queue_wait=1e9), capacity=16)
    done: list[str] = []
    async with _model(chat_server, sleep, max_connections=16, timeout=math.inf) as model:
        admitted = schedule(model, scheduler)

        async def call(text: str) -> None:
            current_fairness_key.set("k")
            await admitted.complete(ModelRequest([Message(Role.USER, text)]))
            done.append(text)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "first")
            await _settle(lambda: scheduler.stats.rate_limited == 1)
            for text in ("b", "c", "d", "e"):
                nursery.start_soon(call, text)
                await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(9.9)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            assert len(chat_server.received) == 1  # paused, though the bucket had refilled
            for count in range(1, 6):  # one a second
                mock_clock.jump(1.0)
                await _settle(lambda count=count: len(done) == count)  # type: ignore[misc]
    assert len(chat_server.received) == 6
    assert done == ["first", "b", "c", "d", "e"]
    assert sleep.delays == []
    assert (scheduler.stats.rate_limited, scheduler.stats.pauses) == (1, 1)
    assert scheduler.stats.requests_granted == 6


async def test_the_admission_drains_to_what_the_provider_says_is_left(
    chat_server: ChatServer, sleep: RecordedSleep, mock_clock: trio.testing.MockClock
) -> None:
    """A 429 asking 0.1 s and saying ``x-ratelimit-remaining-tokens: 0``: the
    next call waits the pause and then for the token bucket to refill from
    empty (a whole call's estimate, 0.261 s at 1,000 tokens a second), though
    the bucket had most of a second's tokens left before."""
    chat_server.script(
        Json(
            LIMITED,
            status=429,
            headers={"retry-after-ms": "100", "x-ratelimit-remaining-tokens": "0"},
        ),
        Json(completion("ok")),
    )
    scheduler = ModelScheduler(
        ModelLimits(tokens_per_minute=60_000, max_queue_wait=1e9), capacity=16
    )
    request = ModelRequest([Message(Role.USER, "x")])
    assert scheduler.tokens_of(scheduler.call(request, "k")) == 5 + 256  # prompt, allowance
    async with _model(
        chat_server, sleep, max_connections=16, timeout=math.inf, retry=RetryPolicy(max_retries=1)
    ) as model:
        admitted = schedule(model, scheduler)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(admitted.complete, request)
            await _settle(lambda: scheduler.stats.rate_limited == 1)
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            assert scheduler.paused_for() == pytest.approx(0.1)
            mock_clock.jump(0.15)  # past the pause: 150 tokens, not 261
            await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            assert len(chat_server.received) == 1
            mock_clock.jump(0.15)
            await _settle(lambda: len(chat_server.received) == 2)
    assert sleep.delays == []


async def test_calls_wait_in_the_scheduler_not_behind_it(
    chat_server: ChatServer, sleep: RecordedSleep
) -> None:
    """Through the agent, with ``ModelLimits`` and a model of two connections:
    six turns at once put two on the wire and four in the scheduler, none in
    the model's own FIFO gate (the one queue); released, all finish."""
    release = trio.Event()
    chat_server.script(*[Held(Json(completion("ok")), release)] * 6)
    limits = ModelLimits(requests_per_minute=60_000)
    async with (
        _model(chat_server, sleep, max_connections=2) as model,
        open_chat_agent(
            model=model, storage=in_memory_storage(), builtin_tools=False, model_limits=limits
        ) as agent,
    ):
        scheduler = agent.model_scheduler
        assert scheduler is not None
        assert scheduler.capacity == 2
        gate = model.gate
        assert isinstance(gate, FifoGate)
        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(agent.send, f"c{i}", "hello")
            await _settle(lambda: chat_server.in_flight == 2 and scheduler.waiting == 4)
            assert (gate.in_use, gate.waiting) == (2, 0)
            release.set()
    assert len(chat_server.received) == 6
