"""``ModelLimits`` through the agent, on trio's MockClock, with a scripted model
that records when each call reached it, for whom, and what it cost.

Each test drives ``open_chat_agent(model_limits=...)`` (or a ``ModelScheduler``
directly, for the gate's own properties) and checks what the model saw:
the limits are never exceeded over any window; fairness across owners and
weights; the provider's Retry-After pausing everyone once; summaries after
turns; refusals at the edge storing nothing; cancel-safety.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import (
    Message,
    ModelBackendError,
    ModelLimits,
    ModelRequest,
    ModelResponse,
    OverloadedError,
    Role,
    ScriptedModel,
    TokenUsage,
    TurnError,
    in_memory_storage,
    open_chat_agent,
    open_sqlite_storage,
)
from agentik._tokens import estimate_tokens, message_tokens
from agentik.models import ModelScheduler, current_fairness_key, schedule

SEP = "\x1f"


@attrs.frozen
class Call:
    at: float
    key: str
    purpose: str
    tokens: int
    text: str


@attrs.define
class Recorder:
    """A scripted model: records each call, waits ``latency`` seconds, answers
    with usage equal to the prompt's estimate plus ``completion`` tokens."""

    latency: float = 0.5
    completion: int = 8
    calls: list[Call] = attrs.Factory(list)
    fail: Callable[[ModelRequest], Exception | None] = lambda request: None

    async def respond(self, request: ModelRequest) -> ModelResponse:
        prompt = sum(message_tokens(m, estimate_tokens) for m in request.messages)
        text = request.messages[-1].content
        self.calls.append(
            Call(
                trio.current_time(),
                current_fairness_key.get(),
                request.purpose,
                prompt + self.completion,
                text,
            )
        )
        error = self.fail(request)
        if error is not None:
            raise error
        await trio.sleep(self.latency)
        return ModelResponse(text="ok", usage=TokenUsage(prompt, self.completion))

    @property
    def model(self) -> ScriptedModel:
        return ScriptedModel(self.respond)


def most_in_a_minute(calls: list[Call], weight: Callable[[Call], float]) -> float:
    """The most any 60 s window saw (windows start at a call, as any worst one does)."""
    times = [c.at for c in calls]
    worst = 0.0
    for i, call in enumerate(calls):
        end = bisect.bisect_left(times, call.at + 60)
        worst = max(worst, sum(weight(c) for c in calls[i:end]))
    return worst


async def run_conversations(
    agent_send: Callable[[str, str], Awaitable[object]],
    conversations: dict[str, int],
    seconds: float,
) -> None:
    """Each conversation sends turns one after another for ``seconds``."""

    async def converse(conversation_id: str, turns: int) -> None:
        for turn in range(turns):
            await agent_send(conversation_id, f"turn {turn} of {conversation_id}")

    async with trio.open_nursery() as nursery:
        for conversation_id, turns in conversations.items():
            nursery.start_soon(converse, conversation_id, turns)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


NO_WAIT_LIMIT = 1e9
"""A ``max_queue_wait`` no test that counts calls reaches."""


