"""A2A 1.0 through the official a2a-sdk client (asyncio-based; it runs under trio too)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from tests.server.conftest import Running, start_server


def user_message(text: str, message_id: str, context_id: str | None = None) -> SendMessageRequest:
    message = Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id is not None:
        message.context_id = context_id
    return SendMessageRequest(message=message)


class TestWithSdkClient:
    async def test_card(self, server: Running) -> None:
        """The card speaks 1.0 and lists the configured toolsets as skills."""
        card = (await server.client.get("/.well-known/agent-card.json")).json()
        assert card["supportedInterfaces"] == [
            {"url": f"{server.url}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ]
        assert [s["id"] for s in card["skills"]] == ["clock"]
        assert card["capabilities"]["streaming"] is True

    async def test_streaming_send_then_get(self, server: Running) -> None:
        """Streaming: task SUBMITTED, WORKING, the answer artifact, COMPLETED; GetTask agrees."""
        client = await create_client(server.url, client_config=ClientConfig(streaming=True))
        try:
            kinds, task_id, answer, states = [], None, None, []
            async for response in client.send_message(user_message("hello", "m1", "ctx1")):
                kind = response.WhichOneof("payload")
                kinds.append(kind)
                if kind == "task":
                    task_id = response.task.id
                    states.append(response.task.status.state)
                elif kind == "status_update":
                    states.append(response.status_update.status.state)
                elif kind == "artifact_update":
                    answer = response.artifact_update.artifact.parts[0].text
            assert kinds == ["task", "status_update", "artifact_update", "status_update"]
            assert states == [
                TaskState.TASK_STATE_SUBMITTED,
                TaskState.TASK_STATE_WORKING,
                TaskState.TASK_STATE_COMPLETED,
            ]
            assert answer == "You said: hello"
            assert task_id is not None
            task = await client.get_task(GetTaskRequest(id=task_id, history_length=10))
            assert task.context_id == "ctx1"
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.artifacts[0].parts[0].text == "You said: hello"
            assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
        finally:
            await client.close()

    async def test_non_streaming_send_and_retry(self, server: Running) -> None:
        """SendMessage answers with the completed task; a resend is the same task, stored once."""
        client = await create_client(server.url, client_config=ClientConfig(streaming=False))
        try:
            results = [r async for r in client.send_message(user_message("one", "m9", "ctx2"))]
            again = [r async for r in client.send_message(user_message("one", "m9", "ctx2"))]
        finally:
            await client.close()
        [first] = results
        assert first.WhichOneof("payload") == "task"
        assert first.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert first.task.artifacts[0].parts[0].text == "You said: one"
        assert again[0].task.id == first.task.id
        history = (await server.client.get("/agentik/conversations/ctx2/messages")).json()
        assert len(history["messages"]) == 2

    async def test_unknown_task_and_cancel_of_finished(self, server: Running) -> None:
        client = await create_client(server.url, client_config=ClientConfig(streaming=False))
        try:
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id="no-such-task"))
            with pytest.raises(TaskNotFoundError):
                await client.cancel_task(CancelTaskRequest(id="0" * 32 + ".ctx-x"))
            [sent] = [r async for r in client.send_message(user_message("x", "m1", "ctx3"))]
            with pytest.raises(Exception, match="cannot be canceled") as caught:
                await client.cancel_task(CancelTaskRequest(id=sent.task.id))
            assert type(caught.value).__name__ == "TaskNotCancelableError"
            listed = await client.list_tasks(ListTasksRequest(context_id="ctx3"))
            assert [t.id for t in listed.tasks] == [sent.task.id]
        finally:
            await client.close()


async def wait_for_tool_call(server: Running, context_id: str, name: str) -> None:
    """Poll stored history until the model's call of ``name`` is recorded."""
    with trio.fail_after(20):
        while True:
            reply = await server.client.get(f"/agentik/conversations/{context_id}/messages")
            if reply.status_code == 200:
                calls = [c["name"] for m in reply.json()["messages"] for c in m["tool_calls"]]
                if name in calls:
                    return
            await trio.sleep(0.02)


