"""Interrupted turns resume as the agent opens, without any request touching
their conversations (issue "hardening", item 8): on both backends, through
the public API, from states built in the store as a killed process leaves
them.

- every conversation whose last turn a stop interrupted finishes, once, and
  nothing else changes: finished turns, failed ones and turns waiting for a
  decision are left as they are (a property over random mixes of states);
- an interrupted call of a tool that is not idempotent is answered
  ``interrupted`` and never runs again; an idempotent one runs again once;
- at most ``RESUME_AT_ONCE`` turns resume at a time;
- with ``resume_interrupted=False`` nothing happens at start.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import (
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    ToolCall,
    TurnError,
    open_chat_agent,
    tool,
)
from agentik.agent import _resume
from agentik.models import ScriptedModel
from agentik.storage import (
    StorageBundle,
    in_memory_storage,
    open_sqlite_storage,
)
from tests.agent.helpers import assert_valid_history, stored
from tests.reliability.helpers import BACKENDS, Backend

RUNS: list[str] = []
GUARD_SECONDS = 30


@tool(idempotent=True)
async def lookup(tag: str = "") -> str:
    """Read something; running it twice is harmless.

    Args:
        tag: Which call.
    """
    RUNS.append(f"lookup {tag}")
    return "found"


@tool
async def send_mail(tag: str = "") -> str:
    """Send a mail; running it twice is not harmless.

    Args:
        tag: Which call.
    """
    RUNS.append(f"send_mail {tag}")
    return "sent"


@tool(requires_approval=True)
async def pay(tag: str = "") -> str:
    """Pay, once a person approved it.

    Args:
        tag: Which call.
    """
    RUNS.append(f"pay {tag}")
    return "paid"


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


def summarize(request: ModelRequest) -> ModelResponse:
    """Answers with what the turn's tool results said, or the user's text."""
    messages = request.messages
    user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
    results = [m.content for m in messages[user_at:] if m.role is Role.TOOL]
    return ModelResponse(text=" | ".join(results) or f"re: {messages[user_at].content}")


def agent_over(
    storage: StorageBundle,
    respond: Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]] = summarize,
    **options: object,
):  # type: ignore[no-untyped-def]
    return open_chat_agent(
        model=ScriptedModel(respond),
        storage=storage,
        tools=[lookup, send_mail, pay],
        builtin_tools=False,
        **options,  # type: ignore[arg-type]
    )


def calls(*names: str, tag: str) -> Message:
    return Message(
        Role.ASSISTANT,
        "",
        tuple(
            ToolCall(f"{tag}-{i}", name, json.dumps({"tag": f"{tag}-{i}"}))
            for i, name in enumerate(names)
        ),
    )


async def until(condition: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``condition``: the resume runs in the agent's own tasks, which no
    request of the test waits for (SQLite reads run in threads: no mock clock)."""
    with trio.fail_after(GUARD_SECONDS):
        while not await condition():  # noqa: ASYNC110
            await trio.sleep(0.005)


async def none_interrupted(storage: StorageBundle) -> bool:
    store = storage.message_store
    return not await store.interrupted_conversations()


# --- one conversation ----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_interrupted_turn_resumes_without_a_touch(backend: str, tmp_path: Path) -> None:
    """The turn finishes while nothing asks for its conversation: the idempotent
    call runs again, the other is answered ``interrupted`` (their results in
    call order); a keyed retry later replays it and adds nothing."""
    place = Backend(backend, tmp_path / "db")
    async with place.open() as storage:
        store = storage.message_store
        await store.append("conv", Message(Role.USER, "work"), idempotency_key="k")
        await store.append("conv", calls("lookup", "send_mail", tag="w"))
    async with place.open() as storage, agent_over(storage) as agent:
        await until(lambda: none_interrupted(storage))
        history = await stored(storage, "conv")
        assert history[-1].content == (
            "found | interrupted: the process stopped before this call finished"
        )
        assert agent.stats.turns_resumed == 1
        replay = await agent.send("conv", "work", idempotency_key="k")
        assert replay.text == history[-1].content
        assert await stored(storage, "conv") == history
    assert_valid_history(history)
    assert RUNS == ["lookup w-0"]


async def test_nothing_resumes_at_start_with_resume_interrupted_false(
    autojump_clock: trio.testing.MockClock,
) -> None:
    storage = in_memory_storage()
    await storage.message_store.append("conv", Message(Role.USER, "work"))
    await storage.message_store.append("conv", calls("lookup", tag="w"))
    async with agent_over(storage, resume_interrupted=False) as agent:
        await trio.sleep(3600)
        assert agent.stats.turns_resumed == 0
    assert len(await stored(storage, "conv")) == 2
    assert RUNS == []


