"""A tool's question to the person (MCP elicitation) over A2A: the task whose
turn a question holds is ``TASK_STATE_INPUT_REQUIRED``, its status message the
question (a text line, and a data part ``{"elicitation": {id, source, message,
requestedSchema}}``); a follow-up message on the task with a data part
``{"elicitation": id, "action", "content"}`` answers it and the task goes on.

Driven through the a2a-sdk client (raw JSON-RPC for the refusals) against a
real server on 127.0.0.1 whose MCP toolset is the tiny MCP server; real time
(the MCP server is real), bounded by ``fail_after``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import trio
from a2a.client import Client as A2AClient
from a2a.types import CancelTaskRequest, GetTaskRequest, StreamResponse, Task, TaskState
from google.protobuf.json_format import MessageToDict

from tests.mcp.test_stdio import LIMIT
from tests.server.a2a_support import A2A_1, decision_message, user_message
from tests.server.elicit_support import a2a_client, serve_web

INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED
WORKING = TaskState.TASK_STATE_WORKING


async def _frames(sdk: A2AClient, request: Any) -> list[StreamResponse]:
    return [r async for r in sdk.send_message(request)]


async def _send(sdk: A2AClient, request: Any) -> Task:
    [reply] = await _frames(sdk, request)
    assert reply.WhichOneof("payload") == "task"
    return reply.task


def _question(status: Any) -> dict[str, Any]:
    """The question a waiting task's status message carries, as data; its text
    line says the question too."""
    message = MessageToDict(status.message)
    [data] = [p["data"] for p in message["parts"] if "data" in p]
    texts = " ".join(p.get("text", "") for p in message["parts"])
    question: dict[str, Any] = data["elicitation"]
    assert question["message"] in texts
    return question


def _check_question(question: dict[str, Any]) -> None:
    assert question["message"] == "Who is the booking for?"
    assert question["source"] == "web"
    assert question["requestedSchema"]["properties"]["guests"]["default"] == 2


async def _rpc(url: str, task_id: str, data: Any) -> dict[str, Any]:
    """A raw follow-up SendMessage whose one part is the data part ``data``."""
    message = {
        "messageId": f"m-{id(data)}",
        "role": "ROLE_USER",
        "parts": [{"data": data}],
        "taskId": task_id,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    async with httpx2.AsyncClient(base_url=url, timeout=30) as raw:
        response = await raw.post("/a2a", json=body, headers=A2A_1)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


async def test_the_task_asks_and_an_answer_completes_it(mcp_url: str, tmp_path: Path) -> None:
    with trio.fail_after(LIMIT):
        async with serve_web(mcp_url, tmp_path) as url, a2a_client(url) as sdk:
            task = await _send(sdk, user_message("please book", "m1", "ctx"))
            assert task.status.state == INPUT_REQUIRED
            question = _question(task.status)
            _check_question(question)
            got = await sdk.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == INPUT_REQUIRED
            assert _question(got.status) == question
            answer = {"elicitation": question["id"], "action": "accept", "content": {"name": "Ada"}}
            done = await _send(sdk, decision_message(answer, "m2", task.id))
            assert (done.id, done.status.state) == (task.id, COMPLETED)
            assert done.artifacts[0].parts[0].text == "booked for Ada, 2 guests"


async def test_a_bad_answer_is_refused_and_the_task_still_asks(
    mcp_url: str, tmp_path: Path
) -> None:
    """Content that does not fit, an unknown question or action, a decision where a
    question waits: -32602, nothing changes; then a decline completes the task."""
    with trio.fail_after(LIMIT):
        async with serve_web(mcp_url, tmp_path) as url, a2a_client(url) as sdk:
            task = await _send(sdk, user_message("please book", "m1", "ctx"))
            question = _question(task.status)
            eid = question["id"]
            for data, says in [
                ({"elicitation": eid, "content": {"name": 3}}, "name: 3 is not of type"),
                ({"elicitation": "nope", "action": "decline"}, "does not wait"),
                ({"elicitation": eid, "action": "maybe"}, "'accept', 'decline' or 'cancel'"),
                ({"elicitation": eid, "content": "Ada"}, "content"),
                ({"approve": True}, "asks a question"),
            ]:
                reply = await _rpc(url, task.id, data)
                assert reply["error"]["code"] == -32602, (data, reply)
                assert says in reply["error"]["message"], (data, reply)
            got = await sdk.get_task(GetTaskRequest(id=task.id))
            assert got.status.state == INPUT_REQUIRED
            assert _question(got.status) == question
            answer = {"elicitation": eid, "action": "decline"}
            done = await _send(sdk, decision_message(answer, "m2", task.id))
            assert done.status.state == COMPLETED
            assert done.artifacts[0].parts[0].text == "not booked: decline"


async def test_streaming_asks_then_a_streamed_answer_goes_on(mcp_url: str, tmp_path: Path) -> None:
    """SendStreamingMessage: task, WORKING, INPUT_REQUIRED with the question, and the
    stream ends; the streamed answer: task, WORKING, the answer artifact, COMPLETED."""
    with trio.fail_after(LIMIT):
        async with serve_web(mcp_url, tmp_path) as url, a2a_client(url, streaming=True) as sdk:
            frames = await _frames(sdk, user_message("please book", "m1", "ctx"))
            kinds = [f.WhichOneof("payload") for f in frames]
            assert kinds == ["task", "status_update", "status_update"]
            task_id = frames[0].task.id
            assert frames[1].status_update.status.state == WORKING
            asked = frames[2].status_update
            assert (asked.task_id, asked.status.state) == (task_id, INPUT_REQUIRED)
            question = _question(asked.status)
            _check_question(question)
            answer = {"elicitation": question["id"], "content": {"name": "Bo", "guests": 3}}
            frames = await _frames(sdk, decision_message(answer, "m2", task_id))
            kinds = [f.WhichOneof("payload") for f in frames]
            assert kinds == ["task", "status_update", "artifact_update", "status_update"]
            assert frames[0].task.status.state == INPUT_REQUIRED
            assert frames[1].status_update.status.state == WORKING
            assert frames[2].artifact_update.artifact.parts[0].text == "booked for Bo, 3 guests"
            assert frames[-1].status_update.status.state == COMPLETED


async def test_cancelling_a_task_that_asks_cancels_its_turn(mcp_url: str, tmp_path: Path) -> None:
    """CancelTask while a question holds the turn: CANCELED at once (the turn runs,
    so it is cancelled, not treated as one paused for approval), and the question
    no longer waits."""
    with trio.fail_after(LIMIT):
        async with serve_web(mcp_url, tmp_path) as url, a2a_client(url) as sdk:
            task = await _send(sdk, user_message("please book", "m1", "ctx"))
            assert task.status.state == INPUT_REQUIRED
            with trio.fail_after(5):  # far below the question's own 120 s timeout
                canceled = await sdk.cancel_task(CancelTaskRequest(id=task.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            async with httpx2.AsyncClient(base_url=url, timeout=30) as raw:
                while True:
                    got = await sdk.get_task(GetTaskRequest(id=task.id))
                    if got.status.state not in (INPUT_REQUIRED, WORKING):
                        break
                    await trio.sleep(0.02)
                assert got.status.state == TaskState.TASK_STATE_CANCELED
                listed = await raw.get("/agentik/conversations/ctx/elicitations")
                assert listed.json()["elicitations"] == []