async def test_cancel_running_task(server: Running) -> None:
    """CancelTask stops the running turn: the stream ends CANCELED, GetTask agrees,
    and history stays valid (the interrupted call has a result)."""
    await server.client.post(
        "/agentik/conversations/ctx5/turns", json={"text": 'call enable_toolset {"name": "clock"}'}
    )
    client = await create_client(server.url, client_config=ClientConfig(streaming=True))
    states: list[int] = []
    try:
        async with trio.open_nursery() as nursery:

            async def stream() -> None:
                async for response in client.send_message(
                    user_message("call clock_wait", "w1", "ctx5")
                ):
                    if response.WhichOneof("payload") == "status_update":
                        states.append(response.status_update.status.state)

            nursery.start_soon(stream)
            await wait_for_tool_call(server, "ctx5", "clock_wait")
            listed = await client.list_tasks(ListTasksRequest(context_id="ctx5"))
            [task] = listed.tasks
            assert task.status.state == TaskState.TASK_STATE_WORKING
            task_id = task.id
            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        got = await client.get_task(GetTaskRequest(id=task_id))
    finally:
        await client.close()
    assert states[-1] == TaskState.TASK_STATE_CANCELED
    assert got.status.state == TaskState.TASK_STATE_CANCELED
    history = (await server.client.get("/agentik/conversations/ctx5/messages")).json()["messages"]
    call_ids = {c["id"] for m in history for c in m["tool_calls"]}
    answered = {m["tool_call_id"] for m in history if m["role"] == "tool"}
    assert call_ids == answered


class TestRawJsonRpc:
    """Protocol errors a client gets for bad versions, old method names and bad params."""

    async def call(
        self, server: Running, body: object, version: str | None = "1.0"
    ) -> dict[str, object]:
        headers = {} if version is None else {"A2A-Version": version}
        response = await server.client.post("/a2a", json=body, headers=headers)
        assert response.status_code == 200
        result = response.json()
        assert isinstance(result, dict)
        return result

    async def test_missing_version_is_0_3(self, server: Running) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
        reply = await self.call(server, body, version=None)
        assert reply["error"]["code"] == -32009  # type: ignore[index]

    @pytest.mark.parametrize(
        "method", ["message/send", "message/stream", "tasks/get", "tasks/cancel"]
    )
    async def test_old_method_names(self, server: Running, method: str) -> None:
        reply = await self.call(server, {"jsonrpc": "2.0", "id": 2, "method": method, "params": {}})
        assert reply == {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {
                "code": -32601,
                "message": f"Method not found: {method!r}",
                "data": [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "METHOD_NOT_FOUND",
                        "domain": "a2a-protocol.org",
                        "metadata": {},
                    }
                ],
            },
        }

    @pytest.mark.parametrize(
        ("params", "message"),
        [
            ({}, "field 'message' must be an object"),
            (
                {"message": {"role": "ROLE_USER", "parts": [{"text": "a"}]}},
                "field 'message.messageId'",
            ),
            (
                {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "a"}]}},
                "'ROLE_USER'",
            ),
            ({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}, "non-empty array"),
            (
                {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": 5}]}},
                "parts[0].text",
            ),
        ],
    )
    async def test_bad_params(
        self, server: Running, params: dict[str, object], message: str
    ) -> None:
        body = {"jsonrpc": "2.0", "id": "x", "method": "SendMessage", "params": params}
        reply = await self.call(server, body)
        error = reply["error"]
        assert isinstance(error, dict)
        assert error["code"] == -32602
        assert message in error["message"]

    async def test_non_text_part(self, server: Running) -> None:
        """A data part in a new message is -32005 (a url or raw part is an
        image or a file: test_content_parts_a2a.py)."""
        part = {"data": {"x": 1}}
        params = {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [part]}}
        reply = await self.call(
            server, {"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": params}
        )
        assert reply["error"]["code"] == -32005  # type: ignore[index]

    async def test_parse_error_and_bad_envelope(self, server: Running) -> None:
        response = await server.client.post(
            "/a2a", content=b"{nope", headers={"A2A-Version": "1.0"}
        )
        assert response.json()["error"]["code"] == -32700
        reply = await self.call(server, {"id": 1, "method": "GetTask"})
        assert reply["error"]["code"] == -32600  # type: ignore[index]

    async def test_unknown_task(self, server: Running) -> None:
        body = {"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "nope"}}
        reply = await self.call(server, body)
        assert reply["error"]["code"] == -32001  # type: ignore[index]
        assert reply["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"  # type: ignore[index]


async def test_task_survives_restart(tmp_path: Path) -> None:
    """GetTask rebuilds a finished task from stored history in a new server process."""
    send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "m",
                "role": "ROLE_USER",
                "parts": [{"text": "q"}],
                "contextId": "c9",
            }
        },
    }
    headers = {"A2A-Version": "1.0"}
    async with trio.open_nursery() as nursery:
        async for first in start_server(nursery, tmp_path):
            reply = await first.client.post("/a2a", json=send, headers=headers)
            task = reply.json()["result"]["task"]
    async with trio.open_nursery() as nursery:
        async for second in start_server(nursery, tmp_path):
            get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}
            got = (await second.client.post("/a2a", json=get, headers=headers)).json()["result"]
            second.stop.set()
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["artifacts"] == task["artifacts"]


