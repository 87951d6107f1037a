"""The A2A client's conformance against agentik's own A2A server, with the
a2a-sdk's types as the oracle: every call the client makes in a session
(answer, question and answer, streaming and not) is recorded on the wire, and
each request must parse strictly as the SDK's request type for its method,
carry ``A2A-Version: 1.0``, and each JSON answer (the card, each non-streamed
result) must parse strictly as the SDK's answer type."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    SendMessageRequest,
    SendMessageResponse,
    SubscribeToTaskRequest,
    Task,
)
from google.protobuf import json_format

from agentik import A2AAgentConfig, in_memory_storage, open_a2a_toolsets, open_chat_agent
from tests.a2a_client.support import caller_model, remote_agent
from tests.server.a2a_support import GUARD_SECONDS

REQUESTS = {
    "SendMessage": SendMessageRequest,
    "SendStreamingMessage": SendMessageRequest,
    "GetTask": GetTaskRequest,
    "SubscribeToTask": SubscribeToTaskRequest,
    "CancelTask": CancelTaskRequest,
}
RESULTS = {"SendMessage": SendMessageResponse, "GetTask": Task, "CancelTask": Task}


class Recorder:
    """httpx2 event hooks keeping each request and each non-streamed JSON answer."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []
        self.answers: list[tuple[httpx2.Request, Any]] = []

    async def on_request(self, request: httpx2.Request) -> None:
        self.requests.append(request)

    async def on_response(self, response: httpx2.Response) -> None:
        if response.headers.get("content-type", "").startswith("application/json"):
            await response.aread()
            self.answers.append((response.request, response.json()))


@pytest.mark.parametrize("streaming", [True, False])
async def test_every_call_is_a2a_1_0_as_the_sdk_reads_it(tmp_path: Path, streaming: bool) -> None:
    recorder = Recorder()
    hooks = {"request": [recorder.on_request], "response": [recorder.on_response]}
    async with (
        remote_agent(tmp_path) as remote,
        httpx2.AsyncClient(event_hooks=hooks) as http,
    ):
        config = A2AAgentConfig(name="remote", url=remote.url, streaming=streaming)
        async with (
            open_a2a_toolsets([config], http=http) as toolsets,
            open_chat_agent(
                model=caller_model(), storage=in_memory_storage(), toolsets=toolsets
            ) as agent,
            trio.open_nursery() as nursery,
        ):
            assert (await agent.send("c1", "hello")).text == "remote: You said: hello"

            async def pay() -> None:
                await agent.send("c1", "pay 3")

            nursery.start_soon(pay)
            with trio.fail_after(GUARD_SECONDS):
                while not (asked := await agent.pending_elicitations("c1")):  # noqa: ASYNC110
                    await trio.sleep(0.01)
            await agent.answer_elicitation("c1", asked[0].id, content={"approve": True})
    methods = []
    for request in recorder.requests:
        if request.method == "GET":
            assert request.url.path == "/.well-known/agent-card.json"
            continue
        assert request.headers["a2a-version"] == "1.0"
        body = json.loads(request.content)
        assert set(body) == {"jsonrpc", "id", "method", "params"}
        assert body["jsonrpc"] == "2.0"
        methods.append(body["method"])
        json_format.ParseDict(body["params"], REQUESTS[body["method"]]())
        if body["method"] in ("SendStreamingMessage", "SubscribeToTask"):
            assert request.headers["accept"] == "text/event-stream"
    sent = "SendStreamingMessage" if streaming else "SendMessage"
    assert methods.count(sent) == 3  # hello, pay 3, the approval
    for request, answer in recorder.answers:
        if request.method == "GET":
            json_format.ParseDict(answer, AgentCard())
            continue
        method = json.loads(request.content)["method"]
        assert "error" not in answer, answer
        json_format.ParseDict(answer["result"], RESULTS[method]())
