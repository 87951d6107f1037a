"""Overload over HTTP: ten times more concurrent turns than a configured bound,
against a slow scripted model.

The server (``serve_agentik``, its HTTP/1.1 server and all) runs on 127.0.0.1 in the
test's trio loop under a mock clock that jumps when the loop is idle, so the
model's latency is virtual time: a refusal that waited for a slot would show
as time passing. Storage is in memory, because the clock would jump while
SQLite's writer thread works. Every request carries an idempotency key.

What holds, for both bounds (queued turns per conversation,
``[limits] max_queued_turns``; live conversations, ``[limits]
max_conversations``): requests past the bound get 429 with ``Retry-After`` and
the ``overloaded`` code at once, while accepted turns take the model's
latency; every turn answered 200 is in the store exactly once and no refused
turn stored anything; resident memory grows by a bounded amount; afterwards
the server serves normally.
"""

from __future__ import annotations

import collections
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import httpx2
import pytest
import trio
import trio.testing

from agentik import ModelRequest, ModelResponse, Role
from agentik.models import ScriptedModel
from agentik.server import Limits, ServerConfig, serve_agentik
from agentik.storage import StorageBundle, in_memory_storage
from tests.reliability.helpers import check_history, history, rss_bytes

LATENCY = 2.0
"""Seconds (virtual) the model takes per call."""
RSS_BOUND = 32 * 1024 * 1024
"""About 7 MB measured, most of it the first burst of connections."""


def echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"re: {request.messages[-1].content}")


@pytest.fixture
def idle_clock() -> trio.testing.MockClock:
    """Virtual time that jumps after 50 ms of real idleness rather than at once
    (``autojump_clock``): a loopback handshake or write still in the kernel on
    a busy machine must not let it jump in the middle of the burst."""
    return trio.testing.MockClock(autojump_threshold=0.05)


@attrs.define
class Outcomes:
    """What the clients saw, by conversation; times are virtual seconds since the burst."""

    done: dict[str, list[str]] = attrs.Factory(lambda: collections.defaultdict(list))
    refused: dict[str, list[str]] = attrs.Factory(lambda: collections.defaultdict(list))
    refused_at: list[float] = attrs.Factory(list)
    done_at: list[float] = attrs.Factory(list)
    other: list[int] = attrs.Factory(list)
    """Statuses that were neither 200 nor 429 (there must be none)."""


@attrs.frozen
class Server:
    client: httpx2.AsyncClient
    storage: StorageBundle


@asynccontextmanager
async def running(limits: Limits) -> AsyncIterator[Server]:
    storage = in_memory_storage()
    stop = trio.Event()
    config = ServerConfig(port=0, limits=limits)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config,
                storage=storage,
                model=ScriptedModel(echo, latency=LATENCY),
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )
        # One connection per request in flight, so the burst is truly concurrent.
        unbounded = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx2.AsyncClient(base_url=url, timeout=600, limits=unbounded) as client:
            yield Server(client, storage)
        stop.set()


async def turn(client: httpx2.AsyncClient, conversation: str, text: str) -> httpx2.Response:
    return await client.post(
        f"/agentik/conversations/{conversation}/turns",
        json={"text": text, "idempotency_key": text},
    )


async def burst(client: httpx2.AsyncClient, requests: list[tuple[str, str]]) -> Outcomes:
    """Send every (conversation, text) at once; sort the answers."""
    seen = Outcomes()
    start = trio.current_time()

    async def one(conversation: str, text: str) -> None:
        reply = await turn(client, conversation, text)
        elapsed = trio.current_time() - start
        if reply.status_code == 200:
            assert reply.json()["text"] == f"re: {text}"
            seen.done[conversation].append(text)
            seen.done_at.append(elapsed)
        elif reply.status_code == 429:
            assert int(reply.headers["retry-after"]) >= 1
            assert reply.json()["error"]["code"] == "overloaded"
            seen.refused[conversation].append(text)
            seen.refused_at.append(elapsed)
        else:
            seen.other.append(reply.status_code)

    async with trio.open_nursery() as nursery:
        for conversation, text in requests:
            nursery.start_soon(one, conversation, text)
    return seen


