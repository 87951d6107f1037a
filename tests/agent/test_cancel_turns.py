"""``await agent.cancel(conversation_id) -> int`` (issue 30, item 5): the
running turn and the queued ones, counted; each ends as A2A's CancelTask
ends one (history valid, every call answered, not resumed after a restart).

Timing runs on trio's MockClock; tools hold a turn by sleeping."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import outcome
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import (
    ChatAgent,
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    ToolCall,
    TurnError,
    in_memory_storage,
    open_chat_agent,
    tool,
)
from agentik.agent import TurnFailed
from agentik.agent._turn_events import STOPPED
from agentik.models import ScriptedModel
from agentik.storage import Pending, StorageBundle
from tests.agent.helpers import assert_valid_history, call, stored
from tests.reliability.helpers import BACKENDS, Backend


@tool(requires_approval=True)
async def pay() -> str:
    """Pay."""  # its calls wait for a person's decision
    return "paid"


MODEL_CALLS: list[str] = []


def respond(request: ModelRequest) -> ModelResponse:
    """``wait N``: a call of ``wait`` for N seconds, then ``done N``."""
    last = request.messages[-1]
    if last.role.value == "user":
        MODEL_CALLS.append(last.content)
        seconds = int(last.content.split()[1])
        return call("wait", {"seconds": seconds}, id=f"w{len(request.messages)}")
    return ModelResponse(text="done " + last.content)


TOOL_RUNS: list[int] = []


async def _wait(arguments: dict[str, object]) -> str:
    seconds = arguments["seconds"]
    assert isinstance(seconds, int)
    TOOL_RUNS.append(seconds)
    await trio.sleep(seconds)
    return str(seconds)


WAIT = NamedTool(
    "wait",
    "Wait.",
    {"type": "object", "properties": {"seconds": {"type": "integer"}}, "required": ["seconds"]},
    _wait,
)


def agent(storage: StorageBundle, **changes: object):  # type: ignore[no-untyped-def]
    return open_chat_agent(
        model=ScriptedModel(respond),
        storage=storage,
        tools=[WAIT],
        builtin_tools=False,
        max_queued_turns=8,
        turn_queue_size=8,
        **changes,
    )


async def outcome_of(a: ChatAgent, text: str, key: str | None = None) -> str:
    try:
        result = await a.send("c", text, idempotency_key=key)
    except TurnError as error:
        return error.code
    return result.text


@pytest.mark.parametrize("backend", BACKENDS)
async def test_cancel_counts_the_running_turn_and_the_queued_ones(
    backend: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """One turn runs (in a 1,000 s tool), three wait behind it, one of them
    streamed: ``cancel`` returns 4 at once; none of the queued ever reaches
    the model; the running one's call is answered; the next turn runs."""
    MODEL_CALLS.clear()
    store = Backend(backend, tmp_path / "db")
    outcomes: dict[str, str] = {}
    streamed: list[object] = []
    async with store.open() as storage:
        async with agent(storage) as a:

            async def one(text: str) -> None:
                outcomes[text] = await outcome_of(a, text)

            async def streaming() -> None:
                async with a.stream("c", "wait 3") as events:
                    streamed.extend([e async for e in events])

            async with trio.open_nursery() as nursery:
                TOOL_RUNS.clear()
                nursery.start_soon(one, "wait 1000")
                while not TOOL_RUNS:  # a writer thread: wait until the tool runs
                    await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(one, "wait 1")
                nursery.start_soon(streaming)
                nursery.start_soon(one, "wait 2")
                await trio.testing.wait_all_tasks_blocked()
                began = trio.current_time()
                assert await a.cancel("c") == 4
                assert await a.cancel("c") == 0, "nothing is left to cancel"
            if backend == "memory":  # (a writer thread lets the mock clock jump)
                assert trio.current_time() == began, "the running turn stopped at once"
            assert outcomes == dict.fromkeys(["wait 1000", "wait 1", "wait 2"], "cancelled")
            assert isinstance(streamed[-1], TurnFailed)
            assert streamed[-1].code == "cancelled"
            assert MODEL_CALLS == ["wait 1000"], "a cancelled queued turn never ran"
            assert await outcome_of(a, "wait 0") == "done 0"
    async with store.open() as storage:
        history = await stored(storage, "c")
        assert_valid_history(history)
        assert [m.content for m in history[:3]] == ["wait 1000", "", STOPPED]
        async with agent(storage) as a:  # a restart resumes nothing
            await trio.sleep(1)
        assert await stored(storage, "c") == history


