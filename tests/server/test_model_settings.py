"""``[model] timeout``, ``connect_timeout`` and ``max_retries`` reach the model
``agentik serve`` builds (issue 30, item 4).

The server runs in the test's trio loop on a mock clock that jumps once the
loop has been idle for 50 ms of real time, against a real Chat Completions
endpoint on 127.0.0.1 (``tests.models.chat_server``) that hangs or fails as
scripted, or an address whose connects never finish. So a 30 s timeout is 30 s
of virtual time, and the turn's HTTP answer shows which setting ended it.
Storage is in memory: the clock would jump while SQLite's writer thread works.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
import trio
import trio.testing

from agentik.server import ModelSettings, ServerConfig, serve_agentik
from agentik.storage import in_memory_storage
from tests.models.blackhole import blackholed_port
from tests.models.chat_server import ChatServer, Hang, Json
from tests.serve_refusal import refused_serve


@pytest.fixture
def idle_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.05)


@asynccontextmanager
async def serving(model: ModelSettings) -> AsyncIterator[httpx2.AsyncClient]:
    config = ServerConfig(port=0, model=model)
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config,
                storage=in_memory_storage(),
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )
        async with httpx2.AsyncClient(base_url=url, timeout=3600) as client:
            yield client
        stop.set()


async def timed_turn(client: httpx2.AsyncClient) -> tuple[httpx2.Response, float]:
    start = trio.current_time()
    reply = await client.post("/agentik/conversations/c1/turns", json={"text": "hello"})
    return reply, trio.current_time() - start


@pytest.fixture
async def chat_server(nursery: trio.Nursery) -> AsyncIterator[ChatServer]:
    server = ChatServer()
    await server.start(nursery)
    yield server
    assert server.problems == []


async def test_a_hung_backend_fails_the_turn_after_timeout(
    chat_server: ChatServer, idle_clock: trio.testing.MockClock
) -> None:
    """With ``timeout = 30`` a backend that never answers fails the turn (502)
    after 30 s, not after the model's default of 600 s."""
    chat_server.script(Hang())
    model = ModelSettings(base_url=chat_server.base_url, model="m", timeout=30.0, max_retries=0)
    async with serving(model) as client:
        reply, elapsed = await timed_turn(client)
    assert reply.status_code == 502, reply.text
    assert reply.json()["error"]["code"] == "model_error"
    assert "timed out after 30 s" in reply.json()["error"]["message"]
    assert 30 <= elapsed < 31


@pytest.mark.parametrize(("max_retries", "attempts"), [(0, 1), (1, 2), (None, 3)])
async def test_max_retries_bounds_the_attempts(
    chat_server: ChatServer,
    idle_clock: trio.testing.MockClock,
    max_retries: int | None,
    attempts: int,
) -> None:
    """A backend answering 503 is tried ``max_retries + 1`` times (None: the
    model's default of 2 retries), then the turn fails."""
    chat_server.script(*[Json({"error": {"message": "busy"}}, status=503)] * attempts)
    model = ModelSettings(base_url=chat_server.base_url, model="m", max_retries=max_retries)
    async with serving(model) as client:
        reply, _ = await timed_turn(client)
    assert reply.status_code in (502, 503), reply.text  # 503 once 429/503 map to model_unavailable
    assert f"gave up after {attempts} attempts" in reply.json()["error"]["message"]
    assert len(chat_server.received) == attempts


async def test_a_blackholed_backend_fails_after_connect_timeout(
    idle_clock: trio.testing.MockClock,
) -> None:
    """A backend whose connects are never answered fails the turn after
    ``connect_timeout`` (each attempt), long before ``timeout``."""
    with blackholed_port() as port:
        model = ModelSettings(
            base_url=f"http://127.0.0.1:{port}/v1",
            model="m",
            timeout=600.0,
            connect_timeout=5.0,
            max_retries=0,
        )
        async with serving(model) as client:
            reply, elapsed = await timed_turn(client)
    assert reply.status_code == 502, reply.text
    assert "ConnectTimeout" in reply.json()["error"]["message"]
    assert 5 <= elapsed < 6


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("AGENTIK_MODEL_TIMEOUT", "nan", "[model] timeout must be a positive number, got 'nan'"),
        (
            "AGENTIK_MODEL_CONNECT_TIMEOUT",
            "\u0665",
            "[model] connect_timeout must be a positive number, got '\u0665'",
        ),
        ("AGENTIK_MODEL_MAX_RETRIES", "-1", "[model] max_retries must be an integer >= 0, got -1"),
    ],
)
async def test_serve_refuses_a_bad_value_in_one_line(
    tmp_path: Path, variable: str, value: str, line: str
) -> None:
    """``agentik serve`` (a real process) exits 2 with one line naming the setting."""
    env = {"AGENTIK_MODEL_BASE_URL": "http://127.0.0.1:9/v1", "AGENTIK_MODEL": "m", variable: value}
    assert await refused_serve(tmp_path, env) == [f"agentik serve: {variable}: {line}"]
