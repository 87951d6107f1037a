"""Every 503 the server sends carries ``Retry-After`` (RFC 9110 §15.6.4): a
client or load balancer told nothing may retry at once, in a loop.

Walks every route of the app (``test_fuzz_http.ROUTES``, which its own test
keeps equal to the app's route table), with a plausible request for each
(``REQUESTS``; the native turn also streamed, A2A with each method), in the
states where the server answers 503:

- the agent is closed (a server shutting down): every route that runs a turn
  or a decision refuses;
- the storage is gone and the node's lease has lapsed (several nodes on
  PostgreSQL: the node's database stops taking connections and its sessions
  are ended, the lease measured on a ``MockClock`` jumped past it): every
  route that reads or writes refuses, and ``/health`` is 503.

Each state checks the header on every 503 and that the routes expected to
refuse did (so the walk cannot pass by refusing nothing). Real servers on
127.0.0.1 (the app on agentik's HTTP engine), a real SQLite file, the real
PostgreSQL, a real HTTP client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import httpx2
import psycopg
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict
from starlette.types import Message, Receive, Scope, Send
from trio.testing import MockClock

from agentik import ModelRequest, ModelResponse, ScriptedModel
from agentik.agent import ChatAgent, open_chat_agent
from agentik.server import ServerConfig, ServerContext, build_app
from agentik.server._app import Guard
from agentik.server.http import serve as http_serve
from agentik.storage import (
    StorageBundle,
    open_postgres_storage,
    open_sqlite_storage,
    writer_stats,
)
from tests.postgres import fresh_database
from tests.server.test_fuzz_http import ROUTES

A2A = {"A2A-Version": "1.0"}
SSE = {"Accept": "text/event-stream"}


def a2a(method: str, params: dict[str, object]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


MESSAGE = {
    "message": {
        "messageId": "m1",
        "role": "ROLE_USER",
        "parts": [{"text": "hello"}],
        "contextId": "c1",
    }
}
AGUI = {
    "threadId": "c1",
    "runId": "r1",
    "messages": [{"id": "u1", "role": "user", "content": "hello"}],
    "state": {},
    "tools": [],
    "context": [],
    "forwardedProps": {},
}
# (label, method, path, body, headers): a plausible request for every route.
REQUESTS: list[tuple[str, str, str, bytes | None, dict[str, str]]] = [
    ("health", "GET", "/health", None, {}),
    ("metrics", "GET", "/metrics", None, {}),
    ("turn", "POST", "/agentik/conversations/c1/turns", b'{"text": "hi"}', {}),
    ("turn streamed", "POST", "/agentik/conversations/c1/turns", b'{"text": "hi"}', SSE),
    ("list", "GET", "/agentik/conversations", None, {}),
    ("messages", "GET", "/agentik/conversations/c1/messages", None, {}),
    ("memory", "GET", "/agentik/conversations/c1/memory", None, {}),
    (
        "archive",
        "POST",
        "/agentik/conversations/c1/memory/archive",
        b'{"entry_ids": [1]}',
        {},
    ),
    ("archived", "GET", "/agentik/conversations/c1/memory/archived", None, {}),
    ("summary", "GET", "/agentik/conversations/c1/summary", None, {}),
    ("summaries", "GET", "/agentik/conversations/c1/summaries", None, {}),
    ("toolsets", "GET", "/agentik/conversations/c1/toolsets", None, {}),
    ("usage", "GET", "/agentik/conversations/c1/usage", None, {}),
    ("export", "GET", "/agentik/conversations/c1/export", None, {}),
    ("cancel", "POST", "/agentik/conversations/c1/cancel", None, {}),
    ("delete", "DELETE", "/agentik/conversations/c1", None, {}),
    ("approvals", "GET", "/agentik/conversations/c1/approvals", None, {}),
    (
        "decide",
        "POST",
        "/agentik/conversations/c1/approvals/call-1",
        b'{"approve": true}',
        {},
    ),
    ("elicitations", "GET", "/agentik/conversations/c1/elicitations", None, {}),
    (
        "answer",
        "POST",
        "/agentik/conversations/c1/elicitations/e1",
        b'{"action": "decline"}',
        {},
    ),
    ("reflections", "GET", "/agentik/reflections", None, {}),
    ("skills", "GET", "/agentik/skills", None, {}),
    ("skill", "GET", "/agentik/skills/s1", None, {}),
    ("put skill", "PUT", "/agentik/skills/s1", b'{"description": "d", "body": "b"}', {}),
    ("delete skill", "DELETE", "/agentik/skills/s1", None, {}),
    ("agui", "POST", "/agui", json.dumps(AGUI).encode(), {}),
    ("card", "GET", "/.well-known/agent-card.json", None, {}),
    ("a2a send", "POST", "/a2a", a2a("SendMessage", MESSAGE), A2A),
    ("a2a stream", "POST", "/a2a", a2a("SendStreamingMessage", MESSAGE), A2A),
    ("a2a get", "POST", "/a2a", a2a("GetTask", {"id": "0" * 32 + ".c1"}), A2A),
    ("a2a list", "POST", "/a2a", a2a("ListTasks", {"contextId": "c1"}), A2A),
    ("a2a cancel", "POST", "/a2a", a2a("CancelTask", {"id": "0" * 32 + ".c1"}), A2A),
]


def test_every_route_is_walked() -> None:
    walked = set()
    for _, method, path, _, _ in REQUESTS:
        for template_method, template in ROUTES:
            parts, pieces = template.split("/"), path.split("/")
            if (
                template_method == method
                and len(parts) == len(pieces)
                and all(t == p or t.startswith("{") for t, p in zip(parts, pieces, strict=True))
            ):
                walked.add((template_method, template))
    assert walked == set(ROUTES)


def echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text="echo")


@asynccontextmanager
async def serving(storage: StorageBundle) -> AsyncIterator[tuple[ChatAgent, httpx2.AsyncClient]]:
    async with (
        open_chat_agent(model=ScriptedModel(echo), storage=storage) as agent,
        trio.open_nursery() as nursery,
    ):
        ctx = ServerContext(
            agent=agent,
            config=ServerConfig(),
            model_label="scripted",
            demo_model=False,
            storage_label="test",
            writer_gauges=lambda: writer_stats(storage),
            background=nursery,
        )
        stop = trio.Event()
        urls = await nursery.start(
            partial(http_serve, build_app(ctx), port=0, shutdown_trigger=stop.wait)
        )
        async with httpx2.AsyncClient(base_url=urls[0], timeout=30) as client:
            yield agent, client
        stop.set()


async def walk(client: httpx2.AsyncClient) -> dict[str, httpx2.Response]:
    answers = {}
    for label, method, path, body, headers in REQUESTS:
        answers[label] = await client.request(method, path, content=body, headers=headers)
    return answers


def check(answers: dict[str, httpx2.Response], must_refuse: set[str]) -> None:
    refused = {label for label, response in answers.items() if response.status_code == 503}
    for label in refused:
        value = answers[label].headers.get("Retry-After")
        assert value is not None, f"{label}: 503 without Retry-After"
        assert value.isdigit() and int(value) >= 1, (label, value)
    statuses = {label: answers[label].status_code for label in must_refuse}
    assert must_refuse <= refused, statuses


TURN_ROUTES = {
    "turn",
    "turn streamed",
    "agui",
    "a2a send",
    "a2a stream",
}


async def test_a_closed_agent_refuses_with_retry_after(tmp_path: Path) -> None:
    async with (
        open_sqlite_storage(tmp_path / "a.db") as storage,
        serving(storage) as (agent, client),
    ):
        ok = await client.post("/agentik/conversations/c1/turns", json={"text": "hi"})
        assert ok.status_code == 200, ok.text
        agent.close(grace=0)
        check(await walk(client), TURN_ROUTES)


@pytest.fixture
def clock() -> MockClock:
    """Real time, that the test can jump past the lease (pytest-trio runs on it)."""
    return MockClock(rate=1.0)


def cut_off(admin_dsn: str, database: str, allow: bool) -> None:
    """The database goes away (no connection allowed, every session of it
    ended), or comes back; the other tests' databases are untouched."""
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS {str(allow).lower()}")
        if not allow:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (database,),
            )


