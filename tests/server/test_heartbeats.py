"""Heartbeats on event streams (issue 30, item 6): a stream silent for
``[server] sse_heartbeat`` seconds carries ``: keep-alive``, a comment every
SSE client skips, so proxies and clients with a read timeout keep it while a
slow model thinks.

The server (``serve_agentik``, its HTTP/1.1 server and all) runs on 127.0.0.1
in the test's trio loop on a mock clock that jumps once the loop has been idle
for 50 ms of real time, so the model's 50 s are virtual and heartbeats arrive
at 15, 30 and 45 s of it. Storage is in memory: the clock would jump while
SQLite's writer thread works. Each transport is read by its real client
where one exists (httpx2 for the native API, the a2a-sdk client, the
ag-ui-protocol event models), and by the a2a-sdk's W3C SSE parser for the
events themselves: the comment arrives, clients skip it, the events are the
same as with heartbeats off.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx2
import pytest
import trio
import trio.testing
from a2a.client import ClientConfig, create_client
from a2a.client.transports.http_helpers import parse_sse_stream
from a2a.types import SubscribeToTaskRequest, TaskState
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.models import ScriptedModel
from agentik.server import ConfigError, ServerConfig, load_config, serve_agentik
from agentik.server.http._sse import HEARTBEAT, EventStream, sse_frame
from agentik.storage import in_memory_storage
from tests.server.a2a_support import user_message
from tests.server.agui_rules import check_events, parse_sse
from tests.server.approval_tools import respond

LATENCY = 50.0
"""Seconds (virtual) the model takes per call: heartbeats at 15, 30 and 45."""
BEATS = [15.0, 30.0, 45.0]
KEEP_ALIVE = ": keep-alive"
SSE = {"Accept": "text/event-stream"}
A2A_1 = {"A2A-Version": "1.0"}


@pytest.fixture
def idle_clock() -> trio.testing.MockClock:
    """Virtual time that jumps after 50 ms of real idleness (not at once): a
    loopback write still in the kernel must not let it jump mid-request."""
    return trio.testing.MockClock(autojump_threshold=0.05)


@asynccontextmanager
async def serving(heartbeat: float | None) -> AsyncIterator[str]:
    """A server whose model takes ``LATENCY`` per call (the approval tests' bank
    toolset and model: ``pay`` calls a tool that waits for approval)."""
    config = ServerConfig(
        port=0, toolsets=("tests.server.approval_tools:bank",), sse_heartbeat=heartbeat
    )
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config,
                storage=in_memory_storage(),
                model=ScriptedModel(respond, latency=LATENCY),
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
        )
        yield url
        stop.set()


@attrs.frozen
class Seen:
    """What a client read from one stream."""

    beats: list[float]
    """When each ``: keep-alive`` line arrived, seconds after the request."""
    events: list[tuple[str, str]]
    """(event name, data) of each event, by a W3C parser (the a2a-sdk's)."""

    def data(self) -> list[Any]:
        return [json.loads(data) for _, data in self.events]


class _Lines:
    """Recorded lines, for a parser that reads ``aiter_lines()``."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = list(lines)

    async def aiter_lines(self) -> AsyncIterator[str]:
        for line in self._lines:
            yield line


async def read_stream(
    client: httpx2.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str] = SSE
) -> Seen:
    start = trio.current_time()
    lines: list[str] = []
    beats: list[float] = []
    async with client.stream("POST", path, json=body, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line == KEEP_ALIVE:
                beats.append(trio.current_time() - start)
            lines.append(line)
    events = [e async for e in parse_sse_stream(_Lines(lines))]  # type: ignore[arg-type]
    return Seen(beats=beats, events=events)


def without_times(value: Any) -> Any:
    """``value`` without the timestamps a store gives (they differ run to run)."""
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items() if k != "created_at"}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    return value


async def both_ways(run: Callable[[httpx2.AsyncClient], Awaitable[Seen]]) -> tuple[Seen, Seen]:
    """``run`` against a server with the default heartbeat, then one with none."""
    seen = []
    for heartbeat in (15.0, None):
        async with (
            serving(heartbeat) as url,
            httpx2.AsyncClient(base_url=url, timeout=3600) as client,
        ):
            seen.append(await run(client))
    return seen[0], seen[1]


# --- native -----------------------------------------------------------------------


async def test_a_native_turn_stream_beats_while_the_model_thinks(
    idle_clock: trio.testing.MockClock,
) -> None:
    async def turn(client: httpx2.AsyncClient) -> Seen:
        return await read_stream(client, "/agentik/conversations/c/turns", {"text": "hello"})

    beating, plain = await both_ways(turn)
    assert beating.beats == pytest.approx(BEATS)
    assert plain.beats == []
    assert [name for name, _ in beating.events][-1] == "turn_finished"
    assert without_times(beating.data()) == without_times(plain.data())


async def test_a_native_decision_stream_beats_while_the_model_thinks(
    idle_clock: trio.testing.MockClock,
) -> None:
    """Approving a call streams its run, then the model (50 s) answers: the
    silence between carries heartbeats."""

    async def decide(client: httpx2.AsyncClient) -> Seen:
        paused = await client.post("/agentik/conversations/c/turns", json={"text": "pay"})
        assert paused.json()["status"] == "awaiting_approval", paused.text
        return await read_stream(client, "/agentik/conversations/c/approvals/w1", {"approve": True})

    beating, plain = await both_ways(decide)
    assert beating.beats == pytest.approx(BEATS)
    assert plain.beats == []
    names = [name for name, _ in beating.events]
    assert names == ["tool_call_started", "tool_call_finished", *names[2:-1], "turn_finished"]
    assert beating.data()[-1]["result"]["text"] == "sent 5"
    assert without_times(beating.data()) == without_times(plain.data())


async def test_a_client_with_a_read_timeout_keeps_the_stream(
    idle_clock: trio.testing.MockClock,
) -> None:
    """httpx2 with a 20 s read timeout: with heartbeats every 15 s the turn
    arrives after 50 s; without them the client gives up at 20 s."""
    for heartbeat in (15.0, None):
        async with (
            serving(heartbeat) as url,
            httpx2.AsyncClient(base_url=url, timeout=20) as client,
        ):
            path, body = "/agentik/conversations/c/turns", {"text": "hello"}
            if heartbeat is None:
                with pytest.raises(httpx2.ReadTimeout):
                    await read_stream(client, path, body)
            else:
                seen = await read_stream(client, path, body)
                assert seen.data()[-1]["result"]["text"] == "You said: hello"


# --- AG-UI ------------------------------------------------------------------------


def agui_run(thread: str, text: str) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": "r1",
        "state": {},
        "messages": [{"id": "u-r1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


async def test_an_agui_run_beats_while_the_model_thinks(
    idle_clock: trio.testing.MockClock,
) -> None:
    """RUN_STARTED at once, heartbeats, then the answer: every event still
    parses as the ag-ui-protocol models and keeps the client's ordering rules."""

    async def run(client: httpx2.AsyncClient) -> Seen:
        return await read_stream(client, "/agui", agui_run("t", "hello"))

    beating, plain = await both_ways(run)
    assert beating.beats == pytest.approx(BEATS)
    assert plain.beats == []
    events = check_events(beating.data())
    assert [e.type for e in events] == [e.type for e in check_events(plain.data())]
    text = "".join(e.delta for e in events if e.type == "TEXT_MESSAGE_CONTENT")
    assert text == "You said: hello"


async def test_the_test_parser_skips_the_comment_too() -> None:
    """``parse_sse`` (the AG-UI tests' own reader, splitting at blank lines)
    takes a heartbeat's block for no event."""
    body = (sse_frame({"type": "RUN_STARTED"}) + HEARTBEAT + sse_frame({"type": "X"})).decode()
    assert parse_sse(body) == [{"type": "RUN_STARTED"}, {"type": "X"}]


# --- A2A --------------------------------------------------------------------------


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def a2a_message(text: str, message_id: str, context_id: str) -> dict[str, Any]:
    return {
        "message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "contextId": context_id,
            "parts": [{"text": text}],
        }
    }