@given(
    rpm=st.integers(1, 400),
    tpm=st.one_of(st.none(), st.integers(400, 20_000)),
    concurrent=st.one_of(st.none(), st.integers(1, 20)),
    conversations=st.lists(st.integers(1, 30), min_size=1, max_size=12),
    latency=st.floats(0.01, 3.0),
    words=st.integers(1, 40),
)
@settings(deadline=None, max_examples=40)
def test_limits_are_never_exceeded_over_any_window(
    rpm: int,
    tpm: int | None,
    concurrent: int | None,
    conversations: list[int],
    latency: float,
    words: int,
) -> None:
    """Over any 60 s the model sees at most ``requests_per_minute`` calls and
    ``tokens_per_minute`` tokens (as it reports them), and never more than
    ``max_concurrent`` at once, whatever the demand."""
    recorder = Recorder(latency=latency, completion=5)
    limits = ModelLimits(
        requests_per_minute=rpm,
        tokens_per_minute=tpm,
        max_concurrent=concurrent,
        max_queue_wait=NO_WAIT_LIMIT,
    )
    in_flight = 0
    most = 0
    respond = recorder.respond

    async def counting(request: ModelRequest) -> ModelResponse:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await respond(request)
        finally:
            in_flight -= 1

    async def main() -> None:
        model = ScriptedModel(counting)
        async with open_chat_agent(
            model=model,
            storage=in_memory_storage(),
            builtin_tools=False,
            system_prompt="be brief " * words,
            model_limits=limits,
        ) as agent:
            # The output allowance is known here: usage never exceeds the estimate.
            assert agent.model_scheduler is not None
            agent.model_scheduler._fixed_allowance = 5
            agent.model_scheduler._allowance = 5.0
            await run_conversations(
                agent.send, {f"c{i}": turns for i, turns in enumerate(conversations)}, 300
            )

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    calls = recorder.calls
    assert calls
    assert most_in_a_minute(calls, lambda c: 1) <= rpm
    if tpm is not None:
        assert most_in_a_minute(calls, lambda c: c.tokens) <= tpm
    if concurrent is not None:
        assert most <= concurrent


