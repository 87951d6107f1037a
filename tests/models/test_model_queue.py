"""OpenAICompatibleModel's gate against the scripted server on 127.0.0.1: calls past
``max_connections`` wait in agentik, a slot is held for one attempt on the wire
only (not across a retry's backoff, and by a stream until it is closed), a
cancelled waiter sends nothing, and the model's own pool keeps every
connection alive."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing

import pytest
import trio
import trio.testing

from agentik._errors import ModelBackendError
from agentik._messages import Message, Role
from agentik.models import FifoGate, ModelRequest, OpenAICompatibleModel
from agentik.models._pools import SHARD_CONNECTIONS
from tests.models.chat_server import ChatServer, Hang, Held, Json, Sse, chunk, completion


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest(messages=[Message(role=Role.USER, content=text)])


async def until(condition: Callable[[], bool]) -> None:
    """Wait (real time, a few seconds at most) until ``condition()`` holds."""
    with trio.fail_after(10):
        for _ in range(10_000):
            if condition():
                return
            await trio.sleep(0.001)
    raise AssertionError("condition never held")


async def test_calls_past_max_connections_wait_in_agentik(chat_server: ChatServer) -> None:
    """Six calls on two slots: two on the wire, four queued in the gate, all answered."""
    release = trio.Event()
    chat_server.script(*(Held(Json(completion(f"a{i}")), release) for i in range(6)))
    gate = FifoGate(2)
    answers: list[str | None] = []
    async with OpenAICompatibleModel(chat_server.base_url, "m", gate=gate) as model:

        async def call() -> None:
            answers.append((await model.complete(request())).text)

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(call)
            await until(lambda: chat_server.in_flight == 2 and gate.waiting == 4)
            release.set()
    assert sorted(answers, key=str) == [f"a{i}" for i in range(6)]
    assert chat_server.most_in_flight == 2
    assert gate.in_use == gate.waiting == 0


async def test_a_retry_waits_for_its_backoff_without_a_slot(
    chat_server: ChatServer, autojump_clock: trio.testing.MockClock
) -> None:
    """One slot; A gets 429 Retry-After 5 s. B, sent while A waits, is answered
    at once; A's retry comes after the 5 s."""
    chat_server.script(
        Json({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "5"}),
        Json(completion("b")),
        Json(completion("a")),
    )
    done: dict[str, float] = {}
    async with OpenAICompatibleModel(chat_server.base_url, "m", max_connections=1) as model:

        async def call(name: str) -> None:
            answer = await model.complete(request(name))
            assert answer.text == name
            done[name] = trio.current_time()

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "a")
            await until(lambda: len(chat_server.received) == 1)
            nursery.start_soon(call, "b")
    assert done["b"] - start < 1
    assert done["a"] - start >= 5
    assert [r.body["messages"][0]["content"] for r in chat_server.received] == ["a", "b", "a"]


async def test_a_cancelled_waiter_sends_nothing_and_leaves_no_trace(
    chat_server: ChatServer,
) -> None:
    """B, cancelled while it waits behind A, never reaches the server; C, queued
    after it, gets A's slot."""
    release = trio.Event()
    chat_server.script(Held(Json(completion("a")), release), Json(completion("c")))
    gate = FifoGate(1)
    async with OpenAICompatibleModel(chat_server.base_url, "m", gate=gate) as model:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(model.complete, request("a"))
            await until(lambda: chat_server.in_flight == 1)
            with trio.CancelScope() as waiting_b:
                waiting_b.deadline = trio.current_time() + 0.05
                await model.complete(request("b"))
            assert waiting_b.cancelled_caught
            assert gate.waiting == 0
            nursery.start_soon(model.complete, request("c"))
            await until(lambda: gate.waiting == 1)
            release.set()
    assert [r.body["messages"][0]["content"] for r in chat_server.received] == ["a", "c"]
    assert gate.in_use == gate.waiting == 0


