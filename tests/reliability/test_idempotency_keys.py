"""An idempotency key names its own turn or nothing, whatever is cancelled when.

A keyed turn may be cancelled at any await before its user message is stored:
while the history loads, while its key is looked up in the store, while the
store has not yet accepted the user message (a full writer queue), or later,
while the model runs. Whatever the point, a later retry with that key runs
the key's own text as a new turn or answers from the key's own stored turn,
never from the turn that came next (issue 14, defect 2: the key stayed
mapped to the history slot the next turn then took).

The property test drives the same class of schedules at random: keyed and
unkeyed turns, retries, turns cancelled by ``agent.cancel`` at random mock
times while the store and the model wait at their checkpoints, callers that
give up early, on both backends; then a new agent on the same store, where
every key is looked up again.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import attrs
import outcome
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import (
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    OverloadedError,
    Role,
    ToolCall,
    TurnError,
)
from agentik._json import JsonObject
from agentik.agent import ChatAgent, open_chat_agent
from agentik.agent._conversation import Conversation
from agentik.models import ScriptedModel
from agentik.storage import (
    MessageStore,
    Pending,
    StorageBundle,
    in_memory_storage,
    open_sqlite_storage,
)
from tests.agent.helpers import live_conversation
from tests.reliability.helpers import BACKENDS, Backend, Gate, check_history, history

POINTS = ["load", "find_key", "submit", "model"]
"""Where the keyed turn is held when it is cancelled, in the order it gets there."""
GUARD_SECONDS = 60  # a hang guard only: every wait below is on an event


def answer_to(text: str) -> str:
    return f"answer to {text}"


@attrs.define
class PointStore:
    """A real message store that stops, once, at the gate's armed point:

    - ``load``: the conversation's history read (``get_messages``);
    - ``find_key``: an idempotency key looked up in the store;
    - ``submit``: a user message's ``submit`` before the real store accepts
      it (what a full writer queue does; cancelled there, nothing is queued).
    """

    inner: MessageStore
    gate: Gate

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        if message.role is Role.USER:
            await self.gate.hit("submit")
        return await self.inner.submit(conversation_id, message, idempotency_key=idempotency_key)

    async def append(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Message:
        pending = await self.submit(conversation_id, message, idempotency_key=idempotency_key)
        return await pending.wait()

    async def get_messages(
        self, conversation_id: str, *, after_seq: int = 0, page_size: int = 500
    ) -> AsyncIterator[Message]:
        await self.gate.hit("load")
        async for message in self.inner.get_messages(
            conversation_id, after_seq=after_seq, page_size=page_size
        ):
            yield message

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        await self.gate.hit("find_key")
        return await self.inner.find_idempotency_key(conversation_id, key)

    async def token_stats(self, conversation_id: str) -> object:
        return await self.inner.token_stats(conversation_id)

    async def list_conversations(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        return await self.inner.list_conversations(after=after, limit=limit)


def with_store(bundle: StorageBundle, store: object) -> StorageBundle:
    return StorageBundle(
        store,  # type: ignore[arg-type]
        bundle.working_memory_store,
        bundle.reflection_store,
        bundle.skill_store,
    )


def gated_model(gate: Gate) -> ScriptedModel:
    async def respond(request: ModelRequest) -> ModelResponse:
        text = request.messages[-1].content
        if text == "first":
            await gate.hit("model")
        return ModelResponse(text=answer_to(text))

    return ScriptedModel(respond)


async def release_when_settled(gate: Gate) -> None:
    """Release the gate once every task is blocked again: the cancellation has
    been delivered and handled, so what follows does not race it."""
    await trio.testing.wait_all_tasks_blocked()
    gate.release()


def assert_own_turn(result: outcome.Outcome[object], text: str) -> None:
    """``result`` answers ``text``'s own turn: it ran (or was replayed) with
    ``text`` as its user message, or it is the refusal to resume that turn."""
    if isinstance(result, outcome.Error):
        error = result.error
        assert isinstance(error, TurnError), error
        assert error.code == "not_resumable", error
        assert "cannot be resumed" in str(error), error
        return
    value = result.unwrap()
    messages = value.messages  # type: ignore[attr-defined]
    assert messages[0].role is Role.USER
    assert messages[0].content == text, f"a retry for {text!r} answered {messages[0].content!r}"
    assert value.text == answer_to(text)  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("point", POINTS)
async def test_a_cancelled_keyed_turn_never_replays_the_next_one(
    backend: str, point: str, tmp_path: Path
) -> None:
    """Cancel a keyed turn at ``point``, run another turn, retry the key: the
    retry is the first text's own turn (run anew if its message was never
    stored), never the other turn's result; a new agent agrees."""
    store = Backend(backend, tmp_path / "db")
    gate = Gate()
    model = gated_model(gate)
    codes: list[str] = []
    with trio.fail_after(GUARD_SECONDS):
        async with store.open() as real:
            async with open_chat_agent(model=model, storage=real) as agent:
                await agent.send("c", "warmup")  # the next agent loads a history
            gate.arm(point)
            storage = with_store(real, PointStore(real.message_store, gate))
            async with open_chat_agent(model=model, storage=storage) as agent:

                async def first() -> None:
                    with pytest.raises(TurnError) as info:
                        await agent.send("c", "first", idempotency_key="k1")
                    codes.append(info.value.code)

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(first)
                    await gate.reached.wait()
                    assert await agent.cancel("c") == 1
                    await release_when_settled(gate)
                assert codes == ["cancelled"]
                second = await agent.send("c", "second", idempotency_key="k2")
                assert second.messages[0].content == "second"
                retry = await outcome.acapture(agent.send, "c", "first", idempotency_key="k1")
                assert_own_turn(retry, "first")
                if point != "model":  # "first" was never stored: it runs as a new turn
                    assert isinstance(retry, outcome.Value)
        async with store.open() as reopened:
            final = await history(reopened, "c")
            for key, text in (("k1", "first"), ("k2", "second")):
                seq = await reopened.message_store.find_idempotency_key("c", key)
                assert seq is not None
                assert final[seq - 1].content == text
            async with open_chat_agent(model=model, storage=reopened) as agent:
                again = await outcome.acapture(agent.send, "c", "first", idempotency_key="k1")
                assert_own_turn(again, "first")
                assert_own_turn(
                    await outcome.acapture(agent.send, "c", "second", idempotency_key="k2"),
                    "second",
                )
            assert await history(reopened, "c") == final  # the retries added nothing
    check_history(final, once=("warmup", "first", "second"))