async def test_two_owners_with_1_to_10_demand_each_get_half(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Owner ``big`` runs ten conversations and ``small`` one, each sending
    without pause: under a tokens-per-minute limit each owner gets half the
    tokens, not ten shares against one."""
    recorder = Recorder(latency=0.2)
    limits = ModelLimits(tokens_per_minute=6_000, max_queue_wait=NO_WAIT_LIMIT)
    async with open_chat_agent(
        model=recorder.model, storage=in_memory_storage(), builtin_tools=False, model_limits=limits
    ) as agent:
        conversations = {f"big{SEP}c{i}": 10_000 for i in range(10)}
        conversations[f"small{SEP}c0"] = 10_000
        await run_conversations(agent.send, conversations, 600)
    tokens: Counter[str] = Counter()
    for call in recorder.calls:
        if 60 <= call.at < 600:  # past the first minute
            tokens[call.key] += call.tokens
    assert set(tokens) == {"big", "small"}
    share = tokens["small"] / (tokens["small"] + tokens["big"])
    assert 0.45 <= share <= 0.55


async def test_without_owners_each_conversation_is_a_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With no owner in the ids, every conversation gets an equal share of requests."""
    recorder = Recorder(latency=0.05)
    limits = ModelLimits(requests_per_minute=120, max_queue_wait=NO_WAIT_LIMIT)
    async with open_chat_agent(
        model=recorder.model, storage=in_memory_storage(), builtin_tools=False, model_limits=limits
    ) as agent:
        await run_conversations(agent.send, {f"c{i}": 10_000 for i in range(4)}, 300)
    counts = Counter(call.key for call in recorder.calls if call.at >= 60)
    assert set(counts) == {"c0", "c1", "c2", "c3"}
    assert max(counts.values()) - min(counts.values()) <= 2


async def test_weights_change_the_shares(autojump_clock: trio.testing.MockClock) -> None:
    """``weights={"gold": 3}``: gold gets three requests for silver's one."""
    recorder = Recorder(latency=0.05)
    limits = ModelLimits(requests_per_minute=120, weights={"gold": 3}, max_queue_wait=NO_WAIT_LIMIT)
    async with open_chat_agent(
        model=recorder.model, storage=in_memory_storage(), builtin_tools=False, model_limits=limits
    ) as agent:
        conversations = {f"gold{SEP}c{i}": 10_000 for i in range(3)}
        conversations.update({f"silver{SEP}c{i}": 10_000 for i in range(3)})
        await run_conversations(agent.send, conversations, 300)
    counts = Counter(call.key for call in recorder.calls if call.at >= 60)
    assert counts["gold"] / (counts["gold"] + counts["silver"]) == pytest.approx(0.75, abs=0.03)


async def test_a_retry_after_pauses_every_conversation_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The model answers one call 429 with Retry-After 20 s: that turn fails
    (``model_unavailable``, carrying 20), the scheduler pauses, and no other
    conversation's call reaches the model until the 20 s are over; then they
    all go, without another 429."""
    refused: list[float] = []

    def fail(request: ModelRequest) -> Exception | None:
        if request.messages[-1].content == "turn 0 of c0" and not refused:
            refused.append(trio.current_time())
            return ModelBackendError("slow down", status=429, retry_after=20.0)
        return None

    recorder = Recorder(latency=0.5, fail=fail)
    limits = ModelLimits(requests_per_minute=600, max_queue_wait=NO_WAIT_LIMIT)
    failures: list[TurnError] = []
    async with open_chat_agent(
        model=recorder.model, storage=in_memory_storage(), builtin_tools=False, model_limits=limits
    ) as agent:

        async def send(conversation_id: str, text: str) -> None:
            try:
                await agent.send(conversation_id, text)
            except TurnError as error:
                failures.append(error)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "c0", "turn 0 of c0")
            await trio.testing.wait_all_tasks_blocked()
            for i in range(1, 40):
                nursery.start_soon(send, f"c{i}", f"turn 0 of c{i}")
        assert agent.model_scheduler is not None
        stats = agent.model_scheduler.stats
        assert (stats.rate_limited, stats.pauses) == (1, 1)
    assert [(f.code, f.retry_after) for f in failures] == [("model_unavailable", 20.0)]
    [at] = refused
    others = [call.at for call in recorder.calls if call.text != "turn 0 of c0"]
    assert len(others) == 39
    assert min(others) >= at + 20


async def test_summaries_yield_to_turns(autojump_clock: trio.testing.MockClock) -> None:
    """With one slot busy, waiting summaries and reflections go after every
    waiting turn, whatever their order of arrival."""
    limits = ModelLimits(max_concurrent=1)
    scheduler = ModelScheduler(limits)
    order: list[str] = []
    release = trio.Event()

    async def respond(request: ModelRequest) -> ModelResponse:
        order.append(f"{request.purpose}:{request.messages[-1].content}")
        if request.messages[-1].content == "first":
            await release.wait()
        return ModelResponse(text="ok")

    model = schedule(ScriptedModel(respond), scheduler)

    async def ask(text: str, purpose: str) -> None:
        current_fairness_key.set(text)
        request = ModelRequest([Message(Role.USER, text)], purpose=purpose)  # type: ignore[arg-type]
        await model.complete(request)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "first", "turn")
        await trio.testing.wait_all_tasks_blocked()
        for text, purpose in [("s1", "summary"), ("t1", "turn"), ("r1", "reflection")]:
            nursery.start_soon(ask, text, purpose)
            await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(ask, "t2", "turn")
        await trio.testing.wait_all_tasks_blocked()
        assert scheduler.queued("turn") == 2
        assert scheduler.queued("summary") == 2
        release.set()
    assert order[:3] == ["turn:first", "turn:t1", "turn:t2"]
    assert sorted(order[3:]) == ["reflection:r1", "summary:s1"]


async def test_a_turn_past_max_queue_wait_is_refused_and_stores_nothing(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """At 6 requests a minute with twenty turns waiting, a new turn would wait
    minutes: ``send`` and ``stream`` raise ``OverloadedError`` at once with a
    ``retry_after``, and nothing of the refused conversation is stored.
    Accepted turns all finish."""
    recorder = Recorder(latency=0.1)
    limits = ModelLimits(requests_per_minute=6, max_queue_wait=30)
    async with (
        open_sqlite_storage(tmp_path / "agentik.db") as storage,
        open_chat_agent(
            model=recorder.model, storage=storage, builtin_tools=False, model_limits=limits
        ) as agent,
    ):
        finished: list[str] = []
        refused: list[OverloadedError] = []

        async def send(conversation_id: str) -> None:
            try:
                await agent.send(conversation_id, "hello")
            except OverloadedError as error:
                refused.append(error)
            else:
                finished.append(conversation_id)

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(send, f"c{i}")
            scheduler = agent.model_scheduler
            assert scheduler is not None
            # Reads of a real SQLite file run in worker threads, which
            # wait_all_tasks_blocked does not wait for: spin (without letting
            # the autojump clock move) until all twenty met the scheduler.
            stats = scheduler.stats
            while stats.requests_granted + scheduler.queued("turn") + stats.refused < 20:
                await trio.lowlevel.checkpoint()
            began = trio.current_time()
            with pytest.raises(OverloadedError) as raised:
                await agent.send("late", "hello")
            with pytest.raises(OverloadedError):
                async with agent.stream("late", "hello"):
                    pass
            assert trio.current_time() == began  # refused at once
        assert raised.value.retry_after >= 1
        assert "max_queue_wait=30" in str(raised.value)
        messages = [m async for m in storage.message_store.get_messages("late")]
        assert messages == []
        assert len(finished) + len(refused) == 20
        assert len(finished) >= 3  # the first minute's and whatever fit in 30 s
        assert agent.model_scheduler is not None
        assert agent.model_scheduler.stats.refused == 2 + len(refused)


async def test_reported_usage_corrects_the_charge(autojump_clock: trio.testing.MockClock) -> None:
    """A model reporting ten times the estimate leaves a debt that slows the
    calls after it: over ten minutes the reported tokens stay within the limit."""
    recorder = Recorder(latency=0.1, completion=2_000)  # far above the allowance charged
    limits = ModelLimits(tokens_per_minute=30_000, max_queue_wait=NO_WAIT_LIMIT)
    async with open_chat_agent(
        model=recorder.model, storage=in_memory_storage(), builtin_tools=False, model_limits=limits
    ) as agent:
        await run_conversations(agent.send, {f"c{i}": 10_000 for i in range(5)}, 600)
    reported = sum(call.tokens for call in recorder.calls)
    # ten minutes' budget, plus the first second's and what was in flight at the end
    assert reported <= 30_000 * 10 + 30_000 / 60 + 2_100 * 5


async def test_each_node_keeps_its_share(autojump_clock: trio.testing.MockClock) -> None:
    """With two live nodes the scheduler keeps half the limit; when one leaves, all of it."""
    nodes = 2
    scheduler = ModelScheduler(
        ModelLimits(requests_per_minute=120, max_queue_wait=NO_WAIT_LIMIT), nodes=lambda: nodes
    )
    times: list[float] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        times.append(trio.current_time())
        return ModelResponse(text="ok")

    model = schedule(ScriptedModel(respond), scheduler)
    request = ModelRequest([Message(Role.USER, "hi")])

    async def loop() -> None:
        while True:
            await model.complete(request)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(loop)
        await trio.sleep(120)
        assert scheduler.nodes == 2
        nodes = 1
        await trio.sleep(120)
        nursery.cancel_scope.cancel()
    first = sum(1 for t in times if 60 <= t < 120)
    second = sum(1 for t in times if 180 <= t < 240)
    assert first == pytest.approx(60, abs=2)
    assert second == pytest.approx(120, abs=2)


Step = tuple[str, int]


@given(
    st.integers(1, 3),
    st.lists(
        st.tuples(
            st.sampled_from(["arrive", "arrive", "cancel", "release", "cancel_holder"]),
            st.integers(0, 50),
        ),
        max_size=50,
    ),
)
@settings(deadline=None)
def test_cancel_safe_and_bounded(capacity: int, script: list[Step]) -> None:
    """Random arrivals, releases and cancellations (of waiters and holders):
    never more than ``max_concurrent`` held; a cancelled waiter leaves the
    queue; once everyone has left, nothing is held or waiting, and every
    request charged to the bucket was one that reached the model."""

    @attrs.define
    class Caller:
        scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
        release: trio.Event = attrs.Factory(trio.Event)
        granted: bool = False

    async def main() -> None:
        scheduler = ModelScheduler(ModelLimits(max_concurrent=capacity, requests_per_minute=10_000))
        request = ModelRequest([Message(Role.USER, "hi")])
        callers: list[Caller] = []
        reached = 0

        async def run(caller: Caller) -> None:
            nonlocal reached
            with caller.scope:
                async with scheduler.slot(request):
                    reached += 1
                    caller.granted = True
                    await caller.release.wait()

        async with trio.open_nursery() as nursery:
            for action, pick in script:
                waiting = [c for c in callers if not c.granted and not c.scope.cancel_called]
                holding = [c for c in callers if c.granted and not c.scope.cancel_called]
                if action == "arrive":
                    caller = Caller()
                    callers.append(caller)
                    nursery.start_soon(run, caller)
                elif action == "cancel" and waiting:
                    waiting[pick % len(waiting)].scope.cancel()
                elif action == "release" and holding:
                    holding[pick % len(holding)].release.set()
                elif action == "cancel_holder" and holding:
                    holding[pick % len(holding)].scope.cancel()
                await trio.testing.wait_all_tasks_blocked()
                assert scheduler.in_use <= capacity
                assert scheduler.in_use + scheduler.waiting <= len(callers)
            nursery.cancel_scope.cancel()
        assert (scheduler.in_use, scheduler.waiting) == (0, 0)
        assert scheduler.stats.requests_granted == reached

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_limits_are_validated() -> None:
    """A limit that is not a positive integer, a wait that is not a positive
    number, or a weight that is not positive is refused, naming the field."""
    with pytest.raises(ValueError, match=r"^requests_per_minute must be an integer >= 1"):
        ModelLimits(requests_per_minute=0)
    with pytest.raises(ValueError, match=r"^tokens_per_minute must be an integer >= 1"):
        ModelLimits(tokens_per_minute=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_concurrent must be an integer >= 1"):
        ModelLimits(max_concurrent=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_queue_wait must be a number of seconds > 0"):
        ModelLimits(max_queue_wait=math.inf)
    with pytest.raises(ValueError, match=r"^weights\['a'\] must be a number > 0"):
        ModelLimits(weights={"a": 0})
    assert ModelLimits().unlimited
    assert ModelLimits(weights={"a": 2}).weight("a") == 2.0
    assert ModelLimits(weights={"a": 2}).weight("b") == 1.0


async def test_no_limits_schedule_nothing() -> None:
    """``model_limits=None`` or no limit set: the model is called as given."""
    model = ScriptedModel(lambda request: ModelResponse(text="ok"))
    for limits in (None, ModelLimits(max_queue_wait=5)):
        async with open_chat_agent(
            model=model, storage=in_memory_storage(), model_limits=limits
        ) as agent:
            assert agent.model_scheduler is None
            await agent.send("c", "hi")


async def test_one_owner_sending_ten_times_more_gets_a_tenth(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ten owners, owner 0 with ten times the conversations of each other one,
    all sending without pause: each owner is served a tenth of the tokens the
    model reports (Jain's index over owners >= 0.99). Owner 0's calls wait
    longest, so they were estimated when little was known of the output:
    fairness counts what calls used, not what they were estimated to."""
    recorder = Recorder(latency=0.5)
    limits = ModelLimits(tokens_per_minute=300_000, requests_per_minute=6_000)
    async with open_chat_agent(
        model=recorder.model, storage=in_memory_storage(), builtin_tools=False, model_limits=limits
    ) as agent:
        conversations = {
            f"owner{o}{SEP}c{i}": 10_000 for o in range(10) for i in range(15 if o else 150)
        }
        await run_conversations(agent.send, conversations, 60)
    tokens: Counter[str] = Counter()
    for call in recorder.calls:
        if 10 <= call.at < 60:
            tokens[call.key] += call.tokens
    values = [tokens[f"owner{o}"] for o in range(10)]
    jain = sum(values) ** 2 / (10 * sum(v * v for v in values))
    assert jain >= 0.99
    assert 0.08 <= values[0] / sum(values) <= 0.12
