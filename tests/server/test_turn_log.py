"""The turn log line speaks one vocabulary on every transport, streamed or not.

``outcome=`` is ``finished``, ``awaiting_approval`` (the turn paused for a
person's decision: ``test_native_approvals``), ``failed:<code>`` (the turn ran and failed),
``refused:<code>`` (it never ran) or ``disconnected`` (the client left a
stream; the turn still completes), and ``<code>`` is the error code the client
was given. Checked with a model that fails (``failed:model_error``) and a server
that refuses new conversations (``refused:overloaded``), over native JSON,
native SSE, AG-UI, A2A SendMessage and A2A SendStreamingMessage.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path

import httpx2
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import (
    AgentikError,
    ApprovalError,
    ModelBackendError,
    ModelRequest,
    ModelResponse,
    OverloadedError,
    StoreError,
    TurnError,
)
from agentik.models import ScriptedModel
from agentik.server import Limits, ServerConfig, serve_agentik
from agentik.server._owners import DEFAULT_CALLER
from agentik.server._turns import outcome_of, to_http_error
from agentik.storage import StoreClosedError

LINE = re.compile(r"turn transport=(\S+) conversation=(\S+) outcome=(\S+) ms=")
VOCABULARY = re.compile(
    r"^(finished|awaiting_approval|disconnected|failed:[a-z_]+|refused:[a-z_]+)$"
)
SSE = {"Accept": "text/event-stream"}


def respond(request: ModelRequest) -> ModelResponse:
    if "boom" in request.messages[-1].content:
        raise ModelBackendError("the backend is down")
    return ModelResponse(text="fine")


async def native_json(client: httpx2.AsyncClient, cid: str, text: str) -> None:
    await client.post(f"/agentik/conversations/{cid}/turns", json={"text": text})


async def native_sse(client: httpx2.AsyncClient, cid: str, text: str) -> None:
    await client.post(f"/agentik/conversations/{cid}/turns", json={"text": text}, headers=SSE)


async def agui(client: httpx2.AsyncClient, cid: str, text: str) -> None:
    run = {
        "threadId": cid,
        "runId": "r",
        "messages": [{"id": "u", "role": "user", "content": text}],
    }
    await client.post("/agui", json=run, headers=SSE)


def a2a(method: str) -> Callable[[httpx2.AsyncClient, str, str], Awaitable[None]]:
    async def send(client: httpx2.AsyncClient, cid: str, text: str) -> None:
        message = {"messageId": f"m-{cid}", "role": "ROLE_USER", "parts": [{"text": text}]}
        rpc = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": method,
            "params": {"message": {**message, "contextId": cid}},
        }
        headers = {"A2A-Version": "1.0", **(SSE if "Streaming" in method else {})}
        await client.post("/a2a", json=rpc, headers=headers)

    return send


TRANSPORTS = {
    "native": native_json,
    "native-sse": native_sse,
    "agui": agui,
    "a2a": a2a("SendMessage"),
    "a2a-stream": a2a("SendStreamingMessage"),
}


async def serve(tmp_path: Path, **changes: object) -> AsyncIterator[httpx2.AsyncClient]:
    config = ServerConfig(port=0, database=str(tmp_path / "log.db"), **changes)  # type: ignore[arg-type]
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            partial(serve_agentik, config, model=ScriptedModel(respond), shutdown_trigger=stop.wait)
        )
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            yield client
        stop.set()


def outcomes(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    """conversation -> outcome, one line per turn."""
    found: dict[str, str] = {}
    for record in caplog.records:
        match = LINE.search(record.getMessage())
        if match:
            assert match[2] not in found, f"two turn lines for {match[2]}"
            found[match[2]] = match[3]
    return found


async def test_a_failing_model_is_failed_model_error_everywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agentik.server")
    async for client in serve(tmp_path):
        for name, send in TRANSPORTS.items():
            await send(client, f"fail-{name}", "boom")
            await send(client, f"ok-{name}", "hello")
    seen = outcomes(caplog)
    assert seen == {
        **{f"fail-{name}": "failed:model_error" for name in TRANSPORTS},
        **{f"ok-{name}": "finished" for name in TRANSPORTS},
    }


async def test_a_refused_turn_is_refused_overloaded_everywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With room for one live conversation, a turn for any other is refused (429)."""
    caplog.set_level(logging.INFO, logger="agentik.server")
    async for client in serve(tmp_path, limits=Limits(max_conversations=1)):
        await native_json(client, "first", "hello")
        for name, send in TRANSPORTS.items():
            await send(client, f"new-{name}", "hello")
    seen = outcomes(caplog)
    assert seen == {"first": "finished", **{f"new-{n}": "refused:overloaded" for n in TRANSPORTS}}


CODES = st.from_regex(r"[a-z][a-z_]{0,19}", fullmatch=True)
ERRORS = st.one_of(
    st.builds(lambda code, text: TurnError(text, code=code), CODES, st.text(max_size=20)),
    st.builds(lambda s: OverloadedError("busy", retry_after=s), st.floats(0, 100)),
    st.builds(ValueError, st.text(max_size=20)),
    st.builds(StoreClosedError, st.text(max_size=20)),
    st.builds(StoreError, st.text(max_size=20)),
    st.builds(AgentikError, st.text(max_size=20)),
    st.builds(lambda code, text: ApprovalError(text, code=code), CODES, st.text(max_size=20)),
)


@settings(max_examples=200, deadline=None)
@given(error=ERRORS)
def test_the_outcome_is_the_code_the_client_gets(error: Exception) -> None:
    """For any error a turn can end in, the log says failed (it ran) or refused
    (it never ran), followed by the code of the client's error body."""
    outcome = outcome_of(error, to_http_error(error, DEFAULT_CALLER, "c"))
    assert VOCABULARY.match(outcome), outcome
    kind = "failed" if isinstance(error, TurnError) else "refused"
    assert outcome == f"{kind}:{to_http_error(error, DEFAULT_CALLER, 'c').code}"