async def test_return_immediately_answers_submitted_then_the_turn_runs_on(
    server: Running,
) -> None:
    """returnImmediately: SendMessage answers SUBMITTED before the turn ends; the
    turn runs on (GetTask says WORKING while its tool hangs), CancelTask stops it,
    and a following turn that returns at once completes in the background."""
    await server.client.post(
        "/agentik/conversations/ri/turns", json={"text": 'call enable_toolset {"name": "clock"}'}
    )
    client = await create_client(server.url, client_config=ClientConfig(streaming=False))
    try:
        request = user_message("call clock_wait", "r1", "ri")
        request.configuration.return_immediately = True
        with trio.fail_after(5):  # the tool never returns: a blocking send would hang
            reply = await client.send_message(request).__anext__()
        assert reply.task.status.state == TaskState.TASK_STATE_SUBMITTED
        task_id = reply.task.id
        await wait_for_tool_call(server, "ri", "clock_wait")
        working = await client.get_task(GetTaskRequest(id=task_id))
        assert working.status.state == TaskState.TASK_STATE_WORKING
        listed = await client.list_tasks(ListTasksRequest(context_id="ri"))
        assert [t.id for t in listed.tasks] == [task_id]
        await client.cancel_task(CancelTaskRequest(id=task_id))

        quick = user_message("hello", "r2", "ri")
        quick.configuration.return_immediately = True
        reply = await client.send_message(quick).__anext__()
        assert reply.task.status.state == TaskState.TASK_STATE_SUBMITTED
        with trio.fail_after(5):
            while True:
                got = await client.get_task(GetTaskRequest(id=reply.task.id))
                if got.status.state == TaskState.TASK_STATE_COMPLETED:
                    break
                await trio.sleep(0.01)
        assert got.artifacts[0].parts[0].text
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("configuration", "named"),
    [
        ({"returnImmediately": True, "historyLength": -1}, "configuration.historyLength"),
        ({"historyLength": "all"}, "configuration.historyLength"),
    ],
)
async def test_bad_history_length_is_refused_before_a_turn_runs(
    server: Running, configuration: dict[str, object], named: str
) -> None:
    """historyLength is read from configuration and checked before anything runs,
    whether SendMessage blocks or returns immediately."""
    message = {"messageId": "b", "role": "ROLE_USER", "parts": [{"text": "hi"}], "contextId": "bad"}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": configuration},
    }
    reply = await server.client.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
    error = reply.json()["error"]
    assert error["code"] == -32602
    assert named in error["message"]
    listed = await server.client.get("/agentik/conversations/bad/messages")
    assert listed.status_code == 404 or listed.json()["messages"] == []


async def test_list_tasks_of_a_context_survives_restart(tmp_path: Path) -> None:
    """ListTasks with a contextId lists the context's tasks from stored history,
    newest first, also in a new server; native turns (other keys) are not tasks."""

    def send(message_id: str) -> dict[str, object]:
        message = {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"text": f"q {message_id}"}],
            "contextId": "lc",
        }
        return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}

    headers = {"A2A-Version": "1.0"}
    async with trio.open_nursery() as nursery:
        async for first in start_server(nursery, tmp_path):
            sent = []
            for message_id in ("a", "b", "c"):
                reply = await first.client.post("/a2a", json=send(message_id), headers=headers)
                sent.append(reply.json()["result"]["task"]["id"])
            native = await first.client.post(
                "/agentik/conversations/lc/turns", json={"text": "hi", "idempotency_key": "n1"}
            )
            assert native.status_code == 200
    async with trio.open_nursery() as nursery:
        async for second in start_server(nursery, tmp_path):
            client = await create_client(second.url, client_config=ClientConfig(streaming=False))
            try:
                listed = await client.list_tasks(ListTasksRequest(context_id="lc"))
                first_page = await client.list_tasks(ListTasksRequest(context_id="lc", page_size=2))
                rest = await client.list_tasks(
                    ListTasksRequest(
                        context_id="lc", page_size=2, page_token=first_page.next_page_token
                    )
                )
                other = await client.list_tasks(ListTasksRequest(context_id="elsewhere"))
            finally:
                await client.close()
            second.stop.set()
    assert [t.id for t in listed.tasks] == sent[::-1]
    assert {t.status.state for t in listed.tasks} == {TaskState.TASK_STATE_COMPLETED}
    assert listed.total_size == 3
    assert [t.id for t in [*first_page.tasks, *rest.tasks]] == sent[::-1]
    assert list(other.tasks) == []