async def test_a_key_another_writer_stored_names_its_own_turn() -> None:
    """A keyed turn stored by someone else after the conversation was loaded
    (the cache is short of the store): a retry with that key reloads and
    answers that turn, not the agent's own turn now at the same cache index."""
    storage = in_memory_storage()
    model = gated_model(Gate())
    async with open_chat_agent(model=model, storage=storage) as agent:
        await agent.send("c", "warmup")
    async with open_chat_agent(model=model, storage=storage) as agent:
        await agent.send("c", "loaded")  # the cache holds what the store held then
        store = storage.message_store
        await store.append("c", Message(Role.USER, "outside"), idempotency_key="kx")
        await store.append("c", Message(Role.ASSISTANT, answer_to("outside")))
        mine = await agent.send("c", "mine", idempotency_key="k2")
        assert mine.messages[0].content == "mine"
        assert_own_turn(
            await outcome.acapture(agent.send, "c", "outside", idempotency_key="kx"), "outside"
        )
        assert_own_turn(
            await outcome.acapture(agent.send, "c", "mine", idempotency_key="k2"), "mine"
        )
        assert agent.stats.turns_replayed == 2
    check_history(await history(storage, "c"), once=("warmup", "loaded", "outside", "mine"))


# --- the class: random schedules of keyed turns and cancellations -------------


@attrs.define
class Chaos:
    """Mock-clock waits the store and the model take at their checkpoints, in
    the order hypothesis drew them (cycled): where a cancellation lands."""

    delays: tuple[float, ...]
    position: int = 0

    async def pause(self) -> None:
        delay = self.delays[self.position % len(self.delays)]
        self.position += 1
        await trio.sleep(delay)  # 0 is still a checkpoint


