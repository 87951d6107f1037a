"""A rate-limited backend's ``Retry-After``, passed on by every transport of
``agentik serve``: the native API's 503 carries it as whole seconds (at least
1, at most ``MAX_RETRY_AFTER``, never a float string), a native stream's
``turn_failed`` as a number within 0..``MAX_RETRY_AFTER``, AG-UI ends with
``RUN_ERROR`` ``model_unavailable``, A2A's task FAILED with the reason.

The backend is a real Chat Completions server on 127.0.0.1
(``tests.models.chat_server``) answering 429 with odd ``Retry-After`` values
to the real ``OpenAICompatibleModel`` that the server builds from its
``ModelSettings`` (no retries, so no backoff is waited).
"""

from __future__ import annotations

import json
import re

import pytest
import trio
import trio.testing
from ag_ui.core import RunErrorEvent

from agentik.agent._failures import MAX_RETRY_AFTER
from agentik.server import ModelSettings
from tests.models.chat_server import ChatServer, Json
from tests.server.agui_rules import check_events, parse_sse
from tests.server.test_agui import run_input
from tests.server.test_model_limits_http import A2A_1, a2a_send
from tests.server.test_model_settings import chat_server, idle_clock, serving

__all__ = ["chat_server", "idle_clock"]  # fixtures used here

LIMITED = {"error": {"message": "slow down", "type": "rate_limit_error"}}

CASES = [
    # (Retry-After sent by the backend, the 503's Retry-After, the stream's retry_after)
    ("7", "7", 7.0),
    ("1.5", "2", 1.5),
    ("1000000000000", str(int(MAX_RETRY_AFTER)), MAX_RETRY_AFTER),
    ("Fri, 31 Dec 9999 23:59:59 GMT", str(int(MAX_RETRY_AFTER)), MAX_RETRY_AFTER),
    ("Sun, 06 Nov 1994 08:49:37 GMT", "1", 0.0),
    ("-5", "1", None),
    ("\u0661\u0662", "1", None),
    ("1e3", "1", None),
    (None, "1", None),
]


@pytest.mark.parametrize(("sent", "header", "streamed"), CASES)
async def test_every_transport_passes_on_a_sane_retry_after(
    chat_server: ChatServer,
    idle_clock: trio.testing.MockClock,
    sent: str | None,
    header: str,
    streamed: float | None,
) -> None:
    headers = {} if sent is None else {"Retry-After": sent}
    chat_server.script(*[Json(LIMITED, status=429, headers=headers)] * 4)
    model = ModelSettings(base_url=chat_server.base_url, model="m", max_retries=0)
    async with serving(model) as client:
        reply = await client.post("/agentik/conversations/c1/turns", json={"text": "hello"})
        assert reply.status_code == 503, reply.text
        assert reply.json()["error"]["code"] == "model_unavailable"
        assert re.fullmatch(r"[1-9][0-9]*", reply.headers["Retry-After"])
        assert reply.headers["Retry-After"] == header

        stream = await client.post(
            "/agentik/conversations/c2/turns",
            json={"text": "hello"},
            headers={"Accept": "text/event-stream"},
        )
        [frame] = [f for f in stream.text.split("\n\n") if f.startswith("event: turn_failed")]
        data = json.loads(frame.split("\ndata: ", 1)[1])
        assert data["code"] == "model_unavailable"
        assert data.get("retry_after") == streamed

        agui = await client.post(
            "/agui", json=run_input("t3", "hello"), headers={"Accept": "text/event-stream"}
        )
        error = check_events(parse_sse(agui.text))[-1]
        assert isinstance(error, RunErrorEvent)
        assert error.code == "model_unavailable"

        a2a = await client.post("/a2a", json=a2a_send("hello", "m4", "c4"), headers=A2A_1)
        task = a2a.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert "the turn failed (model_unavailable)" in json.dumps(task["status"])
    assert len(chat_server.received) == 4