async def test_cancel_by_key_leaves_the_other_turns_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    outcomes: dict[str, str] = {}
    async with agent(in_memory_storage()) as a:

        async def one(text: str, key: str | None) -> None:
            outcomes[text] = await outcome_of(a, text, key)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "wait 10", "k0")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(one, "wait 1", "k1")
            nursery.start_soon(one, "wait 2", None)
            await trio.testing.wait_all_tasks_blocked()
            assert a.turn_in_progress("c", "k1")
            assert await a.cancel("c", idempotency_key="k1") == 1
            assert not a.turn_in_progress("c", "k1")
            assert await a.cancel("c", idempotency_key="nope") == 0
            assert await a.cancel("c", idempotency_key="k0") == 1
    assert outcomes == {"wait 10": "cancelled", "wait 1": "cancelled", "wait 2": "done 2"}


async def test_nothing_to_cancel(autojump_clock: trio.testing.MockClock) -> None:
    """An unknown or idle conversation: 0. Bad input: a clear error."""
    async with agent(in_memory_storage()) as a:
        assert await a.cancel("never") == 0
        assert await outcome_of(a, "wait 0") == "done 0"
        assert await a.cancel("c") == 0
        with pytest.raises(ValueError, match="conversation_id must be a non-empty string"):
            await a.cancel("")
        with pytest.raises(ValueError, match="idempotency_key must be a non-empty string"):
            await a.cancel("c", idempotency_key="")