@attrs.define
class ChaosStore:
    """A real message store that waits (mock time) before each read and before
    each submit is accepted, so cancellations land at every such point."""

    inner: MessageStore
    chaos: Chaos

    async def submit(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Pending[Message]:
        await self.chaos.pause()
        return await self.inner.submit(conversation_id, message, idempotency_key=idempotency_key)

    async def append(
        self, conversation_id: str, message: Message, *, idempotency_key: str | None = None
    ) -> Message:
        pending = await self.submit(conversation_id, message, idempotency_key=idempotency_key)
        return await pending.wait()

    async def get_messages(
        self, conversation_id: str, *, after_seq: int = 0, page_size: int = 500
    ) -> AsyncIterator[Message]:
        await self.chaos.pause()
        async for message in self.inner.get_messages(
            conversation_id, after_seq=after_seq, page_size=page_size
        ):
            yield message

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        await self.chaos.pause()
        return await self.inner.find_idempotency_key(conversation_id, key)

    async def token_stats(self, conversation_id: str) -> object:
        return await self.inner.token_stats(conversation_id)

    async def list_conversations(self, *, after: str | None = None, limit: int = 100) -> list[str]:
        return await self.inner.list_conversations(after=after, limit=limit)


def chaos_agent(storage: StorageBundle, chaos: Chaos) -> AbstractAsyncContextManager[ChatAgent]:
    """Texts ending in an even digit make a tool call first (the probe waits
    too), so histories hold calls and results; every answer is
    ``answer_to(text)``."""

    async def respond(request: ModelRequest) -> ModelResponse:
        await chaos.pause()
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        text = messages[user_at].content
        if text[-1] in "02468" and messages[-1].role is Role.USER:
            return ModelResponse(tool_calls=(ToolCall(f"call-{uuid.uuid4().hex}", "probe", "{}"),))
        return ModelResponse(text=answer_to(text))

    async def probe(arguments: JsonObject) -> str:
        await chaos.pause()
        return "probed"

    return open_chat_agent(
        model=ScriptedModel(respond),
        storage=with_store(storage, ChaosStore(storage.message_store, chaos)),
        tools=[NamedTool("probe", "Probe.", {"type": "object"}, probe)],
        builtin_tools=False,
    )


@attrs.frozen
class Op:
    """One ``send``: a new key, a retry of an earlier key, or no key."""

    kind: str
    pick: int
    """Which earlier key a retry repeats (modulo the keys so far)."""
    gap: float
    """Mock seconds after the previous send started."""
    cancel_at: float | None
    """``agent.cancel`` this long after it starts."""
    by_key: bool
    """Cancel by this send's key (that turn only, queued or running), else
    whatever turn runs then."""
    give_up: float | None
    """The caller stops waiting after this long (the turn goes on)."""


ops = st.builds(
    Op,
    kind=st.sampled_from(["new", "retry", "plain"]),
    pick=st.integers(0, 7),
    gap=st.sampled_from([0.0, 0.0, 0.3, 1.0, 4.0]),
    cancel_at=st.none() | st.sampled_from([0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.5]),
    give_up=st.none() | st.sampled_from([0.1, 0.5, 2.0]),
    by_key=st.booleans(),
)
delays = st.lists(st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0]), min_size=1, max_size=12)


@asynccontextmanager
async def opened(
    backend: str, directory: Path, memory: list[StorageBundle]
) -> AsyncIterator[StorageBundle]:
    """SQLite on a file in ``directory`` (synchronous=NORMAL: a closed bundle
    keeps every commit, and fsyncs would only slow the examples down), or the
    one in-memory bundle kept in ``memory``."""
    if backend == "sqlite":
        async with open_sqlite_storage(directory / "db", synchronous="NORMAL") as bundle:
            yield bundle
        return
    if not memory:
        memory.append(in_memory_storage())
    yield memory[0]


async def run_schedule(
    backend: str, directory: Path, schedule: list[Op], pauses: tuple[float, ...]
) -> None:
    memory: list[StorageBundle] = []
    keys: dict[str, str] = {}
    """Key -> the text sent with it."""
    answers: list[tuple[str, str | None, outcome.Outcome[object]]] = []
    chaos = Chaos(pauses)
    async with opened(backend, directory, memory) as storage:
        async with chaos_agent(storage, chaos) as agent, trio.open_nursery() as nursery:

            async def cancel_later(delay: float, key: str | None) -> None:
                await trio.sleep(delay)
                await agent.cancel("c", idempotency_key=key)

            async def one(text: str, key: str | None, op: Op) -> None:
                if op.cancel_at is not None:
                    nursery.start_soon(cancel_later, op.cancel_at, key if op.by_key else None)
                with trio.move_on_after(op.give_up if op.give_up is not None else float("inf")):
                    answers.append((text, key, await attempt(agent, text, key)))

            for i, op in enumerate(schedule):
                await trio.sleep(op.gap)
                key: str | None = None
                if op.kind == "retry" and keys:
                    key = sorted(keys)[op.pick % len(keys)]
                    text = keys[key]
                else:
                    text = f"t{i}"
                    if op.kind != "plain":
                        key = f"k{i}"
                        keys[key] = text
                nursery.start_soon(one, text, key, op)
        try:
            conversation: Conversation | None = live_conversation(agent, "c")  # its key map
        except LookupError:
            conversation = None
        for text, key, result in answers:
            check_answer(result, text, key)
        stored = await history(storage, "c")
        check_store(stored, keys)
        if conversation is not None:
            for key, index in conversation.cache.keys.items():
                message = conversation.cache.history[index]
                assert (message.role, message.content) == (Role.USER, keys[key])
        for key, text in keys.items():
            seq = await storage.message_store.find_idempotency_key("c", key)
            if seq is None:
                assert text not in [m.content for m in stored], f"{text!r} stored without {key!r}"
            else:
                assert (stored[seq - 1].role, stored[seq - 1].content) == (Role.USER, text)
    # A new agent on the same store: every key names its own turn.
    async with opened(backend, directory, memory) as storage:
        async with chaos_agent(storage, Chaos((0.0,))) as agent:
            for key, text in keys.items():
                assert_own_turn(await attempt(agent, text, key), text)
        check_store(await history(storage, "c"), keys)


