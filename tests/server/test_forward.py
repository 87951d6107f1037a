"""Forwarding inside the cluster (docs/scale-out.md, "Forwarding"): several
``agentik serve`` processes on one PostgreSQL database (tests/cluster.py),
where a request for a conversation another live node owns is proxied to the
owner and its answer returned as is: JSON turns, SSE streams (passed through
as they come, the client's leaving passed on), A2A and AG-UI; ``[cluster]
forward = false`` keeps the 307; a request that was forwarded once is never
forwarded again; and a forwarded request whose owner dies waits for the new
owner instead of failing.

Real processes, a real database, real sockets and real clients: the waits
are real time, kept short (leases of 2 s) and bounded.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx2
import trio
from a2a.client import ClientConfig, create_client

from tests.cluster import Node, RecordingModel, owner_url, shards_spread, start_node, stop_nodes
from tests.postgres import fresh_database
from tests.server.a2a_support import A2A_1, user_message
from tests.server.agui_rules import check_events, parse_sse
from tests.server.test_agui import run_input

LEASE = 2.0
TURNS = "/agentik/conversations/{}/turns"
SSE = {"Accept": "text/event-stream"}


@attrs.frozen
class Cluster:
    database: str
    model: RecordingModel
    nodes: list[Node]
    client: httpx2.AsyncClient

    async def split(self, conversation: str) -> tuple[Node, Node]:
        """(owner, another node) of ``conversation``: the holder of its shard."""
        owner = await owner_url(self.database, conversation)
        (node,) = [n for n in self.nodes if n.url == owner]
        (other,) = [n for n in self.nodes if n.url != owner]
        return node, other

    async def turn(self, node: Node, conversation: str, text: str, **extra: Any) -> httpx2.Response:
        return await self.client.post(
            node.url + TURNS.format(conversation), json={"text": text, **extra}
        )


@asynccontextmanager
async def cluster(
    postgres_dsn: str,
    tmp_path: Path,
    *,
    delay: float = 0.0,
    settings: dict[str, str] | None = None,
) -> AsyncIterator[Cluster]:
    """Two nodes on a fresh database, a model answering after ``delay`` s."""
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    model = RecordingModel(delay=delay)
    async with trio.open_nursery() as nursery:
        model_url = await model.start(nursery)
        nodes = [
            await start_node(
                nursery, database, model_url, lease=LEASE, cwd=tmp_path, settings=settings
            )
            for _ in range(2)
        ]
        try:
            await shards_spread(database, 2)  # no shard being handed off
            with trio.fail_after(90):
                async with httpx2.AsyncClient(timeout=30) as client:
                    yield Cluster(database, model, nodes, client)
        finally:
            await stop_nodes(nodes)
        nursery.cancel_scope.cancel()


def frames(text: str) -> list[tuple[str | None, Any]]:
    """An SSE body's events as (name, data), comments skipped."""
    found = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        name = next((ln.removeprefix("event: ") for ln in lines if ln.startswith("event:")), None)
        data = next(ln.removeprefix("data: ") for ln in lines if ln.startswith("data:"))
        found.append((name, json.loads(data)))
    return found


