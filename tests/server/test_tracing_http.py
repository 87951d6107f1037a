"""An incoming W3C ``traceparent`` becomes the parent of the turn's span on
every transport (native JSON and SSE, AG-UI, A2A), across the hop into the
conversation task; a missing or malformed one leaves the turn a root. Real
server on 127.0.0.1, real SQLite, spans read from the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import attrs
import httpx2
import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentik.server import ServerConfig, serve_agentik

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@attrs.frozen
class Traced:
    client: httpx2.AsyncClient
    exporter: InMemorySpanExporter


@pytest.fixture
async def traced(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    config = ServerConfig(port=0, database=str(tmp_path / "agentik.db"))
    stop = trio.Event()

    async def trigger() -> None:
        await stop.wait()

    url = await nursery.start(
        lambda task_status: serve_agentik(
            config, shutdown_trigger=trigger, tracer_provider=provider, task_status=task_status
        )
    )
    async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
        yield Traced(client, exporter)
    stop.set()


async def _native(client: httpx2.AsyncClient, headers: dict[str, str]) -> None:
    reply = await client.post(
        "/agentik/conversations/n1/turns", json={"text": "hello"}, headers=headers
    )
    assert reply.status_code == 200, reply.text


async def _native_sse(client: httpx2.AsyncClient, headers: dict[str, str]) -> None:
    reply = await client.post(
        "/agentik/conversations/n2/turns",
        json={"text": "hello"},
        headers={**headers, "Accept": "text/event-stream"},
    )
    assert "turn_finished" in reply.text


async def _agui(client: httpx2.AsyncClient, headers: dict[str, str]) -> None:
    body = {
        "threadId": "g1",
        "runId": "r1",
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": "hello"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    reply = await client.post(
        "/agui", json=body, headers={**headers, "Accept": "text/event-stream"}
    )
    assert "RUN_FINISHED" in reply.text


async def _a2a(client: httpx2.AsyncClient, headers: dict[str, str]) -> None:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}], "contextId": "a"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    reply = await client.post("/a2a", json=body, headers={**headers, "A2A-Version": "1.0"})
    assert reply.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


Send = Callable[[httpx2.AsyncClient, dict[str, str]], object]
TRANSPORTS = {"native": _native, "native-sse": _native_sse, "agui": _agui, "a2a": _a2a}


def _turns(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
async def test_traceparent_is_the_parent_of_the_turn(traced: Traced, transport: str) -> None:
    """The turn's span continues the caller's trace, child of its span."""
    await TRANSPORTS[transport](traced.client, {"traceparent": TRACEPARENT})  # type: ignore[misc]
    (turn,) = _turns(traced.exporter)
    assert turn.context.trace_id == int(TRACE_ID, 16)
    assert turn.parent is not None and turn.parent.is_remote
    assert turn.parent.span_id == int(PARENT_ID, 16)
    chats = [s for s in traced.exporter.get_finished_spans() if s.name.startswith("chat")]
    assert chats and all(c.context.trace_id == int(TRACE_ID, 16) for c in chats)


@pytest.mark.parametrize(
    "headers",
    [{}, {"traceparent": "00-not-a-trace-01"}, {"traceparent": f"00-{'0' * 32}-{PARENT_ID}-01"}],
    ids=["absent", "malformed", "zero trace id"],
)
async def test_without_a_valid_traceparent_the_turn_is_a_root(
    traced: Traced, headers: dict[str, str]
) -> None:
    """No header, or one W3C says to ignore: the turn runs and starts a trace."""
    await _native(traced.client, headers)
    (turn,) = _turns(traced.exporter)
    assert turn.parent is None
    assert turn.context.trace_id != int(TRACE_ID, 16)


async def test_the_context_does_not_leak_into_the_next_request(traced: Traced) -> None:
    """A request after a traced one, on the same connection, starts its own trace."""
    await _native(traced.client, {"traceparent": TRACEPARENT})
    await _native(traced.client, {})
    first, second = _turns(traced.exporter)
    assert first.parent is not None and second.parent is None