async def test_a_node_without_storage_or_lease_refuses_with_retry_after(
    postgres_dsn: str, clock: MockClock
) -> None:
    url = fresh_database(postgres_dsn)
    database = conninfo_to_dict(url)["dbname"]
    opened = open_postgres_storage(url, readers=1, lease_seconds=60, connect_timeout=2)
    async with opened as storage:
        async with serving(storage) as (_, client):
            ok = await client.post("/agentik/conversations/c1/turns", json={"text": "hi"})
            assert ok.status_code == 200, ok.text
            await trio.to_thread.run_sync(cut_off, postgres_dsn, database, False)
            clock.jump(60)
            answers = await walk(client)
            await trio.to_thread.run_sync(cut_off, postgres_dsn, database, True)
    reads = {
        "list",
        "messages",
        "memory",
        "archived",
        "summary",
        "summaries",
        "usage",
        "export",
        "approvals",
        "reflections",
        "skills",
        "skill",
    }
    check(answers, {"health", "delete", *TURN_ROUTES, *reads})
    assert answers["health"].json()["lease"]["valid"] is False


@settings(max_examples=200, deadline=None)
@given(
    status=st.sampled_from([200, 204, 307, 400, 404, 429, 500, 502, 503, 504]),
    headers=st.lists(
        st.tuples(
            st.sampled_from([b"content-type", b"x-a", b"Retry-After", b"retry-after"]),
            st.sampled_from([b"1", b"7", b"text/plain"]),
        ),
        max_size=4,
    ),
)
def test_the_guard_gives_every_503_a_retry_after(
    status: int, headers: list[tuple[bytes, bytes]]
) -> None:
    """Whatever a route answers: a 503 without ``Retry-After`` leaves with
    ``Retry-After: 1``, one that has it keeps its own, and nothing else
    changes (the net under every route, future ones included)."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    agent = SimpleNamespace(storage=SimpleNamespace(message_store=None), tracing=False)
    ctx = ServerContext(
        agent=cast(ChatAgent, agent),
        config=ServerConfig(),
        model_label="m",
        demo_model=False,
        storage_label="s",
    )
    guard = Guard(route, ctx)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/health",
        "raw_path": b"/health",
        "query_string": b"",
        "headers": [],
    }
    trio.run(guard, scope, receive, send)
    out = sent[0]["headers"]
    said = [v for n, v in out if n.lower() == b"retry-after"]
    if status == 503 and not any(n.lower() == b"retry-after" for n, _ in headers):
        assert out == [*headers, (b"retry-after", b"1")]
    else:
        assert out == headers
    assert status != 503 or said
