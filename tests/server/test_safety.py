"""Safety: bad input is refused before it touches state, auth, limits, overload,
disconnects, and what /health and /metrics report."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
import trio

from agentik.server import Limits
from tests.server.conftest import Running, start_server

TURN = "/agentik/conversations/c/turns"


class TestBadInput:
    @pytest.mark.parametrize(
        ("body", "status", "message"),
        [
            (b'{"text": "hi"', 400, "request body is not valid JSON: Expecting ',' delimiter"),
            (b'{"text": NaN}', 400, "request body is not valid JSON: NaN is not valid JSON"),
            (b'{"text": 5}', 422, "field 'text' must be a string, got a number"),
            (b'{"text": ""}', 422, "field 'text' must not be empty"),
            (b"[1]", 422, "body must be a JSON object, got an array"),
            (b"{}", 422, "field 'text' is required"),
            (
                b'{"text": "a", "idempotency_key": 3}',
                422,
                "field 'idempotency_key' must be a string",
            ),
            (b'{"text": "a", "extra": 1}', 422, "unknown field 'extra'"),
            (b'{"text": "\xff\xfe"}', 400, "request body is not valid UTF-8 (byte 10)"),
        ],
    )
    async def test_refused_and_nothing_stored(
        self, server: Running, body: bytes, status: int, message: str
    ) -> None:
        response = await server.client.post(TURN, content=body)
        assert response.status_code == status
        assert response.json()["error"]["message"].startswith(message)
        assert (await server.client.get("/agentik/conversations")).json()["conversations"] == []

    async def test_ten_megabyte_body(self, server: Running) -> None:
        """A 10 MB body is 413 before it is read whole."""
        big = b'{"text": "' + b"x" * (10 * 1024 * 1024) + b'"}'
        response = await server.client.post(TURN, content=big)
        assert response.status_code == 413
        assert response.json()["error"]["message"] == (
            "request body exceeds the limit of 1048576 bytes"
        )

    async def test_chunked_body_over_limit(self, server: Running) -> None:
        """Without Content-Length the limit still holds while streaming."""

        async def chunks() -> object:
            for _ in range(20):
                yield b"x" * 65536

        response = await server.client.post(TURN, content=chunks())  # type: ignore[arg-type]
        assert response.status_code == 413

    async def test_bad_query_and_unknown_route(self, server: Running) -> None:
        reply = await server.client.get("/agentik/conversations", params={"limit": "lots"})
        assert reply.status_code == 422
        assert reply.json()["error"]["message"] == (
            "query parameter 'limit' must be an integer 1..1000, got 'lots'"
        )
        assert (await server.client.get("/nope")).status_code == 404
        assert (await server.client.get(TURN)).status_code == 405


class TestAuth:
    async def test_every_endpoint_but_health_needs_the_token(self, secured: Running) -> None:
        client = secured.client
        assert (await client.get("/health")).status_code == 200
        for method, path in [
            ("GET", "/metrics"),
            ("POST", TURN),
            ("GET", "/agentik/conversations"),
            ("GET", "/agentik/skills/x"),
            ("POST", "/agui"),
            ("POST", "/a2a"),
            ("GET", "/.well-known/agent-card.json"),
        ]:
            response = await client.request(method, path, json={"text": "hi"})
            assert response.status_code == 401, path
            assert response.headers["www-authenticate"] == "Bearer"
        wrong = await client.post(TURN, json={"text": "hi"}, headers={"Authorization": "Bearer no"})
        assert wrong.status_code == 401
        right = await client.post(
            TURN, json={"text": "hi"}, headers={"Authorization": "Bearer s3cret"}
        )
        assert right.status_code == 200

    async def test_small_body_limit(self, secured: Running) -> None:
        response = await secured.client.post(
            TURN,
            json={"text": "x" * 5000},
            headers={"Authorization": "Bearer s3cret"},
        )
        assert response.status_code == 413


async def _post_into(
    client: httpx2.AsyncClient, sink: trio.MemorySendChannel[httpx2.Response]
) -> None:
    await sink.send(await client.post(TURN, json={"text": "call clock_wait"}))


async def test_overload_is_429_with_retry_after(nursery: trio.Nursery, tmp_path: Path) -> None:
    """One running turn per conversation; queued turns are bounded, then 429."""
    async for server in start_server(nursery, tmp_path, limits=Limits(max_queued_turns=1)):
        await server.client.post(TURN, json={"text": 'call enable_toolset {"name": "clock"}'})
        sink, replies = trio.open_memory_channel[httpx2.Response](4)
        async with trio.open_nursery() as requests:
            for _ in range(4):
                requests.start_soon(_post_into, server.client, sink)
            with trio.fail_after(20):
                # The running turn never ends (clock_wait); the first replies are refusals.
                refused = await replies.receive()
            requests.cancel_scope.cancel()
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == "overloaded"
        server.stop.set()


async def test_disconnect_mid_stream_keeps_history_valid(server: Running) -> None:
    """A client that leaves mid-stream stops reading, not the turn: it completes and
    its history is whole."""
    await server.client.post(TURN, json={"text": 'call enable_toolset {"name": "clock"}'})
    async with server.client.stream(
        "POST", TURN, json={"text": "call clock_slow"}, headers={"Accept": "text/event-stream"}
    ) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                break  # leave after the first event; closing drops the connection
    with trio.fail_after(20):
        while True:
            messages = (await server.client.get("/agentik/conversations/c/messages")).json()
            roles = [m["role"] for m in messages["messages"]]
            if len(roles) >= 8:
                break
            await trio.sleep(0.02)
    assert roles[4:] == ["user", "assistant", "tool", "assistant"]
    assert messages["messages"][6]["content"] == "tick"
    assert messages["messages"][7]["content"] == "clock_slow returned: tick"


class TestHealthAndMetrics:
    async def test_health(self, server: Running) -> None:
        body = (await server.client.get("/health")).json()
        assert body["status"] == "ok"
        assert body["model"] == "scripted demo model"
        assert body["demo_model"] is True
        assert body["storage"].startswith("sqlite:")
        assert body["uptime_seconds"] >= 0
        assert body["version"]

    async def test_metrics_count_turns_tools_and_writer(self, server: Running) -> None:
        await server.client.post(TURN, json={"text": 'call enable_toolset {"name": "clock"}'})
        await server.client.post(TURN, json={"text": "call clock_fail"})
        text = (await server.client.get("/metrics")).text
        samples = dict(
            line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
        )
        assert samples['agentik_turns_total{outcome="finished"}'] == "2"
        assert samples["agentik_tool_calls_total"] == "2"
        assert samples['agentik_errors_total{kind="tool"}'] == "1"
        assert samples['agentik_model_latency_seconds_bucket{le="+Inf"}'] == "4"
        assert samples["agentik_model_latency_seconds_count"] == "4"
        assert int(samples["agentik_writer_writes_total"]) >= 8
        assert samples["agentik_writer_queue_depth"] == "0"
        assert samples["agentik_live_conversations"] == "1"
        assert int(samples['agentik_http_requests_total{status="2xx"}']) == 2
        assert "# TYPE agentik_model_latency_seconds histogram" in text