# --- bounded ------------------------------------------------------------------------


@attrs.define
class Gate:
    """A model that holds every turn until released, counting those it holds."""

    released: trio.Event = attrs.Factory(trio.Event)
    holding: int = 0
    peak: int = 0
    held: trio.Event = attrs.Factory(trio.Event)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.holding += 1
        self.peak = max(self.peak, self.holding)
        if self.holding == _resume.RESUME_AT_ONCE:
            self.held.set()
        try:
            await self.released.wait()
        finally:
            self.holding -= 1
        return summarize(request)


async def test_at_most_a_few_turns_resume_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """Three times ``RESUME_AT_ONCE`` interrupted turns: no more than that many
    run at a time (the model sees exactly that many while it holds them), and
    every one finishes."""
    storage = in_memory_storage()
    count = 3 * _resume.RESUME_AT_ONCE
    for n in range(count):
        await storage.message_store.append(f"c{n:03}", Message(Role.USER, f"work {n}"))
    gate = Gate()
    async with agent_over(storage, gate.respond) as agent:
        with trio.fail_after(GUARD_SECONDS):
            await gate.held.wait()
        await trio.sleep(60)  # nothing more starts while they are held
        assert (gate.peak, gate.holding) == (_resume.RESUME_AT_ONCE, _resume.RESUME_AT_ONCE)
        gate.released.set()
        await until(lambda: none_interrupted(storage))
        assert gate.peak == _resume.RESUME_AT_ONCE
        assert agent.stats.turns_resumed == count
    for n in range(count):
        history = await stored(storage, f"c{n:03}")
        assert [m.content for m in history] == [f"work {n}", f"re: work {n}"]


# --- every state, as a property --------------------------------------------------------

STATES = (
    "finished",  # an answer: left alone
    "before_model",  # the user message alone: the model is asked
    "mid_tools",  # calls without results: idempotent runs again, the other not (call order)
    "after_tools",  # every call answered: the model is asked
    "failed",  # a recorded failure: left alone
    "waiting",  # a call waits for a decision: left waiting
    "approved",  # approved, stopped while it ran: answered interrupted, not run again
)


async def build(storage: StorageBundle, conversation_id: str, state: str) -> None:
    """The conversation as a killed process leaves it, its last turn in ``state``."""
    store = storage.message_store
    await store.append(conversation_id, Message(Role.USER, "earlier"))
    await store.append(conversation_id, Message(Role.ASSISTANT, "fine"))
    user = await store.append(conversation_id, Message(Role.USER, "work"))
    assert user.seq is not None
    if state == "finished":
        await store.append(conversation_id, Message(Role.ASSISTANT, "done"))
    elif state in ("mid_tools", "after_tools"):
        made = calls("lookup", "send_mail", tag=conversation_id)
        await store.append(conversation_id, made)
        if state == "after_tools":
            for call in made.tool_calls:
                result = Message(Role.TOOL, "before", tool_call_id=call.id)
                await store.append(conversation_id, result)
    elif state == "failed":
        made = await store.append(conversation_id, calls("send_mail", tag=conversation_id))
        stopped = Message(Role.TOOL, "error: stopped", tool_call_id=made.tool_calls[0].id)
        await store.append(conversation_id, stopped)
        await (await store.submit_turn_failure(conversation_id, user.seq, "model_error")).wait()
    elif state in ("waiting", "approved"):
        made = calls("pay", tag=conversation_id)
        stored_call = await (
            await store.submit_awaiting(conversation_id, made, [made.tool_calls[0].id])
        ).wait()
        if state == "approved":
            assert stored_call.seq is not None
            decision = await store.submit_decision(
                conversation_id, stored_call.seq, made.tool_calls[0].id, approve=True
            )
            await decision.wait()


async def check(storage: StorageBundle, conversation_id: str, state: str) -> None:
    history = await stored(storage, conversation_id)
    if state != "waiting":  # its call has no result until it is decided
        assert_valid_history(history)
    contents = [m.content for m in history]
    cut = "interrupted: the process stopped before this call finished"
    expected = {
        "finished": ["earlier", "fine", "work", "done"],
        "before_model": ["earlier", "fine", "work", "re: work"],
        "mid_tools": ["earlier", "fine", "work", "", "found", cut, f"found | {cut}"],
        "after_tools": ["earlier", "fine", "work", "", "before", "before", "before | before"],
        "failed": ["earlier", "fine", "work", "", "error: stopped"],
        "waiting": ["earlier", "fine", "work", ""],
        "approved": ["earlier", "fine", "work", "", cut, cut],
    }[state]
    assert contents == expected, (conversation_id, state, contents)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(states=st.lists(st.sampled_from(STATES), min_size=1, max_size=12), sqlite=st.booleans())
