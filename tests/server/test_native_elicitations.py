"""A tool's question to the person (MCP elicitation) over the native API,
through real HTTP: a real agentik server whose MCP toolset is the tiny MCP
server on 127.0.0.1.

``GET …/elicitations`` lists what waits (owner-scoped, like approvals);
``POST …/elicitations/{id}`` with ``{action, content}`` answers; a streamed
turn announces the question with an ``elicitation_asked`` frame. Real time
(the MCP server is real), bounded by ``fail_after``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.mcp.test_stdio import LIMIT
from tests.server.agui_rules import parse_sse
from tests.server.elicit_support import asked, client, serve_web

SCHEMA_NAMES = {"name", "guests"}


def _tool_result(turn: dict[str, Any]) -> str:
    return next(m["content"] for m in turn["messages"] if m["role"] == "tool")


async def _booking(http: httpx2.AsyncClient, cid: str, results: list[Any]) -> None:
    response = await http.post(f"/agentik/conversations/{cid}/turns", json={"text": "please book"})
    results.append(response)


async def _answer(http: httpx2.AsyncClient, cid: str, eid: str, **body: Any) -> httpx2.Response:
    return await http.post(f"/agentik/conversations/{cid}/elicitations/{eid}", json=body)


class TestNativeElicitations:
    async def test_a_question_is_listed_and_answered(self, mcp_url: str, tmp_path: Path) -> None:
        with trio.fail_after(LIMIT):
            async with serve_web(mcp_url, tmp_path) as url, client(url) as http:
                results: list[httpx2.Response] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_booking, http, "c", results)
                    (question,) = await asked(http, "c")
                    assert question["message"] == "Who is the booking for?"
                    assert question["source"] == "web"
                    assert set(question["requested_schema"]["properties"]) == SCHEMA_NAMES
                    answered = await _answer(http, "c", question["id"], content={"name": "Ada"})
                    assert answered.status_code == 200, answered.text
                    assert answered.json() == {"conversation_id": "c", "id": question["id"]}
                (turn,) = results
                assert turn.status_code == 200, turn.text
                assert _tool_result(turn.json()) == "booked for Ada, 2 guests"
                listed = await http.get("/agentik/conversations/c/elicitations")
                assert listed.json() == {"conversation_id": "c", "elicitations": []}

    async def test_bad_answers_are_refused_and_change_nothing(
        self, mcp_url: str, tmp_path: Path
    ) -> None:
        """400 for content that does not fit the schema or an unknown action, 422 for
        a malformed body, 404 for a question that does not wait; then a decline."""
        with trio.fail_after(LIMIT):
            async with serve_web(mcp_url, tmp_path) as url, client(url) as http:
                results: list[httpx2.Response] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_booking, http, "c", results)
                    (question,) = await asked(http, "c")
                    eid = question["id"]
                    bad = await _answer(http, "c", eid, content={"name": "Ada", "guests": "x"})
                    assert bad.status_code == 400, bad.text
                    assert bad.json()["error"]["code"] == "invalid"
                    assert bad.json()["error"]["message"].startswith("guests: 'x' is not of type")
                    wrong = await _answer(http, "c", eid, action="maybe")
                    assert wrong.status_code == 422, wrong.text
                    extra = await _answer(http, "c", eid, content={}, approve=True)
                    assert extra.status_code == 422, extra.text
                    gone = await _answer(http, "c", "nope", action="decline")
                    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "not_waiting")
                    assert await asked(http, "c") == [question]
                    declined = await _answer(http, "c", eid, action="decline")
                    assert declined.status_code == 200, declined.text
                (turn,) = results
                assert _tool_result(turn.json()) == "not booked: decline"
                again = await _answer(http, "c", eid, action="decline")
                assert again.status_code == 404

    async def test_another_owner_neither_sees_nor_answers(
        self, mcp_url: str, tmp_path: Path
    ) -> None:
        with trio.fail_after(LIMIT):
            async with (
                serve_web(mcp_url, tmp_path, owners=True) as url,
                client(url, "alice") as alice,
                client(url, "bob") as bob,
            ):
                results: list[httpx2.Response] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_booking, alice, "c", results)
                    (question,) = await asked(alice, "c")
                    seen = await bob.get("/agentik/conversations/c/elicitations")
                    assert seen.status_code == 404
                    stolen = await _answer(bob, "c", question["id"], content={"name": "Bob"})
                    assert stolen.status_code == 404
                    mine = await _answer(alice, "c", question["id"], content={"name": "Al"})
                    assert mine.status_code == 200, mine.text
                (turn,) = results
                assert _tool_result(turn.json()) == "booked for Al, 2 guests"

    async def test_a_streamed_turn_announces_the_question(
        self, mcp_url: str, tmp_path: Path
    ) -> None:
        """The SSE stream carries ``elicitation_asked`` while the call waits; the
        answer (through the route) lets the same stream go on to ``turn_finished``."""
        with trio.fail_after(LIMIT):
            async with serve_web(mcp_url, tmp_path) as url, client(url) as http:
                async with http.stream(
                    "POST",
                    "/agentik/conversations/c/turns",
                    json={"text": "please book"},
                    headers={"Accept": "text/event-stream"},
                ) as response:
                    body = ""
                    chunks = response.aiter_text()
                    async for chunk in chunks:
                        body += chunk
                        if "event: elicitation_asked" in body and body.endswith("\n\n"):
                            break
                    (frame,) = [d for d in parse_sse(body) if d["type"] == "elicitation_asked"]
                    question = frame["elicitation"]
                    assert question["message"] == "Who is the booking for?"
                    answered = await _answer(http, "c", question["id"], content={"name": "Bo"})
                    assert answered.status_code == 200, answered.text
                    async for chunk in chunks:
                        body += chunk
                *_, finished = parse_sse(body)
                assert finished["type"] == "turn_finished"
                assert _tool_result(finished["result"]) == "booked for Bo, 2 guests"


@pytest.mark.parametrize("path", ["elicitations", "elicitations/x"])
async def test_an_unknown_conversation_is_404(mcp_url: str, tmp_path: Path, path: str) -> None:
    with trio.fail_after(LIMIT):
        async with serve_web(mcp_url, tmp_path) as url, client(url) as http:
            where = f"/agentik/conversations/nobody/{path}"
            if path == "elicitations":
                response = await http.get(where)
            else:
                response = await http.post(where, json={"action": "decline"})
            assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
