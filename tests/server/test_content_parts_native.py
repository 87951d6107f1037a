"""Content parts over the native API, against a real server on 127.0.0.1:
``{"content": [parts]}`` beside ``{"text": …}``, inline data as base64, kept
with the message (read back by ``GET …/messages``); a part past ``[limits]
max_part_bytes`` is 413 and nothing is stored."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from agentik.server import Limits
from agentik.server.http import HttpError
from agentik.server.native._wire import parse_turn_request
from tests.server.conftest import Running, start_server

LIMIT = 64
PNG = bytes(range(40)) + b"\x00\xff"
IMAGE = {"type": "image", "data": base64.b64encode(PNG).decode(), "media_type": "image/png"}
FILE = {"type": "file", "url": "https://example.com/a.pdf", "filename": "a ✓.pdf"}


@pytest.fixture
async def small(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Running]:
    async for running in start_server(nursery, tmp_path, limits=Limits(max_part_bytes=LIMIT)):
        yield running


async def _messages(server: Running, conversation_id: str) -> list[dict[str, object]]:
    response = await server.client.get(f"/agentik/conversations/{conversation_id}/messages")
    assert response.status_code == 200, response.text
    messages: list[dict[str, object]] = response.json()["messages"]
    return messages


async def _nothing_stored(server: Running) -> None:
    listed = await server.client.get("/agentik/conversations")
    assert listed.json()["conversations"] == []


async def test_a_turn_with_parts_is_kept_with_its_message(small: Running) -> None:
    content = [{"type": "text", "text": "look"}, IMAGE, {"type": "text", "text": "and"}, FILE]
    response = await small.client.post("/agentik/conversations/c/turns", json={"content": content})
    assert response.status_code == 200, response.text
    user, answer = await _messages(small, "c")
    assert user["content"] == "look\nand"
    assert user["parts"] == [IMAGE, FILE]
    assert "parts" not in answer


async def test_a_streamed_turn_takes_parts(small: Running) -> None:
    response = await small.client.post(
        "/agentik/conversations/s/turns",
        json={"content": [IMAGE], "idempotency_key": "k"},
        headers={"Accept": "text/event-stream"},
    )
    assert response.status_code == 200, response.text
    assert "event: turn_finished\n" in response.text
    assert (await _messages(small, "s"))[0]["parts"] == [IMAGE]


@pytest.mark.parametrize("size", [0, 1, LIMIT - 1, LIMIT, LIMIT + 1, 10 * LIMIT])
async def test_a_part_past_the_limit_is_413_and_nothing_is_stored(
    small: Running, size: int
) -> None:
    data = base64.b64encode(b"\x07" * size).decode()
    part = {"type": "file", "data": data, "media_type": "application/octet-stream"}
    response = await small.client.post(
        "/agentik/conversations/big/turns", json={"content": [{"type": "text", "text": "x"}, part]}
    )
    if size <= LIMIT:
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "part_too_large"
    assert "[limits] max_part_bytes" in response.json()["error"]["message"]
    await _nothing_stored(small)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"text": "a", "content": [IMAGE]}, "give field 'text' or field 'content', not both"),
        ({"content": []}, "field 'content' must hold at least one part"),
        ({"content": "x"}, "field 'content' must be an array"),
        ({"content": [{"type": "text", "text": ""}]}, "field 'content' holds no text"),
        ({"content": [{"type": "image", "data": "!!", "media_type": "image/png"}]}, "base64"),
        ({"content": [{"type": "image", "data": "AA=="}]}, "needs its media_type"),
        ({"content": [{"type": "video", "url": "u"}]}, "expected a part type of"),
        ({"content": [{"type": "image", "url": "u", "extra": 1}]}, "unknown fields 'extra'"),
    ],
)
async def test_bad_content_is_422_and_nothing_is_stored(
    small: Running, body: dict[str, object], message: str
) -> None:
    response = await small.client.post("/agentik/conversations/bad/turns", json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["error"]["message"]
    await _nothing_stored(small)


@given(size=st.integers(0, 3 * LIMIT), limit=st.integers(0, 2 * LIMIT))
def test_the_size_limit_boundary(size: int, limit: int) -> None:
    """Exactly ``max_part_bytes`` is taken, one byte more is refused, for
    data and for text (counted in UTF-8 bytes)."""
    data = {"type": "image", "data": base64.b64encode(b"x" * size).decode(), "media_type": "a/b"}
    text = {"type": "text", "text": "é" * (size // 2) + "x" * (size % 2)}
    for part in (data, text):
        if size <= limit:
            assert parse_turn_request({"content": [part, FILE]}, limit).parts[-1:] == (
                parse_turn_request({"content": [FILE]}, limit).parts
            )
            continue
        with pytest.raises(HttpError, match=r"max_part_bytes") as info:
            parse_turn_request({"content": [part, FILE]}, limit)
        assert info.value.status == 413