async def test_every_interrupted_turn_resumes_once_and_nothing_else_changes(
    states: list[str], sqlite: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    RUNS.clear()
    path = tmp_path_factory.mktemp("resume") / "a.db"
    async with _open(sqlite, path) as storage:
        for n, state in enumerate(states):
            await build(storage, f"c{n:02}", state)
        async with agent_over(storage) as agent:
            await until(lambda: none_interrupted(storage))
            resumable = {"before_model", "mid_tools", "after_tools", "approved"}
            await until(lambda: _resumed(agent, sum(s in resumable for s in states)))
            for n, state in enumerate(states):
                await check(storage, f"c{n:02}", state)
            waiting = [f"c{n:02}" for n, s in enumerate(states) if s == "waiting"]
            for conversation_id in waiting:  # still waits, and is decided as before
                [request] = await agent.pending_approvals(conversation_id)
                await agent.decide(conversation_id, request.call.id, approve=True)
    ran = sorted(RUNS)
    expected = sorted(
        [f"lookup c{n:02}-0" for n, s in enumerate(states) if s == "mid_tools"]
        + [f"pay c{n:02}-0" for n, s in enumerate(states) if s == "waiting"]
    )
    assert ran == expected, "a call that was not idempotent ran again, or one ran twice"


async def _resumed(agent: object, count: int) -> bool:
    await trio.lowlevel.checkpoint()
    return agent.stats.turns_resumed >= count  # type: ignore[attr-defined,no-any-return]


def _open(sqlite: bool, path: Path):  # type: ignore[no-untyped-def]
    if sqlite:
        return open_sqlite_storage(path)

    class _Memory:
        async def __aenter__(self) -> StorageBundle:
            return in_memory_storage()

        async def __aexit__(self, *exc: object) -> None:
            pass

    return _Memory()


# --- a recovery cut short ----------------------------------------------------------


@attrs.define
class HeldRead:
    """The real in-memory message store, holding one read (``point``) of the
    recovery until released; ``interrupted_conversations`` finds nothing (the
    test's request recovers the turn, not a start-up pass)."""

    inner: object
    point: str
    reached: trio.Event = attrs.Factory(trio.Event)
    held: bool = False

    async def _hold(self) -> None:
        if not self.held:
            self.held = True
            self.reached.set()
            await trio.sleep_forever()  # until cancelled

    async def turn_record(self, conversation_id: str, seq: int) -> object:
        if self.point == "turn_record":
            await self._hold()
        return await self.inner.turn_record(conversation_id, seq)  # type: ignore[attr-defined]

    async def list_idempotency_keys(self, conversation_id: str, **kwargs: object) -> object:
        if self.point == "key":
            await self._hold()
        return await self.inner.list_idempotency_keys(  # type: ignore[attr-defined]
            conversation_id, **kwargs
        )

    async def interrupted_conversations(self, **kwargs: object) -> list[str]:
        await trio.lowlevel.checkpoint()
        return []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@pytest.mark.parametrize("point", ["turn_record", "key"])
async def test_a_recovery_cut_short_is_done_again_by_the_next_request(point: str) -> None:
    """A request whose load recovers an interrupted turn is cancelled while the
    recovery reads the turn's record (or its key): the next request recovers
    it (the turn resumes and finishes), never runs a turn after calls that
    still wait for results."""
    storage = in_memory_storage()
    store = storage.message_store
    await store.append("c", Message(Role.USER, "work"), idempotency_key="k")
    await store.append("c", calls("send_mail", tag="w"))
    held = HeldRead(store, point)
    bundle = attrs.evolve(storage, message_store=held)
    async with agent_over(bundle) as agent:
        async with trio.open_nursery() as nursery:

            async def first() -> None:
                with pytest.raises(TurnError, match="cancelled"):
                    await agent.send("c", "next")

            nursery.start_soon(first)
            with trio.fail_after(GUARD_SECONDS):
                await held.reached.wait()
            assert await agent.cancel("c") == 1
        assert (await agent.send("c", "again")).text == "re: again"
    history = await stored(storage, "c")
    assert_valid_history(history)
    cut = "interrupted: the process stopped before this call finished"
    assert [m.content for m in history] == ["work", "", cut, cut, "again", "re: again"]
    assert RUNS == []