async def test_cancel_reaches_a_running_turn_behind_a_full_queue(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The inbox full and senders waiting for room: the cancel does not queue
    behind them, it stops the running turn now, and counts every waiting one."""
    outcomes: list[str] = []
    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        tools=[WAIT],
        builtin_tools=False,
        turn_queue_size=0,
        max_queued_turns=5,
    ) as a:

        async def one(text: str) -> None:
            outcomes.append(await outcome_of(a, text))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "wait 1000")
            await trio.testing.wait_all_tasks_blocked()
            for _ in range(3):
                nursery.start_soon(one, "wait 5")
            await trio.testing.wait_all_tasks_blocked()
            began = trio.current_time()
            assert await a.cancel("c") == 4
        assert trio.current_time() == began
    assert outcomes == ["cancelled"] * 4


@st.composite
def schedules(draw: st.DrawFn) -> tuple[list[tuple[float, int, bool]], list[tuple[float, int]]]:
    """Turns (when sent, how long their tool takes, keyed or not) and cancels
    (when, and which turn's key: -1 for all)."""
    turns = draw(
        st.lists(
            st.tuples(st.floats(0, 20), st.integers(0, 6), st.booleans()), min_size=1, max_size=7
        )
    )
    cancels = draw(
        st.lists(st.tuples(st.floats(0, 30), st.integers(-1, len(turns) - 1)), max_size=5)
    )
    return turns, cancels


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=schedules())
def test_cancels_at_random_moments_count_what_they_stop(
    schedule: tuple[list[tuple[float, int, bool]], list[tuple[float, int]]],
) -> None:
    """Turns sent at random moments (so some queue), cancels at random
    moments, of all turns or by a turn's key. Every caller hears back once;
    the counts the cancels return add up to the turns that ended
    ``cancelled``; a turn not cancelled finishes whole; history is valid and
    holds exactly the turns that ran."""
    turns, cancels = schedule

    async def main() -> None:
        MODEL_CALLS.clear()
        storage = in_memory_storage()
        outcomes: dict[int, str] = {}
        counted = 0
        async with agent(storage) as a:

            async def one(i: int, at: float, seconds: int, keyed: bool) -> None:
                await trio.sleep_until(at)
                key = f"k{i}" if keyed else None
                outcomes[i] = await outcome_of(a, f"wait {seconds} #{i}", key)

            async def canceller() -> None:
                nonlocal counted
                for at, which in sorted(cancels):
                    await trio.sleep_until(at + 0.25)
                    key = None if which < 0 else f"k{which}"
                    counted += await a.cancel("c", idempotency_key=key)

            async with trio.open_nursery() as nursery:
                for i, (at, seconds, keyed) in enumerate(turns):
                    nursery.start_soon(one, i, at, seconds, keyed)
                nursery.start_soon(canceller)
        assert sorted(outcomes) == list(range(len(turns)))
        cancelled = [i for i, o in outcomes.items() if o == "cancelled"]
        assert counted == len(cancelled)
        for i, (_, seconds, _) in enumerate(turns):
            if i not in cancelled:
                assert outcomes[i] == f"done {seconds}"
        history = await stored(storage, "c")
        assert_valid_history(history)
        users = [m.content for m in history if m.role.value == "user"]
        assert len(users) == len(set(users)), "no turn ran twice"
        assert set(MODEL_CALLS) <= set(users)
        for i, (_, seconds, _) in enumerate(turns):
            if i not in cancelled:
                assert f"wait {seconds} #{i}" in users

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


class HeldPause:
    """A real message store whose pause (``submit_awaiting``) is accepted at
    once but committed only once ``release`` is set: a slow commit."""

    def __init__(self, inner: object, nursery: trio.Nursery, *, accept: bool = True) -> None:
        self.inner = inner
        self.nursery = nursery
        self.accept = accept
        """False: held before the store accepts it (a full writer channel)."""
        self.reached = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def submit_awaiting(
        self, conversation_id: str, message: Message, call_ids: Sequence[str]
    ) -> Pending[Message]:
        if not self.accept:
            self.reached.set()
            await self.release.wait()
        inner: Pending[Message] = await self.inner.submit_awaiting(  # type: ignore[attr-defined]
            conversation_id, message, call_ids
        )
        outer: Pending[Message] = Pending()

        async def forward() -> None:
            self.reached.set()
            await self.release.wait()
            outer.set(await outcome.acapture(inner.wait))

        self.nursery.start_soon(forward)
        return outer


@pytest.mark.parametrize(
    ("accept", "kept"),
    [(True, ["pay", "", "denied: the turn was cancelled"]), (False, ["pay"])],
)
async def test_a_cancel_while_the_pause_commits_ends_the_pause_for_good(
    nursery: trio.Nursery, accept: bool, kept: list[str]
) -> None:
    """Cancelled while the pause's commit is under way, the turn ends as
    ``cancel_paused`` ends one: its call denied and the turn recorded
    cancelled, so a restart neither finds it waiting nor resumes it; cut
    before the store took the pause's message, there is no call to deny.
    Found by tests/agent/test_cut_short_fuzz.py: the denial named the call's
    message by a seq the cache did not have yet (not committed, or not even
    accepted), so the clean-up failed before it recorded the failure, and a
    restart found the turn paused again (or resumed it, and the model paused
    it anew), though its caller was told it was cancelled."""

    def respond(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role is Role.USER and last.content == "pay":
            return call("pay", {}, id="p1")
        return ModelResponse(text="done")

    bundle = in_memory_storage()
    held = HeldPause(bundle.message_store, nursery, accept=accept)
    storage = attrs.evolve(bundle, message_store=held)
    outcomes: list[str] = []
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, tools=[pay], builtin_tools=False
    ) as a:

        async def send() -> None:
            try:
                await a.send("c", "pay")
            except TurnError as error:
                outcomes.append(error.code)

        async with trio.open_nursery() as turns:
            turns.start_soon(send)
            await held.reached.wait()
            assert await a.cancel("c") == 1
            held.release.set()
    assert outcomes == ["cancelled"]
    history = await stored(bundle, "c")
    assert [m.content for m in history] == kept
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=bundle, tools=[pay], builtin_tools=False
    ) as a:
        assert await a.pending_approvals("c") == ()
        assert a.stats.turns_resumed == 0
        assert (await a.send("c", "next")).text == "done"
    assert_valid_history(await stored(bundle, "c"))