async def test_waiting_for_a_connection_counts_against_the_timeout(
    chat_server: ChatServer, autojump_clock: trio.testing.MockClock
) -> None:
    """A call that gets no slot within its ``timeout`` says it waited for a
    connection (two models sharing one gate, as two sharing a client would)."""
    chat_server.script(Hang())
    gate = FifoGate(1)
    async with (
        OpenAICompatibleModel(chat_server.base_url, "m", gate=gate, timeout=100) as slow,
        OpenAICompatibleModel(chat_server.base_url, "m", gate=gate, timeout=10) as quick,
    ):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow.complete, request("a"))
            await until(lambda: chat_server.in_flight == 1)
            with pytest.raises(ModelBackendError) as caught:
                await quick.complete(request("b"))
            nursery.cancel_scope.cancel()
    assert str(caught.value) == (
        f"model call to {chat_server.base_url}/chat/completions timed out after 10 s"
        " waiting for a connection (all 1 in use; see max_connections)"
    )
    assert len(chat_server.received) == 1


async def test_a_stream_holds_its_slot_until_it_is_closed(chat_server: ChatServer) -> None:
    """With one slot, a call waits while a stream is open and goes once it is closed."""
    chat_server.script(
        Sse([chunk("par", role=True)], done=False, hang=True), Json(completion("next"))
    )
    gate = FifoGate(1)
    async with OpenAICompatibleModel(chat_server.base_url, "m", gate=gate) as model:
        async with trio.open_nursery() as nursery:
            async with aclosing(model.stream(request("a"))) as events:
                await events.__anext__()  # the first delta: the stream is open
                nursery.start_soon(model.complete, request("b"))
                await until(lambda: gate.waiting == 1)
            await until(lambda: gate.waiting == 0)
    assert len(chat_server.received) == 2
    assert gate.in_use == 0


async def test_the_models_own_pool_keeps_every_connection_alive(chat_server: ChatServer) -> None:
    """Two bursts of 30 calls on 30 connections: the second reuses the first's
    connections (httpx2's default would keep only 20 alive and reconnect)."""
    async with OpenAICompatibleModel(chat_server.base_url, "m", max_connections=30) as model:
        ports: list[set[int]] = []
        for burst in range(2):
            release = trio.Event()
            chat_server.script(*(Held(Json(completion("x")), release) for _ in range(30)))
            async with trio.open_nursery() as nursery:
                for _ in range(30):
                    nursery.start_soon(model.complete, request())
                await until(lambda: chat_server.in_flight == 30)
                release.set()
            ports.append({r.client_port for r in chat_server.received[30 * burst :]})
    assert len(ports[0]) == 30
    assert ports[1] == ports[0]


def test_max_connections_and_gate_are_exclusive() -> None:
    """A gate has its own size: giving both is refused."""
    with pytest.raises(ModelBackendError, match=r"^give max_connections or gate, not both"):
        OpenAICompatibleModel("http://x/v1", "m", max_connections=4, gate=FifoGate(4))


@pytest.mark.parametrize("size", [0, -3])
def test_max_connections_must_be_positive(size: int) -> None:
    with pytest.raises(ModelBackendError, match=r"^max_connections must be an integer >= 1, got"):
        OpenAICompatibleModel("http://x/v1", "m", max_connections=size)


async def test_every_slot_finds_a_connection_in_the_models_own_pools(
    chat_server: ChatServer,
) -> None:
    """45 calls on 40 slots, kept in pools of ``SHARD_CONNECTIONS`` (16, 16, 8):
    40 reach the server at once (a slot sent to a full pool would wait in its
    queue instead), 5 wait in the gate, and a second burst reuses the first's
    40 connections."""
    assert SHARD_CONNECTIONS < 40
    gate = FifoGate(40)
    async with OpenAICompatibleModel(chat_server.base_url, "m", gate=gate) as model:
        ports: list[set[int]] = []
        for burst in range(2):
            release = trio.Event()
            chat_server.script(*(Held(Json(completion("x")), release) for _ in range(45)))
            async with trio.open_nursery() as nursery:
                for _ in range(45):
                    nursery.start_soon(model.complete, request())
                await until(lambda: chat_server.in_flight == 40 and gate.waiting == 5)
                release.set()
            ports.append({r.client_port for r in chat_server.received[45 * burst :]})
    assert chat_server.most_in_flight == 40
    assert len(ports[0]) == 40
    assert ports[1] == ports[0]
