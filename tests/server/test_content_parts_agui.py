"""Images and files over AG-UI, against a real server: a user message's
``image`` and ``document`` parts (a ``data`` source: base64, or a ``url``
source) and the older ``binary`` parts become the turn's parts, stored with
the message; built with ag-ui-protocol's own types and sent by the npm
``@ag-ui/client``. A part past ``[limits] max_part_bytes`` is 413 and
nothing is stored; audio and video are refused (422)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from ag_ui.core import (
    DocumentInputContent,
    ImageInputContent,
    InputContentDataSource,
    InputContentUrlSource,
    RunAgentInput,
    RunFinishedEvent,
    TextInputContent,
    UserMessage,
)

from agentik.server import Limits
from tests.server.agui_rules import check_events, parse_sse
from tests.server.conftest import Running, start_server
from tests.server.test_agui_node import MISSING, run_node

LIMIT = 300
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
PDF = b"%PDF-1.7\n\x00\xff"
B64 = base64.b64encode(PNG).decode()


@pytest.fixture
async def small(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Running]:
    async for running in start_server(nursery, tmp_path, limits=Limits(max_part_bytes=LIMIT)):
        yield running


def _run(thread: str, content: list[object]) -> dict[str, object]:
    message = UserMessage(id=f"u-{thread}", role="user", content=content)  # type: ignore[arg-type]
    run = RunAgentInput(
        thread_id=thread,
        run_id=f"r-{thread}",
        state={},
        messages=[message],
        tools=[],
        context=[],
        forwarded_props={},
    )
    data: dict[str, object] = run.model_dump(by_alias=True, exclude_none=True, mode="json")
    return data


async def _stored(server: Running, thread: str) -> list[dict[str, object]]:
    response = await server.client.get(f"/agentik/conversations/{thread}/messages")
    assert response.status_code == 200, response.text
    messages: list[dict[str, object]] = response.json()["messages"]
    return messages


async def _nothing_stored(server: Running) -> None:
    assert (await server.client.get("/agentik/conversations")).json()["conversations"] == []


async def test_image_and_document_parts_are_kept_with_the_message(small: Running) -> None:
    content = [
        TextInputContent(text="compare"),
        ImageInputContent(source=InputContentDataSource(value=B64, mime_type="image/png")),
        ImageInputContent(source=InputContentUrlSource(value="https://example.com/b.jpg")),
        DocumentInputContent(
            source=InputContentDataSource(
                value=base64.b64encode(PDF).decode(), mime_type="application/pdf"
            )
        ),
    ]
    response = await small.client.post(
        "/agui", json=_run("t1", content), headers={"Accept": "text/event-stream"}
    )
    assert response.status_code == 200, response.text
    assert isinstance(check_events(parse_sse(response.text))[-1], RunFinishedEvent)
    user = (await _stored(small, "t1"))[0]
    assert user["content"] == "compare"
    assert user["parts"] == [
        {"type": "image", "data": B64, "media_type": "image/png"},
        {"type": "image", "url": "https://example.com/b.jpg"},
        {"type": "file", "data": base64.b64encode(PDF).decode(), "media_type": "application/pdf"},
    ]


async def test_binary_parts_are_taken_too(small: Running) -> None:
    """The pre-1.0 ``binary`` part (``mimeType``, ``data`` or ``url``, ``filename``)."""
    body = _run("t2", [TextInputContent(text="x")])
    message = body["messages"][0]  # type: ignore[index]
    message["content"] = [  # type: ignore[index]
        {"type": "binary", "mimeType": "image/png", "data": B64},
        {
            "type": "binary",
            "mimeType": "text/csv",
            "url": "https://example.com/a.csv",
            "filename": "a.csv",
        },
    ]
    response = await small.client.post("/agui", json=body, headers={"Accept": "text/event-stream"})
    assert response.status_code == 200, response.text
    assert (await _stored(small, "t2"))[0]["parts"] == [
        {"type": "image", "data": B64, "media_type": "image/png"},
        {
            "type": "file",
            "url": "https://example.com/a.csv",
            "media_type": "text/csv",
            "filename": "a.csv",
        },
    ]


@pytest.mark.parametrize("size", [LIMIT, LIMIT + 1])
async def test_a_part_past_the_limit_is_413_and_nothing_is_stored(
    small: Running, size: int
) -> None:
    data = base64.b64encode(b"\x01" * size).decode()
    content = [ImageInputContent(source=InputContentDataSource(value=data, mime_type="image/png"))]
    response = await small.client.post(
        "/agui", json=_run("big", content), headers={"Accept": "text/event-stream"}
    )
    if size <= LIMIT:
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "part_too_large"
    await _nothing_stored(small)


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ({"type": "audio", "source": {"type": "url", "value": "u"}}, "must be 'text', 'binary'"),
        (
            {"type": "image", "source": {"type": "data", "value": "!!", "mimeType": "image/png"}},
            "base64",
        ),
        ({"type": "image", "source": {"type": "file", "value": "f-1"}}, "must be 'data' or 'url'"),
        ({"type": "binary", "mimeType": "image/png", "id": "f-1"}, "an id alone is not supported"),
        ({"type": "document", "source": {"type": "data", "value": "AA=="}}, "needs its media_type"),
    ],
)
async def test_bad_parts_are_422_and_nothing_is_stored(
    small: Running, part: dict[str, object], message: str
) -> None:
    body = _run("bad", [TextInputContent(text="x")])
    body["messages"][0]["content"].append(part)  # type: ignore[index]
    response = await small.client.post("/agui", json=body, headers={"Accept": "text/event-stream"})
    assert response.status_code == 422, response.text
    assert message in response.json()["error"]["message"]
    await _nothing_stored(small)


# Skipped where node or the npm client is missing (as test_agui_node.py warns),
# never under CI, which installs them.
@pytest.mark.skipif(MISSING is not None and not os.environ.get("CI"), reason=str(MISSING))
async def test_the_npm_client_sends_an_image(small: Running) -> None:
    image = {"type": "image", "source": {"type": "data", "value": B64, "mimeType": "image/png"}}
    step = {"content": [{"type": "text", "text": "what is it?"}, image]}
    seen = await run_node(f"{small.url}/agui", "n1", json.dumps([step]))
    assert seen["failure"] is None, seen
    user = (await _stored(small, "n1"))[0]
    assert user["parts"] == [{"type": "image", "data": B64, "media_type": "image/png"}]