async def check_store(storage: StorageBundle, seen: Outcomes, conversations: list[str]) -> None:
    """Every 200 turn stored exactly once, with valid history; no refused one stored."""
    for conversation in conversations:
        stored = await history(storage, conversation)
        check_history(stored, once=tuple(seen.done[conversation]))
        users = [m.content for m in stored if m.role is Role.USER]
        assert sorted(users) == sorted(seen.done[conversation])
        assert not set(users) & set(seen.refused[conversation])


async def metric(client: httpx2.AsyncClient, name: str) -> float:
    for line in (await client.get("/metrics")).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


async def test_queued_turns_past_the_bound(idle_clock: trio.testing.MockClock) -> None:
    """200 concurrent turns on 5 conversations with room for 4 queued each: the
    rest get 429 at once, every 200 turn is stored once, memory stays bounded."""
    bound, conversations, each = 4, 5, 40  # 10x the bound per conversation
    names = [f"q{c}" for c in range(conversations)]
    async with running(Limits(max_queued_turns=bound)) as server:
        gc.collect()
        before = rss_bytes()
        seen = await burst(server.client, [(c, f"{c}-t{t}") for c in names for t in range(each)])
        gc.collect()
        grown = rss_bytes() - before
        assert seen.other == []
        for name in names:
            # The bound counts turns waiting; the one the conversation already
            # took, if it took one before the bound filled, runs on top.
            assert bound <= len(seen.done[name]) <= bound + 1, name
            assert len(seen.done[name]) + len(seen.refused[name]) == each
        assert max(seen.refused_at) == 0  # refused at once: no model latency elapsed
        assert min(seen.done_at) >= LATENCY  # while accepted turns waited for the model
        assert grown < RSS_BOUND, f"RSS grew by {grown / 1e6:.1f} MB"
        await check_store(server.storage, seen, names)
        assert await metric(server.client, 'agentik_turns_total{outcome="overloaded"}') == sum(
            len(v) for v in seen.refused.values()
        )

        # Afterwards: a refused turn retried with its key runs; an accepted one
        # retried with its key is answered from history and adds nothing.
        name = names[0]
        retried = await turn(server.client, name, seen.refused[name][0])
        assert retried.status_code == 200
        seen.done[name].append(seen.refused[name].pop(0))
        again = await turn(server.client, name, seen.done[name][0])
        assert again.status_code == 200
        assert again.json()["text"] == f"re: {seen.done[name][0]}"
        await check_store(server.storage, seen, names)


async def test_live_conversations_past_the_bound(idle_clock: trio.testing.MockClock) -> None:
    """100 concurrent turns, each to a new conversation, with room for 10 live
    ones: exactly 10 run, the rest get 429 at once; once the idle ones retire,
    new conversations are served."""
    bound, requests = 10, 100  # 10x the bound
    names = [f"n{i}" for i in range(requests)]
    async with running(Limits(max_conversations=bound)) as server:
        gc.collect()
        before = rss_bytes()
        seen = await burst(server.client, [(name, f"{name}-t0") for name in names])
        gc.collect()
        grown = rss_bytes() - before
        assert seen.other == []
        assert sum(len(v) for v in seen.done.values()) == bound
        assert sum(len(v) for v in seen.refused.values()) == requests - bound
        assert max(seen.refused_at) == 0
        assert min(seen.done_at) >= LATENCY
        assert grown < RSS_BOUND, f"RSS grew by {grown / 1e6:.1f} MB"
        await check_store(server.storage, seen, names)
        assert await metric(server.client, "agentik_live_conversations") == bound

        # A live conversation takes more turns; a new one must wait until the
        # idle ones retire (idle_timeout, 60 s by default), then it is served.
        live = next(name for name in names if seen.done[name])
        assert (await turn(server.client, live, f"{live}-t1")).status_code == 200
        late = next(name for name in names if seen.refused[name])
        assert (await turn(server.client, late, f"{late}-t1")).status_code == 429
        await trio.sleep(120)
        assert (await turn(server.client, late, f"{late}-t1")).status_code == 200
        assert await metric(server.client, "agentik_live_conversations") == 1
