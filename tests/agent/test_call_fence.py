"""A model call that waited in a queue (the model's limits) runs the
conversation's fence once admitted, right before it would send: a node that
lost the conversation meanwhile (its lease lapsed, a pause froze it past the
lease) sends nothing, so its new owner's calls and this node's never
overlap; the turn ends interrupted, as at the turn's own checks."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import trio
import trio.testing

from agentik import Message, ModelRequest, ModelResponse, Role, TurnError
from agentik.agent import open_chat_agent
from agentik.models import (
    ModelLimits,
    OpenAICompatibleModel,
    ScriptedModel,
    current_call_fence,
    pass_fence,
)
from agentik.storage import LeaseState, in_memory_storage
from tests.asgi import answer_lifespan, read_body, serve_on_loopback
from tests.models.chat_server import completion


@attrs.define
class Tenures:
    """A node's hold on conversations, which the test takes away: the part
    of ``ConversationOwnership`` an agent uses."""

    lost: set[str] = attrs.Factory(set)

    def owns(self, conversation_id: str) -> bool:
        return True

    async def claim(self, conversation_id: str) -> None:
        return None

    def tenure(self, conversation_id: str) -> str | None:
        return None if conversation_id in self.lost else "node-a/7/1"

    @contextlib.contextmanager
    def running(self, conversation_id: str) -> Iterator[None]:
        yield

    def on_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
        return lambda: None

    on_gained = on_peers = on_lost

    async def advertise(self, url: str) -> None:
        return None

    @property
    def live_nodes(self) -> int:
        return 1

    def lease_state(self) -> LeaseState:
        return LeaseState(
            node_id="node-a",
            valid=True,
            lease_seconds=30.0,
            conversations=0,
            live_nodes=1,
            renewed_seconds_ago=0.0,
            valid_for_seconds=30.0,
        )

    def peer_urls(self) -> frozenset[str]:
        return frozenset()

    def holder_url(self, conversation_id: str) -> str | None:
        return None


async def test_a_call_admitted_after_the_node_lost_the_conversation_is_never_sent() -> None:
    tenures = Tenures()
    storage = attrs.evolve(in_memory_storage(), ownership=tenures)
    release = trio.Event()
    asked: list[str] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        text = request.messages[-1].content
        asked.append(text)
        if text == "a":
            await release.wait()  # holds the one slot while b waits for it
        return ModelResponse(text=f"answer to {text}")

    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=storage,
        builtin_tools=False,
        model_limits=ModelLimits(max_concurrent=1),
    ) as agent:
        outcomes: dict[str, object] = {}

        async def send(conversation: str, text: str) -> None:
            try:
                outcomes[conversation] = (await agent.send(conversation, text)).text
            except TurnError as exc:
                outcomes[conversation] = exc.code

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, "ca", "a")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(send, "cb", "b")
            await trio.testing.wait_all_tasks_blocked()
            assert asked == ["a"]  # b checked its tenure and waits for the slot
            tenures.lost.add("cb")  # meanwhile its conversation moved away
            release.set()
    assert asked == ["a"], "a node sent a call for a conversation it no longer held"
    assert outcomes == {"ca": "answer to a", "cb": "interrupted"}


async def test_the_fence_runs_only_where_a_conversation_set_one() -> None:
    """Outside a conversation's task (and outside a cluster) there is no
    fence: ``pass_fence`` does nothing, not even a checkpoint. With one, it
    runs it and raises ``Cancelled`` if the turn's scope is cancelled then."""
    assert current_call_fence.get() is None
    with trio.CancelScope() as scope:
        scope.cancel()
        await pass_fence()
    assert not scope.cancelled_caught
    ran: list[int] = []
    token = current_call_fence.set(lambda: ran.append(1))
    try:
        with trio.CancelScope() as scope:
            await pass_fence()
        assert ran == [1] and not scope.cancelled_caught
        with trio.CancelScope() as scope:
            scope.cancel()
            await pass_fence()
        assert ran == [1, 1] and scope.cancelled_caught
    finally:
        current_call_fence.reset(token)


async def test_an_openai_compatible_call_runs_the_fence_once_it_has_a_connection() -> None:
    """The backend agentik serve uses: a call that waited for a connection of
    its gate runs the fence it was made under before it sends, and each
    retry again; a fence that cancels its turn leaves the server unasked."""
    asked: list[str] = []
    release, a_arrived = trio.Event(), trio.Event()

    async def server(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        body = json.loads(await read_body(receive))
        text = body["messages"][-1]["content"]
        asked.append(text)
        if text == "a":
            a_arrived.set()
            await release.wait()
        answer = json.dumps(completion(f"answer to {text}")).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    def request(text: str) -> ModelRequest:
        return ModelRequest((Message(Role.USER, text),))

    async with trio.open_nursery() as nursery:
        url = await serve_on_loopback(nursery, server)
        async with OpenAICompatibleModel(url + "/v1", "m", max_connections=1) as model:
            moved = False
            outcome: list[str] = []

            async def call_b(task_status: trio.TaskStatus[None]) -> None:
                with trio.CancelScope() as turn:

                    def fence() -> None:
                        if moved:
                            turn.cancel()

                    current_call_fence.set(fence)
                    task_status.started()
                    outcome.append((await model.complete(request("b"))).text or "")
                outcome.append("cancelled" if turn.cancelled_caught else "done")

            async with trio.open_nursery() as calls:
                calls.start_soon(model.complete, request("a"))
                await a_arrived.wait()
                await calls.start(call_b)
                await trio.testing.wait_all_tasks_blocked()  # b waits for the one connection
                assert asked == ["a"]
                moved = True
                release.set()
            assert asked == ["a"], "a call whose turn was cancelled by its fence was sent"
            assert outcome == ["cancelled"]
            moved = False
            outcome.clear()  # the same model, the fence passed: sent as usual
            async with trio.open_nursery() as calls:
                await calls.start(call_b)
            assert asked == ["a", "b"] and outcome == ["answer to b", "done"]
        nursery.cancel_scope.cancel()
