"""A key the backend streams back in pieces never reassembles anywhere.

Per-line masking cannot see a key that a backend quotes in 3-4 character
content deltas, in tool-call argument fragments, across SSE line and write
boundaries, or as JSON ``\\u`` escapes: no single line or body then spells
it. These tests run ``agentik serve``'s app (``serve_agentik`` with an
``agentik.toml`` naming the key's environment variable) against a real
backend on 127.0.0.1 that does all of that (``DripBackend``), drive every
transport, and look for the key in what every transport showed *reassembled*
(the deltas of each stream joined), in the stored messages, in the database
file's bytes and in the logs.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx2
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik.server import load_config, serve_agentik
from tests.security.backend import DripBackend
from tests.server.agui_rules import check_events, parse_sse

KEY = "sk-PLANTED-7c4e1f0a9b2d8e3f6a5c"
SSE = {"Accept": "text/event-stream"}
A2A = {"A2A-Version": "1.0"}
TURNS = "/agentik/conversations/c1/turns"


def write_config(folder: Path, base_url: str) -> Path:
    path = folder / "agentik.toml"
    path.write_text(
        f"""
[server]
bind = "127.0.0.1:0"

[storage]
database = "{folder / "agentik.db"}"

[model]
base_url = "{base_url}"
model = "m"
api_key_env = "PLANTED_KEY"

[agent]
toolsets = ["tests.server.sample_toolsets:clock"]
""",
        encoding="utf-8",
    )
    return path


@attrs.frozen
class Shown:
    """What the transports answered, and what the server left on disk."""

    native_sse: str
    agui: str
    a2a_stream: str
    native_json: dict[str, Any]
    messages: dict[str, str]
    database: bytes


def agui_input(thread: str) -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": "r1",
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def a2a_stream_request() -> dict[str, Any]:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}], "contextId": "x"}
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }


async def serve_and_drive(backend: DripBackend, folder: Path) -> Shown:
    """Serve against ``backend``; one turn on each transport; shut down."""
    async with trio.open_nursery() as nursery:
        await backend.start(nursery)
        config = load_config(write_config(folder, backend.url), env={"PLANTED_KEY": KEY})
        assert config.model is not None and config.model.api_key == KEY
        stop = trio.Event()
        done = trio.Event()

        async def run(task_status: trio.TaskStatus[str]) -> None:
            try:
                await serve_agentik(config, shutdown_trigger=stop.wait, task_status=task_status)
            finally:
                done.set()

        url = await nursery.start(run)
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            native_sse = await client.post(TURNS, json={"text": "hello"}, headers=SSE)
            agui = await client.post("/agui", json=agui_input("t1"), headers=SSE)
            a2a = await client.post("/a2a", json=a2a_stream_request(), headers={**A2A, **SSE})
            native_json = await client.post(TURNS, json={"text": "again"})
            messages = {
                c: (await client.get(f"/agentik/conversations/{c}/messages")).text
                for c in ("c1", "t1")
            }
        for response in (native_sse, agui, a2a, native_json):
            assert response.status_code == 200, response.text
        stop.set()
        await done.wait()
        nursery.cancel_scope.cancel()  # the backend
    return Shown(
        native_sse=native_sse.text,
        agui=agui.text,
        a2a_stream=a2a.text,
        native_json=native_json.json(),
        messages=messages,
        database=database_bytes(folder),
    )


def database_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.glob("agentik.db*"))


def frames(body: str) -> list[tuple[str | None, Any]]:
    """An SSE body's events as (event name, parsed data)."""
    found = []
    for frame in body.split("\n\n"):
        lines = frame.split("\n")
        data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
        names = [line[6:].strip() for line in lines if line.startswith("event:")]
        if data:
            found.append((names[0] if names else None, json.loads("\n".join(data))))
    return found


