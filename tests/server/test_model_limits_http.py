"""The model's limits and a rate-limited model over HTTP, on a real server on
127.0.0.1 with SQLite, through every transport (native, AG-UI, A2A):

- ``[model] requests_per_minute``: a turn that would wait past
  ``max_queue_wait`` is answered 429 with ``Retry-After`` before anything is
  stored; ``/health`` and ``/metrics`` show the limits and the refusals;
- a backend answering 429 past its retries: the native API answers 503 with
  the backend's ``Retry-After`` (a stream ends ``turn_failed`` with it),
  AG-UI ends the run with ``RUN_ERROR`` ``model_unavailable``, A2A's task
  fails with the reason.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from ag_ui.core import RunErrorEvent

from agentik import ModelBackendError, ModelLimits, ModelRequest, ModelResponse, ScriptedModel
from agentik.server import ServerConfig, serve_agentik
from agentik.storage import open_sqlite_storage
from tests.server.agui_rules import check_events, parse_sse
from tests.server.conftest import Running, start_server
from tests.server.test_agui import run_input

A2A_1 = {"A2A-Version": "1.0"}


def a2a_send(text: str, message_id: str, context_id: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": message_id,
                "contextId": context_id,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
        },
    }


@pytest.fixture
async def limited(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Running]:
    """The plain demo server at one request a minute, waiting at most 30 s."""
    limits = ModelLimits(requests_per_minute=1, max_queue_wait=30)
    async for running in start_server(nursery, tmp_path, toolsets=(), model_limits=limits):
        yield running


async def test_a_turn_past_max_queue_wait_is_429_with_retry_after_and_stores_nothing(
    limited: Running,
) -> None:
    """The first turn takes the minute's one request; a turn of another
    conversation would wait about 60 s, past 30: 429 with ``Retry-After``
    (about 30), on every transport, and none of them stored anything."""
    client = limited.client
    first = await client.post("/agentik/conversations/a/turns", json={"text": "hello"})
    assert first.status_code == 200, first.text

    refused = await client.post("/agentik/conversations/b/turns", json={"text": "hello"})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "overloaded"
    assert "max_queue_wait=30" in refused.json()["error"]["message"]
    assert 25 <= int(refused.headers["Retry-After"]) <= 31

    streamed = await client.post(
        "/agentik/conversations/c/turns",
        json={"text": "hello"},
        headers={"Accept": "text/event-stream"},
    )
    assert streamed.status_code == 429
    assert "Retry-After" in streamed.headers

    agui = await client.post(
        "/agui", json=run_input("d", "hello"), headers={"Accept": "text/event-stream"}
    )
    assert agui.status_code == 429
    assert "Retry-After" in agui.headers

    a2a = await client.post("/a2a", json=a2a_send("hello", "m1", "e"), headers=A2A_1)
    assert a2a.status_code == 429
    assert "Retry-After" in a2a.headers

    for conversation in ("b", "c", "d", "e"):
        messages = await client.get(f"/agentik/conversations/{conversation}/messages")
        assert messages.status_code in (200, 404)
        if messages.status_code == 200:
            assert messages.json()["messages"] == []

    health = (await client.get("/health")).json()
    assert health["model_limits"] == {
        "requests_per_minute": 1,
        "tokens_per_minute": None,
        "max_concurrent": None,
        "max_queue_wait": 30.0,
        "nodes": 1,
        "paused_for_seconds": None,
        "queued": 0,
        "in_flight": 0,
    }
    metrics = (await client.get("/metrics")).text
    assert "agentik_model_refused_total 4" in metrics
    assert "agentik_model_requests_granted_total 1" in metrics


def _refusing(status: int, retry_after: float | None) -> ScriptedModel:
    async def respond(request: ModelRequest) -> ModelResponse:
        raise ModelBackendError(
            f"model backend answered HTTP {status}: slow down (gave up after 3 attempts)",
            status=status,
            retry_after=retry_after,
        )

    return ScriptedModel(respond)


@pytest.fixture
async def unavailable(tmp_path: Path) -> AsyncIterator[tuple[str, Any]]:
    """A server whose model answers 429 with Retry-After 7, past its retries."""
    import httpx2

    config = ServerConfig(port=0, database=str(tmp_path / "agentik.db"))
    async with open_sqlite_storage(tmp_path / "agentik.db") as storage, trio.open_nursery() as n:
        stop = trio.Event()
        url = await n.start(
            lambda task_status: serve_agentik(
                config,
                shutdown_trigger=stop.wait,
                storage=storage,
                model=_refusing(429, 7.0),
                task_status=task_status,
            )
        )
        async with httpx2.AsyncClient(base_url=url, timeout=20) as client:
            yield url, client
        stop.set()


async def test_a_rate_limited_backend_is_503_with_its_retry_after(
    unavailable: tuple[str, Any],
) -> None:
    """Native: 503 ``model_unavailable`` with ``Retry-After: 7``; streamed, the
    ``turn_failed`` event carries the code and ``retry_after``."""
    _, client = unavailable
    reply = await client.post("/agentik/conversations/x/turns", json={"text": "hi"})
    assert reply.status_code == 503
    assert reply.headers["Retry-After"] == "7"
    assert reply.json()["error"]["code"] == "model_unavailable"
    streamed = await client.post(
        "/agentik/conversations/x/turns",
        json={"text": "hi"},
        headers={"Accept": "text/event-stream"},
    )
    assert streamed.status_code == 200
    frames = [f for f in streamed.text.split("\n\n") if f.startswith("event: turn_failed")]
    [frame] = frames
    data = json.loads(frame.split("\ndata: ", 1)[1])
    assert (data["code"], data["retry_after"]) == ("model_unavailable", 7.0)


async def test_agui_ends_with_run_error_model_unavailable(
    unavailable: tuple[str, Any],
) -> None:
    """AG-UI: the run ends with ``RUN_ERROR`` whose code is ``model_unavailable``."""
    _, client = unavailable
    response = await client.post(
        "/agui", json=run_input("t", "hi"), headers={"Accept": "text/event-stream"}
    )
    assert response.status_code == 200
    events = check_events(parse_sse(response.text))
    error = events[-1]
    assert isinstance(error, RunErrorEvent)
    assert error.code == "model_unavailable"


async def test_a2a_task_fails_with_the_reason(unavailable: tuple[str, Any]) -> None:
    """A2A: the task is FAILED, its status message saying the model is unavailable."""
    _, client = unavailable
    reply = await client.post("/a2a", json=a2a_send("hi", "m1", "ctx"), headers=A2A_1)
    assert reply.status_code == 200, reply.text
    task = reply.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    reason = json.dumps(task["status"])
    assert "the turn failed (model_unavailable): the model is unavailable" in reason
