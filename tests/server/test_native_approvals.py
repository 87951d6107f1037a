"""Human approval of tool calls over the native API, through real HTTP.

A turn whose call needs approval answers ``status: awaiting_approval`` with the
waiting calls (``approvals``); ``GET …/approvals`` lists them;
``POST …/approvals/{call_id}`` with ``{"approve", "reason"}`` decides and
answers the turn as it then stands. The server runs on 127.0.0.1 with the
scripted model of ``approval_tools`` and, where the backend matters, on both
(in memory, and SQLite on a real file), closed and started again in between.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from agentik import Message, Role, ToolCall
from tests.agent.helpers import assert_valid_history
from tests.reliability.helpers import BACKENDS, Backend
from tests.server.agui_rules import parse_sse
from tests.server.approval_tools import LOTS_ERROR, RUNS, serve_bank

SSE = {"Accept": "text/event-stream"}
W1 = {"call_id": "w1", "name": "bank_wire", "arguments": '{"amount": 5}'}
W2 = {"call_id": "w2", "name": "bank_wire", "arguments": '{"amount": 7}'}


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


@asynccontextmanager
async def serving(backend: Backend) -> AsyncIterator[httpx2.AsyncClient]:
    """A client of a server on ``backend`` (``serve_bank``), until the block ends."""
    async with (
        serve_bank(backend) as url,
        httpx2.AsyncClient(base_url=url, timeout=30) as client,
    ):
        yield client


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx2.AsyncClient]:
    async with serving(Backend("sqlite", tmp_path / "db")) as client:
        yield client


async def turn(client: httpx2.AsyncClient, cid: str, text: str, **extra: Any) -> Any:
    response = await client.post(
        f"/agentik/conversations/{cid}/turns", json={"text": text, **extra}
    )
    assert response.status_code == 200, response.text
    return response.json()


async def decide(
    client: httpx2.AsyncClient, cid: str, call_id: str, **body: Any
) -> httpx2.Response:
    return await client.post(f"/agentik/conversations/{cid}/approvals/{call_id}", json=body)


async def pending(client: httpx2.AsyncClient, cid: str) -> Any:
    response = await client.get(f"/agentik/conversations/{cid}/approvals")
    assert response.status_code == 200, response.text
    return response.json()


async def history(client: httpx2.AsyncClient, cid: str) -> list[Message]:
    body = (await client.get(f"/agentik/conversations/{cid}/messages")).json()
    return [
        Message(
            Role(m["role"]),
            m["content"],
            tuple(ToolCall(**c) for c in m["tool_calls"]),
            m["tool_call_id"],
            seq=m["seq"],
        )
        for m in body["messages"]
    ]


class TestTheTurnJson:
    async def test_a_finished_turn_says_finished(self, client: httpx2.AsyncClient) -> None:
        body = await turn(client, "c", "hello")
        assert (body["status"], body["approvals"], body["text"]) == (
            "finished",
            [],
            "You said: hello",
        )

    @pytest.mark.parametrize("backend", BACKENDS)
    async def test_a_call_waits_then_runs_once_approved(self, backend: str, tmp_path: Path) -> None:
        async with serving(Backend(backend, tmp_path / "db")) as client:
            paused = await turn(client, "c", "pay", idempotency_key="k")
            assert paused["status"] == "awaiting_approval"
            assert paused["approvals"] == [W1]
            assert paused["text"] == ""
            assert [(m["role"], m["seq"]) for m in paused["messages"]] == [
                ("user", 1),
                ("assistant", 2),
            ]
            assert RUNS == []
            assert await pending(client, "c") == {"conversation_id": "c", "approvals": [W1]}
            assert await turn(client, "c", "pay", idempotency_key="k") == paused  # a retry
            response = await decide(client, "c", "w1", approve=True)
            assert response.status_code == 200, response.text
            done = response.json()
            assert (done["status"], done["approvals"], done["text"]) == ("finished", [], "sent 5")
            assert [m["seq"] for m in done["messages"]] == [1, 2, 3, 4]
            assert RUNS == ["wire 5"]
            assert await pending(client, "c") == {"conversation_id": "c", "approvals": []}
            assert await turn(client, "c", "pay", idempotency_key="k") == done
            assert_valid_history(await history(client, "c"))

    async def test_the_streamed_turn_finished_frame_carries_the_status(
        self, client: httpx2.AsyncClient
    ) -> None:
        response = await client.post(
            "/agentik/conversations/s/turns", json={"text": "pay and look"}, headers=SSE
        )
        events = parse_sse(response.text)
        last = events[-1]
        assert last["type"] == "turn_finished"
        assert last["result"]["status"] == "awaiting_approval"
        assert last["result"]["approvals"] == [W1]
        finished = [e["call"]["id"] for e in events if e["type"] == "tool_call_finished"]
        assert finished == ["b1"], "the call needing no approval ran; the other waits"
        assert RUNS == ["balance"]

    async def test_a_call_with_invalid_arguments_is_never_asked_about(
        self, client: httpx2.AsyncClient
    ) -> None:
        """Its result is the schema's error at once; the turn finishes (or waits
        only for the valid calls), and no listing ever shows it."""
        done = await turn(client, "c", "pay lots")
        assert (done["status"], done["approvals"]) == ("finished", [])
        assert done["text"] == f"{LOTS_ERROR} | 100"
        assert await pending(client, "c") == {"conversation_id": "c", "approvals": []}
        paused = await turn(client, "d", "pay lots and pay")
        assert paused["approvals"] == [W1]
        assert await pending(client, "d") == {"conversation_id": "d", "approvals": [W1]}
        done = (await decide(client, "d", "w1", approve=True)).json()
        assert done["text"] == f"{LOTS_ERROR} | sent 5"
        response = await client.post(
            "/agentik/conversations/s/turns", json={"text": "pay lots"}, headers=SSE
        )
        events = parse_sse(response.text)
        assert events[-1]["type"] == "turn_finished"
        assert events[-1]["result"]["approvals"] == []
        failed = [
            (e["call"]["id"], e["content"], e["is_error"])
            for e in events
            if e["type"] == "tool_call_finished"
        ]
        assert failed == [("w1", LOTS_ERROR, True), ("b1", "100", False)]
        assert RUNS == ["balance", "wire 5", "balance"]
        for cid in ("c", "d", "s"):
            assert_valid_history(await history(client, cid))

    async def test_a_denied_call_never_runs(self, client: httpx2.AsyncClient) -> None:
        await turn(client, "c", "pay")
        done = (await decide(client, "c", "w1", approve=False, reason="too much")).json()
        assert (done["status"], done["text"]) == ("finished", "denied: too much")
        assert done["messages"][2]["content"] == "denied: too much"
        assert RUNS == []

    async def test_each_decision_answers_the_turn_as_it_stands(
        self, client: httpx2.AsyncClient
    ) -> None:
        paused = await turn(client, "c", "pay twice")
        assert paused["approvals"] == [W1, W2]
        first = (await decide(client, "c", "w2", approve=False)).json()
        assert (first["status"], first["approvals"]) == ("awaiting_approval", [W1])
        again = await decide(client, "c", "w2", approve=False)
        assert (again.status_code, again.json()) == (200, first), "the same decision: a no-op"
        done = (await decide(client, "c", "w1", approve=True, reason="fine")).json()
        assert (done["status"], done["text"]) == ("finished", "denied | sent 5")
        assert RUNS == ["wire 5"]

    async def test_a_new_message_denies_what_waits(self, client: httpx2.AsyncClient) -> None:
        await turn(client, "c", "pay")
        assert (await turn(client, "c", "never mind"))["status"] == "finished"
        assert (await pending(client, "c"))["approvals"] == []
        assert (await decide(client, "c", "w1", approve=True)).status_code == 404
        assert RUNS == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_waiting_call_survives_a_restart(backend: str, tmp_path: Path) -> None:
    """Stop the server and close the storage with calls waiting (one already
    approved); start again: the calls are listed, and a decision over HTTP
    runs the turn on; the approved call ran once, after the last decision."""
    store = Backend(backend, tmp_path / "db")
    async with serving(store) as client:
        paused = await turn(client, "c", "pay twice", idempotency_key="k")
        assert paused["approvals"] == [W1, W2]
        assert (await decide(client, "c", "w1", approve=True)).json()["approvals"] == [W2]
    assert RUNS == []
    async with serving(store) as client:
        assert (await pending(client, "c"))["approvals"] == [W2]
        retried = await turn(client, "c", "pay twice", idempotency_key="k")
        assert (retried["status"], retried["approvals"]) == ("awaiting_approval", [W2])
        assert (await decide(client, "c", "w1", approve=False)).status_code == 409
        done = (await decide(client, "c", "w2", approve=False, reason="once")).json()
        assert (done["status"], done["text"]) == ("finished", "denied: once | sent 5")
    assert RUNS == ["wire 5"]
    async with serving(store) as client:
        assert (await pending(client, "c"))["approvals"] == []
        assert await turn(client, "c", "pay twice", idempotency_key="k") == done
        assert_valid_history(await history(client, "c"))


class TestErrors:
    async def test_a_call_that_does_not_wait_is_404(self, client: httpx2.AsyncClient) -> None:
        await turn(client, "c", "pay")
        response = await decide(client, "c", "nope", approve=True)
        assert response.status_code == 404
        assert response.json()["error"] == {
            "code": "not_waiting",
            "message": "call 'nope' is not waiting for approval in conversation 'c'",
        }
        assert (await pending(client, "c"))["approvals"] == [W1], "nothing changed"

    async def test_the_other_decision_is_409_the_same_one_a_no_op(
        self, client: httpx2.AsyncClient
    ) -> None:
        await turn(client, "c", "pay")
        done = await decide(client, "c", "w1", approve=True)
        again = await decide(client, "c", "w1", approve=True)
        assert (again.status_code, again.json()) == (200, done.json())
        other = await decide(client, "c", "w1", approve=False)
        assert other.status_code == 409
        assert other.json()["error"] == {
            "code": "already_decided",
            "message": "call 'w1' was already approved",
        }
        assert RUNS == ["wire 5"]

    async def test_an_unknown_conversation_is_404(self, client: httpx2.AsyncClient) -> None:
        listed = await client.get("/agentik/conversations/nope/approvals")
        decided = await decide(client, "nope", "w1", approve=True)
        for response in (listed, decided):
            assert response.status_code == 404
            assert response.json()["error"] == {
                "code": "not_found",
                "message": "conversation 'nope' not found",
            }
        assert (await client.get("/agentik/conversations")).json()["conversations"] == []

    async def test_a_model_failure_after_approval_is_a_failed_turn(
        self, client: httpx2.AsyncClient
    ) -> None:
        await turn(client, "c", "pay then fail")
        response = await decide(client, "c", "w1", approve=True)
        assert response.status_code == 502
        assert response.json()["error"]["code"] == "model_error"
        assert RUNS == ["wire 5"], "the approved call ran; the model failed after it"
        assert (await pending(client, "c"))["approvals"] == []
        assert_valid_history(await history(client, "c"))

    @pytest.mark.parametrize(
        ("body", "status", "code", "message"),
        [
            (b"{", 400, "invalid_json", "request body is not valid JSON: "),
            (b'{"approve": true, "reason": "\\ud800"}', 400, "invalid_json", "lone surrogate"),
            (b"\xff", 400, "invalid_utf8", "request body is not valid UTF-8"),
            (b"[true]", 422, "invalid_field", "body must be a JSON object, got an array"),
            (b"{}", 422, "invalid_field", "field 'approve' is required"),
            (
                b'{"approve": 1}',
                422,
                "invalid_field",
                "field 'approve' must be a boolean, got a number",
            ),
            (b'{"approve": "yes"}', 422, "invalid_field", "must be a boolean, got a string"),
            (b'{"approve": null}', 422, "invalid_field", "must be a boolean, got null"),
            (
                b'{"approve": true, "reason": 3}',
                422,
                "invalid_field",
                "field 'reason' must be a string",
            ),
            (b'{"approve": true, "why": ""}', 422, "invalid_field", "unknown field 'why'"),
        ],
    )
    async def test_a_bad_body_is_refused_and_changes_nothing(
        self, client: httpx2.AsyncClient, body: bytes, status: int, code: str, message: str
    ) -> None:
        await turn(client, "c", "pay")
        response = await client.post(
            "/agentik/conversations/c/approvals/w1",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["code"] == code
        assert message in error["message"]
        assert (await pending(client, "c"))["approvals"] == [W1]
        assert RUNS == []

    async def test_a_bad_call_id_is_422(self, client: httpx2.AsyncClient) -> None:
        await turn(client, "c", "pay")
        response = await decide(client, "c", "x" * 201, approve=True)
        assert response.status_code == 422
        assert response.json()["error"]["message"].startswith("call id must be 1..200")
        assert (await pending(client, "c"))["approvals"] == [W1]

    async def test_only_post_decides(self, client: httpx2.AsyncClient) -> None:
        await turn(client, "c", "pay")
        response = await client.get("/agentik/conversations/c/approvals/w1")
        assert response.status_code == 405
        assert (await pending(client, "c"))["approvals"] == [W1]


async def test_the_log_says_what_became_of_each_turn_and_decision(
    client: httpx2.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """``outcome=awaiting_approval`` for a paused turn; one ``decision`` line per
    decision, in the turn log's vocabulary; no body text in either."""
    caplog.set_level(logging.INFO, logger="agentik.server")
    await turn(client, "c", "pay twice")
    await client.post("/agentik/conversations/s/turns", json={"text": "pay"}, headers=SSE)
    await decide(client, "c", "w1", approve=True, reason="SECRET-REASON")
    await decide(client, "c", "w2", approve=True)
    await decide(client, "c", "w2", approve=False)
    await decide(client, "nope", "w2", approve=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "agentik.server"]
    found = [
        m.groups()
        for line in lines
        if (
            m := re.match(
                r"(turn|decision) transport=native conversation=(\S+) outcome=(\S+)", line
            )
        )
    ]
    assert found == [
        ("turn", "c", "awaiting_approval"),
        ("turn", "s", "awaiting_approval"),
        ("decision", "c", "awaiting_approval"),
        ("decision", "c", "finished"),
        ("decision", "c", "refused:already_decided"),
        ("decision", "nope", "refused:not_found"),
    ]
    assert not any("SECRET-REASON" in line for line in lines)