def leaves(value: Any, key: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a JSON value with the name of the field holding it, in
    document order."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from leaves(item, name)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item, key)


def joined_fields(body: str) -> dict[str, str]:
    """For each field name, its strings over all of a stream's events, joined:
    how a client reassembles ``delta``, ``text`` or ``arguments`` pieces."""
    joined: dict[str, list[str]] = {}
    for _, data in frames(body):
        for key, text in leaves(data):
            joined.setdefault(key, []).append(text)
    return {key: "".join(texts) for key, texts in joined.items()}


def assert_no_key(where: str, text: str | bytes) -> None:
    needle: str | bytes = KEY.encode() if isinstance(text, bytes) else KEY
    assert needle not in text, f"the key appears in {where}"


def check(shown: Shown, logs: str, *, tool: bool) -> None:
    """The key is in nothing shown, however it is reassembled; its masked
    quote is, so the backend did quote it."""
    for name in ("native_sse", "agui", "a2a_stream"):
        body = getattr(shown, name)
        assert_no_key(f"the {name} body", body)
        for field, joined in joined_fields(body).items():
            assert_no_key(f"the {name} {field!r} fields, joined", joined)

    agui = check_events(parse_sse(shown.agui))
    text = "".join(e.delta for e in agui if e.type == "TEXT_MESSAGE_CONTENT")
    assert_no_key("AG-UI TEXT_MESSAGE_CONTENT deltas, joined", text)
    assert "Bearer ***" in text and "clé 🔑" in text
    arguments = "".join(e.delta for e in agui if e.type == "TOOL_CALL_ARGS")
    assert_no_key("AG-UI TOOL_CALL_ARGS deltas, joined", arguments)

    native = frames(shown.native_sse)
    streamed = "".join(d["text"] for name, d in native if name == "text_delta")
    assert_no_key("native text_delta frames, joined", streamed)
    call_args = "".join(d["arguments"] for name, d in native if name == "tool_call_delta")
    assert_no_key("native tool_call_delta frames, joined", call_args)
    (finished,) = [d for name, d in native if name == "turn_finished"]
    assert finished["result"]["text"] == streamed, "the deltas add up to the turn's text"
    if tool:
        assert "Bearer ***" in arguments and "Bearer ***" in call_args

    for result in (finished["result"], shown.native_json):
        assert_no_key("TurnResult.text", result["text"])
        assert "Bearer ***" in result["text"]
    for conversation, body in shown.messages.items():
        assert_no_key(f"GET {conversation}/messages", body)
        assert "Bearer ***" in body
    assert_no_key("the database file", shown.database)
    assert b"Bearer ***" in shown.database
    assert_no_key("the logs", logs)


SCENARIOS = {
    "text-in-3-4-char-deltas": DripBackend(sizes=(3, 4)),
    "text-in-1-char-deltas": DripBackend(sizes=(1,)),
    "tool-arguments-in-fragments": DripBackend(sizes=(4, 3), tool=True),
    "cut-across-sse-lines-and-writes": DripBackend(sizes=(5, 9), writes=(13, 29, 17)),
    # the whole answer (and the whole tool call) in one delta: only the escapes hide the key
    "json-escaped": DripBackend(sizes=(10_000,), escape=True),
    "json-escaped-tool-call": DripBackend(sizes=(10_000,), escape=True, tool=True),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_a_key_streamed_in_pieces_is_masked_everywhere(
    scenario: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever pieces the key arrives in, every transport, the store and the
    logs show it masked, and the deltas of a stream add up to its stored text."""
    caplog.set_level(logging.DEBUG)
    backend = attrs.evolve(SCENARIOS[scenario])
    shown = await serve_and_drive(backend, tmp_path)
    assert backend.requests == (8 if backend.tool else 4)
    check(shown, caplog.text, tool=backend.tool)


@settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    writes=st.lists(st.integers(8, 64), max_size=3),
    tool=st.booleans(),
    escape=st.booleans(),
)
async def test_any_chunking_end_to_end(
    sizes: list[int],
    writes: list[int],
    tool: bool,
    escape: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same checks, over random piece sizes, write sizes and encodings."""
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    backend = DripBackend(sizes=sizes, writes=writes, tool=tool, escape=escape)
    with tempfile.TemporaryDirectory() as folder:
        shown = await serve_and_drive(backend, Path(folder))
    check(shown, caplog.text, tool=tool)