async def test_an_a2a_streamed_message_beats_while_the_model_thinks(
    idle_clock: trio.testing.MockClock,
) -> None:
    async def stream(client: httpx2.AsyncClient) -> Seen:
        body = rpc("SendStreamingMessage", a2a_message("hello", "m1", "ctx"))
        return await read_stream(client, "/a2a", body, SSE | A2A_1)

    beating, plain = await both_ways(stream)
    assert beating.beats == pytest.approx(BEATS)
    assert plain.beats == []

    def shape(seen: Seen) -> list[Any]:
        return [sorted(frame["result"]) for frame in seen.data()]

    assert shape(beating) == shape(plain)
    assert beating.data()[-1]["result"]["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )


async def test_the_a2a_sdk_client_skips_heartbeats_and_keeps_the_stream(
    idle_clock: trio.testing.MockClock,
) -> None:
    """The a2a-sdk client, on an HTTP client with a 20 s read timeout: the
    stream of a 50 s turn completes, its events as ever."""
    async with serving(15.0) as url, httpx2.AsyncClient(timeout=20) as http:
        client = await create_client(url, ClientConfig(streaming=True, httpx_client=http))  # type: ignore[arg-type]
        try:
            seen = [r async for r in client.send_message(user_message("hello", "m1", "ctx"))]
        finally:
            await client.close()
    kinds = [r.WhichOneof("payload") for r in seen]
    assert kinds == ["task", "status_update", "artifact_update", "status_update"]
    assert seen[2].artifact_update.artifact.parts[0].text == "You said: hello"
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_an_a2a_subscription_beats_while_the_model_thinks(
    idle_clock: trio.testing.MockClock,
) -> None:
    """SubscribeToTask on a task whose turn waits for the model: heartbeats
    every 15 s until the answer, read raw and by the a2a-sdk client (20 s
    read timeout)."""
    async with (
        serving(15.0) as url,
        httpx2.AsyncClient(base_url=url, timeout=3600) as raw,
        httpx2.AsyncClient(timeout=20) as http,
    ):
        started = await raw.post(
            "/a2a",
            json=rpc(
                "SendMessage",
                a2a_message("hello", "m1", "ctx") | {"configuration": {"returnImmediately": True}},
            ),
            headers=A2A_1,
        )
        task_id = started.json()["result"]["task"]["id"]
        client = await create_client(url, ClientConfig(streaming=True, httpx_client=http))  # type: ignore[arg-type]
        seen_raw: list[Seen] = []
        seen_sdk: list[Any] = []
        try:
            async with trio.open_nursery() as nursery:

                async def by_sdk() -> None:
                    request = SubscribeToTaskRequest(id=task_id)
                    seen_sdk.extend([r async for r in client.subscribe(request)])

                async def by_hand() -> None:
                    body = rpc("SubscribeToTask", {"id": task_id})
                    seen_raw.append(await read_stream(raw, "/a2a", body, SSE | A2A_1))

                nursery.start_soon(by_sdk)
                nursery.start_soon(by_hand)
        finally:
            await client.close()
    [seen] = seen_raw
    assert seen.beats == pytest.approx(BEATS, abs=0.5)  # subscribed a moment after the start
    assert seen.data()[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert seen_sdk[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert [r.WhichOneof("payload") for r in seen_sdk] == [
        _payload(frame["result"]) for frame in seen.data()
    ]


def _payload(result: dict[str, Any]) -> str:
    """The a2a-sdk's name of a StreamResponse's payload, from its JSON key."""
    (key,) = result
    return {"task": "task", "statusUpdate": "status_update", "artifactUpdate": "artifact_update"}[
        key
    ]


# --- the framing, as a property ------------------------------------------------------


@attrs.define
class _Wire:
    """A fake ASGI ``send`` that takes ``delays`` seconds per message (a slow
    client) and records what was sent when; it fails on overlapping sends."""

    delays: list[float]
    sent: list[tuple[float, float, dict[str, Any]]] = attrs.Factory(list)
    busy: bool = False

    async def send(self, message: dict[str, Any]) -> None:
        assert not self.busy, "two ASGI messages were sent at once"
        self.busy = True
        began = trio.current_time()
        await trio.sleep(self.delays[len(self.sent) % len(self.delays)])
        self.sent.append((began, trio.current_time(), message))
        self.busy = False


frame_payloads = st.dictionaries(
    st.text(max_size=5), st.text(max_size=20) | st.integers(), max_size=3
)


@settings(max_examples=200, deadline=None)
@given(
    interval=st.integers(1, 30).map(float),
    gaps=st.lists(st.integers(0, 100).map(float), max_size=8),
    payloads=st.lists(frame_payloads, min_size=8, max_size=8),
    names=st.lists(st.none() | st.sampled_from(["a", "tool_call", "turn_finished"]), min_size=8),
    delays=st.lists(st.sampled_from([0.0, 0.5, 3.0, 20.0]), min_size=1, max_size=4),
)
def test_heartbeats_never_split_nor_reorder_a_frame(
    interval: float,
    gaps: list[float],
    payloads: list[dict[str, Any]],
    names: list[str | None],
    delays: list[float],
) -> None:
    """Frames arrive after random silences, on a client that takes random
    time per write: every ASGI message is one whole frame or one heartbeat,
    never two at once; the frames go out in order, unchanged; no silence lasts
    longer than the interval; no heartbeat comes before one is due, nor after
    the end; and a W3C parser reads exactly the frames' events."""
    frames = [sse_frame(p, event=n) for p, n in zip(payloads, names, strict=False)][: len(gaps)]
    wire = _Wire(delays)

    async def produce() -> AsyncIterator[bytes]:
        for gap, frame in zip(gaps, frames, strict=True):
            await trio.sleep(gap)
            yield frame

    async def receive() -> dict[str, Any]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def close() -> None:
        pass

    async def main() -> None:
        stream = EventStream(produce(), close, heartbeat=interval)
        await stream({"type": "http"}, receive, wire.send)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    assert wire.sent[0][2]["type"] == "http.response.start"
    bodies = [(began, ended, m["body"], m["more_body"]) for began, ended, m in wire.sent[1:]]
    assert bodies[-1][2:] == (b"", False)  # the end, last
    assert all(more for *_, more in bodies[:-1])
    assert [b for _, _, b, _ in bodies[:-1] if b != HEARTBEAT] == frames
    ends = [wire.sent[0][1]] + [ended for _, ended, _, _ in bodies]
    for (began, _, body, _), previous_end in zip(bodies, ends, strict=False):
        assert began - previous_end <= interval  # never silent past the interval
        if body == HEARTBEAT:
            assert began - previous_end == pytest.approx(interval)  # and not before due
    text = b"".join(b for _, _, b, _ in bodies).decode()

    async def parse() -> list[tuple[str, str]]:
        return [e async for e in parse_sse_stream(_Lines(text.split("\n")))]  # type: ignore[arg-type]

    parsed = trio.run(parse)
    expected = [
        (name or "message", json.dumps(p, separators=(",", ":"), ensure_ascii=False))
        for p, name in zip(payloads, names, strict=False)
    ][: len(frames)]
    assert [(n, json.loads(d)) for n, d in parsed] == [(n, json.loads(d)) for n, d in expected]


def test_off_sends_frames_alone() -> None:
    """``heartbeat=None``: a long silence stays silent."""
    wire = _Wire([0.0])

    async def produce() -> AsyncIterator[bytes]:
        await trio.sleep(1000)
        yield sse_frame({"a": 1})

    async def receive() -> dict[str, Any]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def close() -> None:
        pass

    async def main() -> None:
        await EventStream(produce(), close, heartbeat=None)({"type": "http"}, receive, wire.send)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert [m.get("body") for _, _, m in wire.sent[1:]] == [sse_frame({"a": 1}), b""]


# --- the setting ------------------------------------------------------------------


class TestSetting:
    def test_default_file_and_environment(self, tmp_path: Path) -> None:
        assert load_config(None, env={}).sse_heartbeat == 15.0
        path = tmp_path / "agentik.toml"
        path.write_text("[server]\nsse_heartbeat = 25\n")
        assert load_config(path, env={}).sse_heartbeat == 25.0
        assert load_config(path, env={"AGENTIK_SSE_HEARTBEAT": "5.5"}).sse_heartbeat == 5.5
        for off in ("0", "off", "0.0", "-0"):
            assert load_config(path, env={"AGENTIK_SSE_HEARTBEAT": off}).sse_heartbeat is None
        path.write_text('[server]\nsse_heartbeat = "off"\n')
        assert load_config(path, env={}).sse_heartbeat is None
        path.write_text("[server]\nsse_heartbeat = 0\n")
        assert load_config(path, env={}).sse_heartbeat is None

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("sse_heartbeat = -1", r"sse_heartbeat must be a number of seconds >= 0, or 'off'"),
            ("sse_heartbeat = nan", r"sse_heartbeat must be a number of seconds >= 0, or 'off'"),
            ("sse_heartbeat = inf", r"sse_heartbeat must be a number of seconds >= 0, or 'off'"),
            ("sse_heartbeat = true", r"sse_heartbeat must be a number of seconds >= 0, or 'off'"),
            ("sse_heartbeat = 'never'", r"must be a number of seconds >= 0, or 'off', got 'never'"),
            ("sse_heartbeat = 0.5", r"^\[server\] sse_heartbeat must be 0 or 'off' \(no heartbe"),
        ],
    )
    def test_nonsense_in_the_file(self, tmp_path: Path, text: str, message: str) -> None:
        path = tmp_path / "agentik.toml"
        path.write_text(f"[server]\n{text}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(path, env={})


odd_texts = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=20),
    st.text(st.sampled_from("0123456789-+._eE ²¹٣١１"), max_size=40),
    st.integers().map(str),
    st.floats().map(repr),
    st.sampled_from(["9" * 5000, "nan", "inf", "-inf", "1e400", "-0", "0", "off", "OFF", "1_0"]),
)


@settings(max_examples=300)
@given(text=odd_texts)
def test_the_environment_variable_is_seconds_off_or_one_clear_error(text: str) -> None:
    import re

    number = re.fullmatch(r"(?=.{1,32}$)-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?", text)
    value = float(text) if number else None
    env = {"AGENTIK_SSE_HEARTBEAT": text}
    if text == "off" or value == 0:
        assert load_config(None, env=env).sse_heartbeat is None
    elif value is not None and 1 <= value < float("inf"):
        assert load_config(None, env=env).sse_heartbeat == value
    elif value is not None and 0 < value < 1:
        with pytest.raises(ConfigError, match=r"^\[server\] sse_heartbeat must be 0 or 'off'"):
            load_config(None, env=env)
    else:
        with pytest.raises(
            ConfigError, match=r"^AGENTIK_SSE_HEARTBEAT: \[server\] sse_heartbeat must be"
        ):
            load_config(None, env=env)
