"""A decision streamed over the native API (``POST …/approvals/{call_id}`` with
``Accept: text/event-stream``): the same frames a turn streams, for the calls
that run and the turn going on; a decision the agent does not take is the same
HTTP refusal as unstreamed, before any frame."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.reliability.helpers import Backend
from tests.server.agui_rules import parse_sse
from tests.server.approval_tools import RUNS, serve_bank

SSE = {"Accept": "text/event-stream"}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx2.AsyncClient]:
    RUNS.clear()
    async with (
        serve_bank(Backend("sqlite", tmp_path / "db")) as url,
        httpx2.AsyncClient(base_url=url, timeout=30) as client,
    ):
        yield client


async def paused(client: httpx2.AsyncClient, text: str) -> Any:
    response = await client.post("/agentik/conversations/c/turns", json={"text": text})
    assert response.json()["status"] == "awaiting_approval", response.text
    return response.json()


async def streamed(client: httpx2.AsyncClient, call_id: str, **body: Any) -> httpx2.Response:
    return await client.post(
        f"/agentik/conversations/c/approvals/{call_id}", json=body, headers=SSE
    )


async def test_an_approved_call_streams_its_run_and_the_answer(
    client: httpx2.AsyncClient,
) -> None:
    await paused(client, "pay")
    response = await streamed(client, "w1", approve=True)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = parse_sse(response.text)
    kinds = [f["type"] for f in frames]
    assert kinds[:2] == ["tool_call_started", "tool_call_finished"]
    assert frames[0]["call"]["name"] == "bank_wire"
    assert frames[1]["content"] == "sent 5"
    assert kinds[-1] == "turn_finished"
    assert frames[-1]["result"]["status"] == "finished"
    assert frames[-1]["result"]["text"] == "sent 5"
    assert RUNS == ["wire 5"]


async def test_a_denied_call_streams_its_result(client: httpx2.AsyncClient) -> None:
    await paused(client, "pay")
    frames = parse_sse((await streamed(client, "w1", approve=False, reason="no")).text)
    assert frames[0]["type"] == "tool_call_finished"
    assert frames[0]["content"] == "denied: no"
    assert frames[-1]["result"]["status"] == "finished"
    assert RUNS == []


async def test_the_first_of_two_decisions_streams_the_turn_still_waiting(
    client: httpx2.AsyncClient,
) -> None:
    await paused(client, "pay twice")
    frames = parse_sse((await streamed(client, "w1", approve=True)).text)
    assert [f["type"] for f in frames] == ["turn_finished"]
    assert frames[0]["result"]["status"] == "awaiting_approval"
    assert [a["call_id"] for a in frames[0]["result"]["approvals"]] == ["w2"]


@pytest.mark.parametrize(
    ("call_id", "body", "status", "code"),
    [
        ("nope", {"approve": True}, 404, "not_waiting"),
        ("w1", {"approve": False}, 409, "already_decided"),
    ],
)
async def test_a_decision_not_taken_is_refused_before_any_frame(
    client: httpx2.AsyncClient, call_id: str, body: dict[str, Any], status: int, code: str
) -> None:
    await paused(client, "pay twice")
    assert (await streamed(client, "w1", approve=True)).status_code == 200
    response = await streamed(client, call_id, **body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == code