async def attempt(agent: ChatAgent, text: str, key: str | None) -> outcome.Outcome[object]:
    """The turn's result or the error it was refused with (a cancellation of
    the caller itself propagates)."""
    try:
        return outcome.Value(await agent.send("c", text, idempotency_key=key))
    except (TurnError, OverloadedError) as error:
        return outcome.Error(error)


def check_answer(result: outcome.Outcome[object], text: str, key: str | None) -> None:
    """A send heard its own turn, a cancellation, or (a retry) the refusal to
    resume its own unfinished turn; never another turn's result."""
    if isinstance(result, outcome.Error):
        error = result.error
        if isinstance(error, OverloadedError):
            return
        assert isinstance(error, TurnError), error
        if error.code == "cancelled":
            return
        assert key is not None, error
        assert_own_turn(result, text)
        return
    assert_own_turn(result, text)


def check_store(stored: list[Message], keys: dict[str, str]) -> None:
    """Valid history, and no text (so no key) stored twice."""
    check_history(stored)
    texts = [m.content for m in stored if m.role is Role.USER]
    assert len(texts) == len(set(texts)), texts


schedules = st.lists(ops, min_size=2, max_size=7)


@settings(max_examples=150, deadline=None)
@given(schedule=schedules, pauses=delays)
def test_a_key_always_replays_its_own_turn_in_memory(
    schedule: list[Op], pauses: list[float]
) -> None:
    """Random keyed and unkeyed turns, retries and cancellations at random
    checkpoints: every answer is its own turn's, history stays valid, no key
    names two turns, and the store agrees after a reload."""
    run_example("memory", schedule, pauses)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schedule=schedules, pauses=delays)
def test_a_key_always_replays_its_own_turn_on_sqlite(
    schedule: list[Op], pauses: list[float]
) -> None:
    """The same on a SQLite file, reopened for the reload; its writer commits
    in a thread, so the mock clock also jumps while a commit is under way."""
    run_example("sqlite", schedule, pauses)


def run_example(backend: str, schedule: list[Op], pauses: list[float]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        trio.run(
            run_schedule,
            backend,
            Path(directory),
            schedule,
            tuple(pauses),
            clock=trio.testing.MockClock(autojump_threshold=0),
        )


async def test_cancel_by_key_cancels_that_turn_only() -> None:
    """``cancel(cid, idempotency_key=k)`` cancels the turn carrying k, running
    or still queued (it then never runs), and leaves the others alone."""
    holding, release = trio.Event(), trio.Event()
    seen: list[str] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        text = request.messages[-1].content
        seen.append(text)
        if text.startswith("hold"):
            holding.set()
            await release.wait()
        return ModelResponse(text=answer_to(text))

    storage = in_memory_storage()
    outcomes: dict[str, outcome.Outcome[object]] = {}
    async with open_chat_agent(model=ScriptedModel(respond), storage=storage) as agent:

        async def send(text: str, key: str | None) -> None:
            outcomes[text] = await attempt(agent, text, key)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "hold", "k0")
            await holding.wait()
            nursery.start_soon(send, "queued", "k1")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(send, "plain", None)
            await trio.testing.wait_all_tasks_blocked()
            assert await agent.cancel("c", idempotency_key="k1") == 1
            assert await agent.cancel("c", idempotency_key="unknown") == 0
            assert await agent.cancel("elsewhere", idempotency_key="k0") == 0
            release.set()
        assert_own_turn(outcomes["hold"], "hold")
        assert_own_turn(outcomes["plain"], "plain")
        error = outcomes["queued"]
        assert isinstance(error, outcome.Error)
        assert isinstance(error.error, TurnError) and error.error.code == "cancelled"
        assert seen == ["hold", "plain"]  # the cancelled turn never ran
        # Running: cancelled by its key, as agent.cancel(cid) would.
        holding, release = trio.Event(), trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "hold again", "k2")
            await holding.wait()
            assert await agent.cancel("c", idempotency_key="k2") == 1
        error = outcomes["hold again"]
        assert isinstance(error, outcome.Error) and error.error.code == "cancelled"  # type: ignore[attr-defined]
        # The cancelled key names nothing: sent again, it runs.
        assert_own_turn(await attempt(agent, "queued", "k1"), "queued")
    check_history(await history(storage, "c"), once=("hold", "plain", "queued"))