class HeldDecision:
    """A real message store whose first decision (``submit_decision``) waits
    before the store accepts it, until cancelled: ``reached`` is set then (a
    full writer channel, or the in-memory store's checkpoint: nothing stored)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.reached = trio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def submit_decision(self, *args: object, **kwargs: object) -> Pending[Message | None]:
        if not self.reached.is_set():
            self.reached.set()
            await trio.sleep_forever()
        inner = self.inner.submit_decision  # type: ignore[attr-defined]
        return await inner(*args, **kwargs)  # type: ignore[no-any-return]


@pytest.mark.parametrize("cut", ["cancel", "outer"])
async def test_a_cancel_before_the_store_takes_a_denial_denies_that_call_too(
    autojump_clock: trio.testing.MockClock, cut: str
) -> None:
    """Two calls wait; the first is denied, and a cancel (``agent.cancel``, or
    the agent's block cancelled) cuts the decision before the store accepts
    it. The store still has that call waiting, so the turn ends as
    ``cancel_paused`` ends one: both calls ``denied: the turn was cancelled``,
    the turn recorded cancelled. Found by tests/agent/test_cut_short_fuzz.py:
    the machine had taken the call for denied and the clean-up denied only
    the other one, so the next load answered it as a failed turn's call
    whose result was lost ("it may or may not have run")."""

    def respond(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role is Role.USER and last.content == "pay":
            calls = (ToolCall("p1", "pay", "{}"), ToolCall("p2", "pay", "{}"))
            return ModelResponse(tool_calls=calls)
        return ModelResponse(text="done")

    def opened(storage: StorageBundle):  # type: ignore[no-untyped-def]
        return open_chat_agent(
            model=ScriptedModel(respond), storage=storage, tools=[pay], builtin_tools=False
        )

    bundle = in_memory_storage()
    held = HeldDecision(bundle.message_store)
    outcomes: list[str] = []
    async with trio.open_nursery() as outside:  # the decision's caller, past the block
        with trio.CancelScope() as block:
            async with opened(attrs.evolve(bundle, message_store=held)) as a:
                paused = await a.send("c", "pay")
                assert [r.call.id for r in paused.approvals] == ["p1", "p2"]

                async def decide() -> None:
                    try:
                        await a.decide("c", "p1", approve=False, reason="no")
                    except TurnError as error:
                        outcomes.append(error.code)

                outside.start_soon(decide)
                await held.reached.wait()
                if cut == "cancel":
                    assert await a.cancel("c") == 1
                    await trio.testing.wait_all_tasks_blocked()
                else:
                    block.cancel()
    assert outcomes == ["cancelled"]
    history = await stored(bundle, "c")
    assert [(m.content, m.tool_call_id) for m in history] == [
        ("pay", None),
        ("", None),
        ("denied: the turn was cancelled", "p2"),
        ("denied: the turn was cancelled", "p1"),
    ]
    async with opened(bundle) as a:
        assert await a.pending_approvals("c") == ()
        assert a.stats.turns_resumed == 0
        assert (await a.send("c", "next")).text == "done"
    assert await stored(bundle, "c") == [*history, *(await stored(bundle, "c"))[4:]]
    assert_valid_history(await stored(bundle, "c"))