async def test_native_turns_and_streams_are_answered_by_the_owner_through_any_node(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A turn sent to the node that does not own its conversation gets the
    owner's answer (no redirect): the same body the owner gives for the same
    turn asked again with its key, an SSE stream event for event as a
    direct stream, and the turn runs once, on the owner."""
    async with cluster(postgres_dsn, tmp_path) as c:
        first = await c.turn(c.nodes[0], "n1", "n1 0")
        assert first.status_code == 200, first.text
        owner, other = await c.split("n1")
        forwarded = await c.turn(other, "n1", "n1 1", idempotency_key="k1")
        assert forwarded.status_code == 200, forwarded.text
        assert forwarded.json()["text"] == "answer to n1 1"
        direct = await c.turn(owner, "n1", "n1 1", idempotency_key="k1")
        assert direct.status_code == 200, direct.text
        assert forwarded.content == direct.content
        assert forwarded.headers["content-type"] == direct.headers["content-type"]
        assert len(c.model.calls["n1"]) == 2, "the turn ran once"
        assert not any("conversation=n1 outcome=finished" in ln for ln in other.log)

        streamed = await c.client.post(
            other.url + TURNS.format("n1"), json={"text": "n1 2"}, headers=SSE
        )
        straight = await c.client.post(
            owner.url + TURNS.format("n1"), json={"text": "n1 3"}, headers=SSE
        )
        for response in (streamed, straight):
            assert response.status_code == 200, response.text
            assert response.headers["content-type"].startswith("text/event-stream")
        via, own = frames(streamed.text), frames(straight.text)
        assert [name for name, _ in via] == [name for name, _ in own]
        assert via[-1][1]["result"]["text"] == "answer to n1 2"
        assert own[-1][1]["result"]["text"] == "answer to n1 3"
        assert len(c.model.calls["n1"]) == 4
    assert c.model.overlaps() == []


async def test_a_first_turn_goes_to_the_shards_holder_without_the_handler(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A new conversation's first turns, sent to the node that does not hold
    its shard, go straight to the holder from the shard map: that node's
    handler never runs for them (it logs no refused turn), and every one is
    answered by the holder. A read is served where it lands."""
    async with cluster(postgres_dsn, tmp_path) as c:
        owner, other = await c.split("h0")
        names = [f"h{i}" for i in range(40)]
        theirs = [n for n in names if await owner_url(c.database, n) == owner.url][:5]
        for name in theirs:
            response = await c.turn(other, name, f"{name} 1")
            assert response.status_code == 200, response.text
            assert response.json()["text"] == f"answer to {name} 1"
            assert any(f"conversation={name} outcome=finished" in ln for ln in owner.log)
        assert not any("refused:owned_elsewhere" in ln for ln in other.log)
        history = await c.client.get(other.url + f"/agentik/conversations/{theirs[0]}/messages")
        assert history.status_code == 200, history.text
        assert not any(f"{theirs[0]}/messages" in ln for ln in owner.log), "a read was forwarded"


async def test_a_stream_is_passed_through_as_it_comes_and_a_client_leaving_ends_it_at_the_owner(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """With a slow model, the owner's heartbeats reach the client through the
    forwarding node before the answer exists (chunk by chunk, not buffered);
    a client that leaves mid-stream closes the owner's stream too: the owner
    logs the turn ``disconnected``, not ``finished``. And a cancel sent to
    the node that does not own the conversation cancels the owner's turn."""
    settings = {"AGENTIK_SSE_HEARTBEAT": "1"}
    async with cluster(postgres_dsn, tmp_path, delay=4.0, settings=settings) as c:
        first = await c.turn(c.nodes[0], "s1", "s1 0")
        assert first.status_code == 200, first.text
        owner, other = await c.split("s1")
        began = time.monotonic()
        async with c.client.stream(
            "POST", other.url + TURNS.format("s1"), json={"text": "s1 1"}, headers=SSE
        ) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_raw():
                if b": keep-alive" in chunk:
                    break
            assert time.monotonic() - began < 3.5, "the heartbeat waited for the answer"
        # The client left: the owner's stream ends now, long before the model answers.
        with trio.fail_after(3):
            while not any(  # noqa: ASYNC110 (another process's log)
                "conversation=s1 outcome=disconnected" in line for line in owner.log
            ):
                await trio.sleep(0.05)
        assert sum("conversation=s1 outcome=finished" in ln for ln in owner.log) == 1  # s1 0

        # Cancelling a turn sent to the node that does not run it: forwarded to
        # the owner, which cancels it (not "nothing to cancel" where it is not).
        answer: list[httpx2.Response] = []

        async def slow_turn() -> None:
            answer.append(await c.turn(owner, "s1", "s1 2"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_turn)
            await trio.sleep(1.0)  # the turn is in its model call (4 s)
            cancel = await c.client.post(other.url + "/agentik/conversations/s1/cancel")
            assert cancel.status_code == 200, cancel.text
            # s1 2, and s1 1 if still running (its client left; it completes)
            assert cancel.json()["cancelled"] >= 1, cancel.text
        (turn,) = answer
        assert turn.status_code == 409, turn.text
        assert turn.json()["error"]["code"] == "cancelled"

        # A2A CancelTask of a running task, sent to the other node: forwarded
        # to the owner, whose task ends CANCELED (not only marked so elsewhere).
        async def rpc(node: Node, method: str, params: dict[str, Any]) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            response = await c.client.post(node.url + "/a2a", json=body, headers=A2A_1)
            assert response.status_code == 200, response.text
            reply: dict[str, Any] = response.json()
            return reply

        message = {"messageId": "m-s1", "role": "ROLE_USER", "parts": [{"text": "s1 3"}]}
        sent = await rpc(
            owner,
            "SendMessage",
            {
                "message": {**message, "contextId": "s1"},
                "configuration": {"returnImmediately": True},
            },
        )
        task = sent["result"]["task"]["id"]
        await trio.sleep(1.0)  # its turn is in its model call (4 s)
        cancelled = await rpc(other, "CancelTask", {"id": task})
        assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancelled
        with trio.fail_after(3):  # the owner's turn ended now, not after the model's answer
            while not any(  # noqa: ASYNC110 (another process's log)
                "transport=a2a conversation=s1 outcome=failed:cancelled" in ln for ln in owner.log
            ):
                await trio.sleep(0.05)


async def test_a2a_send_and_stream_through_the_node_that_does_not_own_the_context(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """The a2a-sdk client, talking to the node that does not own the context,
    gets the owner's task (blocking send) and its event stream."""
    async with cluster(postgres_dsn, tmp_path) as c:
        first = await c.turn(c.nodes[0], "a1", "a1 0")
        assert first.status_code == 200, first.text
        owner, other = await c.split("a1")
        async with httpx2.AsyncClient(timeout=30, headers=A2A_1) as for_sdk:
            for streaming in (False, True):
                sdk = await create_client(
                    other.url,
                    client_config=ClientConfig(streaming=streaming, httpx_client=for_sdk),
                )
                try:
                    text = f"a1 {1 + streaming}"
                    answers = [
                        r
                        async for r in sdk.send_message(
                            user_message(text, f"m{streaming}", context_id="a1")
                        )
                    ]
                finally:
                    await sdk.close()
                assert answers, "no answer"
                shown = str(answers)
                assert f"answer to {text}" in shown, shown
                assert "TASK_STATE_COMPLETED" in shown or "completed" in shown.lower(), shown
        assert len(c.model.calls["a1"]) == 3, "each turn ran once"
        assert (
            sum("turn transport=a2a conversation=a1 outcome=finished" in ln for ln in owner.log)
            == 2
        )
        assert not any("transport=a2a conversation=a1 outcome=finished" in ln for ln in other.log)


async def test_agui_run_through_the_node_that_does_not_own_the_thread(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """An AG-UI run sent to the node that does not own its thread streams the
    owner's events, valid by the protocol's own models and ordering rules."""
    async with cluster(postgres_dsn, tmp_path) as c:
        first = await c.turn(c.nodes[0], "g1", "g1 0")
        assert first.status_code == 200, first.text
        owner, other = await c.split("g1")
        response = await c.client.post(
            other.url + "/agui", json=run_input("g1", "g1 1"), headers=SSE
        )
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        events = check_events(parse_sse(response.text))
        assert "answer to g1 1" in "".join(getattr(e, "delta", "") for e in events)
        assert any("turn transport=agui conversation=g1 outcome=finished" in ln for ln in owner.log)
        assert not any("transport=agui conversation=g1 outcome=finished" in ln for ln in other.log)


async def test_forward_false_keeps_the_redirect_and_a_forwarded_request_is_never_forwarded_again(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """``[cluster] forward = false``: 307 to the owner, as before. And the
    loop guard: a request that carries ``agentik-forwarded`` is answered 307
    where it would be forwarded, never sent on."""
    async with cluster(postgres_dsn, tmp_path, settings={"AGENTIK_FORWARD": "false"}) as c:
        owner, other = await c.split("r1")  # the holder of its shard
        first = await c.turn(owner, "r1", "r1 0")
        assert first.status_code == 200, first.text
        hop = await c.turn(other, "r1", "r1 1")
        assert hop.status_code == 307, hop.text
        assert hop.headers["location"] == owner.url + TURNS.format("r1")
        assert hop.json()["error"]["code"] == "owned_elsewhere"
    async with cluster(postgres_dsn, tmp_path) as c:
        first = await c.turn(c.nodes[0], "r2", "r2 0")
        assert first.status_code == 200, first.text
        owner, other = await c.split("r2")
        looped = await c.client.post(
            other.url + TURNS.format("r2"),
            json={"text": "r2 1"},
            headers={"agentik-forwarded": "some-node"},
        )
        assert looped.status_code == 307, looped.text
        assert looped.headers["location"] == owner.url + TURNS.format("r2")
        assert len(c.model.calls["r2"]) == 1, "the looped request ran nowhere"
        deleted = await c.client.delete(other.url + "/agentik/conversations/r2")
        assert deleted.status_code == 204, deleted.text
        for node in c.nodes:
            gone = await c.client.get(node.url + "/agentik/conversations/r2/usage")
            assert gone.status_code == 404, gone.text


async def test_a_forwarded_turn_whose_owner_dies_waits_for_the_new_owner(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """SIGKILL of the owner while it runs a forwarded turn: the forwarding
    node's client gets no error; the request waits (the owner refuses
    connections, its lease still live), then the conversation is claimed
    anew and the turn answered, within the lease + 2 s of the kill."""
    async with cluster(postgres_dsn, tmp_path) as c:
        c.model.slow_once["k1 1"] = 2.0  # at the owner; at the new owner at once
        first = await c.turn(c.nodes[0], "k1", "k1 0")
        assert first.status_code == 200, first.text
        owner, other = await c.split("k1")
        answer: list[httpx2.Response] = []

        async def forwarded() -> None:
            answer.append(await c.turn(other, "k1", "k1 1", idempotency_key="k1-1"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(forwarded)
            await trio.sleep(0.7)  # the owner is inside the model call (2 s)
            owner.kill()
            killed = time.monotonic()
        (response,) = answer
        assert response.status_code == 200, response.text
        assert response.json()["text"] == "answer to k1 1"
        assert time.monotonic() - killed < LEASE + 2
        assert not any("owner_unavailable" in ln for ln in other.log)
        assert any("forward owner=" in ln and "unreachable" in ln for ln in other.log)
        assert await owner_url(c.database, "k1") == other.url


async def test_turns_forwarded_to_a_frozen_owner_go_to_the_shards_new_holder(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """SIGSTOP of the owner (it still accepts connections, answers nothing):
    a turn forwarded to it while it ran the turn, and one sent after it
    froze, both wait until its lease expires, then are answered by the
    shards' new holder (the other node), within the lease + 3 s of the
    freeze: no 503, no hang until the owner wakes."""
    async with cluster(postgres_dsn, tmp_path) as c:
        owner, other = await c.split("z0")
        names = [f"z{i}" for i in range(60)]
        mine = [n for n in names if await owner_url(c.database, n) == owner.url][:2]
        running, later = mine
        for name in mine:  # each conversation's first turn, on the owner
            assert (await c.turn(owner, name, f"{name} 0")).status_code == 200
        c.model.slow_once[f"{running} 1"] = 3.0  # at the owner; at the new holder at once
        answers: dict[str, httpx2.Response] = {}

        async def forwarded(name: str) -> None:
            answers[name] = await c.turn(other, name, f"{name} 1", idempotency_key=f"{name}-1")

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(forwarded, running)
                await trio.sleep(0.7)  # the owner is inside the model call
                owner.process.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
                nursery.start_soon(forwarded, later)
            took = time.monotonic() - stopped
        finally:
            owner.process.send_signal(signal.SIGCONT)
        for name in mine:
            assert answers[name].status_code == 200, answers[name].text
            assert answers[name].json()["text"] == f"answer to {name} 1"
            assert await owner_url(c.database, name) == other.url
        assert took < LEASE + 3
        assert any("lost its lease" in ln or "no longer live" in ln for ln in other.log)
