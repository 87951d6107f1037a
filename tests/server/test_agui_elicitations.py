"""A tool's question to the person (MCP elicitation) over AG-UI, through real
HTTP: a real agentik server whose MCP toolset is the tiny MCP server.

The question does not end the run (the call waits inside it), so it is not an
interrupt: the run streams a ``CUSTOM`` event named ``agentik.elicitation``
(``value``: ``id``, ``source``, ``message``, ``requestedSchema``), the client
answers through the native route, and the same run goes on to its result.
Requests are built from the ``ag-ui-protocol`` models and every stream is
parsed into them and checked against the client's ordering rules. Real time
(the MCP server is real), bounded by ``fail_after``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from ag_ui.core import CustomEvent, EventType, RunAgentInput, UserMessage

from tests.mcp.test_stdio import LIMIT
from tests.server.agui_rules import check_events, parse_sse
from tests.server.elicit_support import client, serve_web


def _run_input(thread: str, text: str) -> dict[str, Any]:
    run = RunAgentInput(
        thread_id=thread,
        run_id=f"{thread}-run-1",
        state={},
        messages=[UserMessage(id="u0", content=text)],
        tools=[],
        context=[],
        forwarded_props={},
    )
    return run.model_dump(mode="json", by_alias=True, exclude_none=True)


async def _run_answering(http: httpx2.AsyncClient, answer: dict[str, Any]) -> list[Any]:
    """One AG-UI run of a booking: answer the question the stream announces with
    ``answer`` (the native route), read the run to its end; its events, checked."""
    async with http.stream(
        "POST",
        "/agui",
        json=_run_input("t", "please book"),
        headers={"Accept": "text/event-stream"},
    ) as response:
        assert response.status_code == 200
        body = ""
        chunks = response.aiter_text()
        async for chunk in chunks:
            body += chunk
            if '"CUSTOM"' in body and body.endswith("\n\n"):
                break
        (custom,) = [e for e in check_events(parse_sse(body)) if e.type == EventType.CUSTOM]
        assert isinstance(custom, CustomEvent)
        assert custom.name == "agentik.elicitation"
        question = custom.value
        assert question["message"] == "Who is the booking for?"
        assert question["source"] == "web"
        assert question["requestedSchema"]["properties"]["guests"]["default"] == 2
        answered = await http.post(
            f"/agentik/conversations/t/elicitations/{question['id']}", json=answer
        )
        assert answered.status_code == 200, answered.text
        async for chunk in chunks:
            body += chunk
    return check_events(parse_sse(body))


@pytest.mark.parametrize(
    ("answer", "result"),
    [
        ({"content": {"name": "Ada"}}, "booked for Ada, 2 guests"),
        ({"action": "cancel"}, "not booked: cancel"),
    ],
)
async def test_the_run_announces_the_question_and_goes_on_once_answered(
    mcp_url: str, tmp_path: Path, answer: dict[str, Any], result: str
) -> None:
    with trio.fail_after(LIMIT):
        async with serve_web(mcp_url, tmp_path) as url, client(url) as http:
            events = await _run_answering(http, answer)
    kinds = [e.type for e in events]
    assert kinds[-1] == EventType.RUN_FINISHED
    (tool_result,) = [e for e in events if e.type == EventType.TOOL_CALL_RESULT]
    assert tool_result.content == result
    # the question comes while the call is open, before its result
    assert kinds.index(EventType.CUSTOM) < kinds.index(EventType.TOOL_CALL_RESULT)
