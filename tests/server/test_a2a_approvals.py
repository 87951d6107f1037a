"""Approvals over A2A (issue 15): a task whose turn waits for a person goes to
``TASK_STATE_INPUT_REQUIRED`` with the waiting calls in its status message;
the client's next message on that task decides (a data part ``{"approve",
"reason"}`` or ``{"decisions": [...]}``, or the text ``approve``/``deny``)
and the task goes on. Driven through the a2a-sdk client against a real
server on 127.0.0.1 and a real SQLite file; the model is scripted.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from agentik.server import Limits
from agentik.server.a2a import _tasks as _a2a_tasks
from tests.reliability.helpers import check_history, history
from tests.server.a2a_support import (
    GUARD_SECONDS,
    PAID,
    TOKENS,
    Served,
    decision_message,
    responses,
    rpc_reply,
    serving,
    user_message,
    wait_until,
)

INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED


@pytest.fixture(autouse=True)
def nothing_paid() -> None:
    PAID.clear()


def waiting_calls(task: Task) -> list[dict[str, Any]]:
    """The calls the task's status message says wait, from its data part."""
    message = MessageToDict(task.status.message)
    data = [p["data"] for p in message["parts"] if "data" in p]
    assert len(data) == 1, message
    calls: list[dict[str, Any]] = data[0]["approvals"]
    return calls


def status_text(task: Task) -> str:
    return " ".join(p.text for p in task.status.message.parts if p.text)


async def send(served: Served, request: Any) -> Task:
    [reply] = await responses(served.sdk, request)
    assert reply.WhichOneof("payload") == "task"
    return reply.task


async def test_a_paused_task_is_input_required_and_an_approval_completes_it(
    tmp_path: Path,
) -> None:
    """SendMessage answers INPUT_REQUIRED with the waiting call (id, tool, arguments)
    in a data part and a text line; GetTask and ListTasks agree; a follow-up with
    the taskId and ``{"approve": true}`` runs the tool and completes the task."""
    async with serving(tmp_path / "a.db") as served:
        task = await send(served, user_message("pay 5", "m1", "ctx"))
        assert task.status.state == INPUT_REQUIRED
        [call] = waiting_calls(task)
        assert call["name"] == "vault_pay"
        assert json.loads(call["arguments"]) == {"amount": 5}
        assert call["callId"] in status_text(task)
        assert "vault_pay" in status_text(task)
        assert PAID == []

        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == INPUT_REQUIRED
        assert waiting_calls(got) == [call]
        listed = await served.sdk.list_tasks(
            ListTasksRequest(context_id="ctx", status=INPUT_REQUIRED)
        )
        assert [t.id for t in listed.tasks] == [task.id]
        everywhere = await served.sdk.list_tasks(ListTasksRequest(status=INPUT_REQUIRED))
        assert [t.id for t in everywhere.tasks] == [task.id]

        done = await send(served, decision_message({"approve": True}, "m2", task.id))
        assert done.id == task.id
        assert done.status.state == COMPLETED
        assert done.artifacts[0].parts[0].text == "done: paid 5"
        assert PAID == [5]
        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == COMPLETED
        check_history(await history(served.storage, "ctx"), once=("pay 5",))


@pytest.mark.parametrize("streaming", [False, True])
async def test_a_call_with_invalid_arguments_never_makes_the_task_wait(
    tmp_path: Path, streaming: bool
) -> None:
    """A payment of ``"lots"`` is answered with the schema's error in the same
    turn: the task completes, never INPUT_REQUIRED, and nothing was paid."""
    async with serving(tmp_path / "a.db", streaming=streaming) as served:
        replies = await responses(served.sdk, user_message("pay lots", "m1", "ctx"))
        states = [
            r.task.status.state
            if r.WhichOneof("payload") == "task"
            else r.status_update.status.state
            for r in replies
            if r.WhichOneof("payload") in ("task", "status_update")
        ]
        assert INPUT_REQUIRED not in states
        task = await served.sdk.get_task(GetTaskRequest(id=replies[0].task.id))
        assert task.status.state == COMPLETED
        assert task.artifacts[0].parts[0].text == (
            "done: error: invalid arguments for tool 'vault_pay': field 'amount' must be an"
            ' integer, got a string "lots"'
        )
        assert PAID == []
        check_history(await history(served.storage, "ctx"), once=("pay lots",))


async def test_a_text_deny_with_a_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The text ``deny: <reason>`` denies every waiting call: the tool never runs
    and the model sees ``denied: <reason>``. The log says it as the native API
    does: the turn line ``awaiting_approval``, then one ``decision`` line,
    ``finished``."""
    caplog.set_level(logging.INFO, logger="agentik.server")
    async with serving(tmp_path / "a.db") as served:
        task = await send(served, user_message("pay 7", "m1", "ctx"))
        assert task.status.state == INPUT_REQUIRED
        done = await send(served, user_message("deny: too much", "m2", task_id=task.id))
        assert done.status.state == COMPLETED
        assert done.artifacts[0].parts[0].text == "done: denied: too much"
        assert PAID == []
    turns = re.findall(r"turn transport=a2a conversation=ctx outcome=(\S+)", caplog.text)
    assert turns == ["awaiting_approval"]
    decisions = re.findall(r"decision transport=a2a conversation=ctx outcome=(\S+)", caplog.text)
    assert decisions == ["finished"]


async def test_calls_decided_one_by_one(tmp_path: Path) -> None:
    """Two calls wait: ``decisions`` decides the first (the task stays
    INPUT_REQUIRED, listing only the other), then the second completes it."""
    async with serving(tmp_path / "a.db") as served:
        task = await send(served, user_message("pay 1 and 2", "m1", "ctx"))
        first, second = waiting_calls(task)
        assert [json.loads(c["arguments"]) for c in (first, second)] == [
            {"amount": 1},
            {"amount": 2},
        ]
        one = {"decisions": [{"callId": first["callId"], "approve": True}]}
        still = await send(served, decision_message(one, "m2", task.id))
        assert still.status.state == INPUT_REQUIRED
        assert waiting_calls(still) == [second]
        assert PAID == []
        other = {"decisions": [{"callId": second["callId"], "approve": False, "reason": "no"}]}
        done = await send(served, decision_message(other, "m3", task.id, context_id="ctx"))
        assert done.status.state == COMPLETED
        # the denial is recorded when taken; the approved call runs once all are decided
        assert done.artifacts[0].parts[0].text == "done: denied: no; paid 1"
        assert PAID == [1]


async def test_a_paused_task_survives_a_restart(tmp_path: Path) -> None:
    """After a restart GetTask and ListTasks still say INPUT_REQUIRED (from stored
    history and the turn's record), and the text ``approve`` approves both calls."""
    database = tmp_path / "a.db"
    async with serving(database) as served:
        task = await send(served, user_message("pay 3 and 4", "m1", "ctx"))
        assert task.status.state == INPUT_REQUIRED
        calls = waiting_calls(task)
    async with serving(database) as served:
        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == INPUT_REQUIRED
        assert waiting_calls(got) == calls
        listed = await served.sdk.list_tasks(ListTasksRequest(context_id="ctx"))
        assert [(t.id, t.status.state) for t in listed.tasks] == [(task.id, INPUT_REQUIRED)]
        done = await send(served, user_message("approve", "m2", task_id=task.id))
        assert done.status.state == COMPLETED
        assert done.artifacts[0].parts[0].text == "done: paid 3; paid 4"
        assert sorted(PAID) == [3, 4]  # approved together: they run at once
        check_history(await history(served.storage, "ctx"), once=("pay 3 and 4",))


async def test_streaming_pause_and_decision(tmp_path: Path) -> None:
    """SendStreamingMessage: task, WORKING, then INPUT_REQUIRED (the waiting call in
    its message), and the stream ends; a streamed decision goes on to the answer
    artifact and COMPLETED."""
    async with serving(tmp_path / "a.db", streaming=True) as served:
        frames = await responses(served.sdk, user_message("pay 9", "m1", "ctx"))
        kinds = [f.WhichOneof("payload") for f in frames]
        assert kinds == ["task", "status_update", "status_update"]
        task_id = frames[0].task.id
        working, paused = frames[1].status_update, frames[2].status_update
        assert working.status.state == TaskState.TASK_STATE_WORKING
        assert paused.status.state == INPUT_REQUIRED
        assert paused.task_id == task_id
        message = MessageToDict(paused.status.message)
        [data] = [p["data"] for p in message["parts"] if "data" in p]
        assert [c["name"] for c in data["approvals"]] == ["vault_pay"]

        frames = await responses(served.sdk, decision_message({"approve": True}, "m2", task_id))
        kinds = [f.WhichOneof("payload") for f in frames]
        assert kinds == ["task", "status_update", "artifact_update", "status_update"]
        assert frames[0].task.id == task_id
        assert frames[2].artifact_update.artifact.parts[0].text == "done: paid 9"
        assert frames[-1].status_update.status.state == COMPLETED
        assert PAID == [9]


async def test_a_subscriber_follows_a_paused_task_to_its_end(tmp_path: Path) -> None:
    """SubscribeToTask on an INPUT_REQUIRED task: the task first, then, once a
    decision comes, WORKING, the answer and COMPLETED; then the stream ends."""
    async with serving(tmp_path / "a.db", streaming=True) as served:
        frames = await responses(served.sdk, user_message("pay 2", "m1", "ctx"))
        task_id = frames[0].task.id
        seen: list[Any] = []
        subscribed = trio.Event()
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                async for frame in served.sdk.subscribe(SubscribeToTaskRequest(id=task_id)):
                    seen.append(frame)
                    subscribed.set()

            nursery.start_soon(follow)
            await subscribed.wait()
            reply = await served.rpc(
                "SendMessage",
                {
                    "message": {
                        "messageId": "m2",
                        "role": "ROLE_USER",
                        "taskId": task_id,
                        "parts": [{"data": {"approve": True}}],
                    }
                },
            )
            assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        kinds = [f.WhichOneof("payload") for f in seen]
        assert kinds == ["task", "status_update", "artifact_update", "status_update"]
        assert seen[0].task.status.state == INPUT_REQUIRED
        assert seen[-1].status_update.status.state == COMPLETED


async def replace_over_a2a(served: Served, task: Task) -> None:
    await responses(served.sdk, user_message("hello", "m9", "ctx"))


async def replace_natively(served: Served, task: Task) -> None:
    reply = await served.raw.post("/agentik/conversations/ctx/turns", json={"text": "hello"})
    assert reply.status_code == 200, reply.text


async def decide_natively(served: Served, task: Task) -> None:
    [call] = waiting_calls(task)
    reply = await served.raw.post(
        f"/agentik/conversations/ctx/approvals/{call['callId']}", json={"approve": True}
    )
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("act", "ends"),
    [
        (replace_over_a2a, TaskState.TASK_STATE_CANCELED),
        (replace_natively, TaskState.TASK_STATE_CANCELED),
        (decide_natively, COMPLETED),
    ],
)
async def test_a_subscriber_sees_a_waiting_task_end_however_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, act: Any, ends: int
) -> None:
    """A waiting task can end without an A2A run: a new message in its context
    (over A2A or the native API) replaces it, a native decision runs it on. Its
    subscribers still get how it ended (the answer too), and their stream ends.
    (Real sockets: the recheck interval is made tiny rather than mocked.)"""
    monkeypatch.setattr(_a2a_tasks, "IDLE_RECHECK_SECONDS", 0.01)
    async with serving(tmp_path / "a.db", streaming=True) as served:
        frames = await responses(served.sdk, user_message("pay 3", "m1", "ctx"))
        task = await served.sdk.get_task(GetTaskRequest(id=frames[0].task.id))
        assert task.status.state == INPUT_REQUIRED
        seen: list[Any] = []
        subscribed = trio.Event()
        with trio.fail_after(GUARD_SECONDS):
            async with trio.open_nursery() as nursery:

                async def follow() -> None:
                    async for frame in served.sdk.subscribe(SubscribeToTaskRequest(id=task.id)):
                        seen.append(frame)
                        subscribed.set()

                nursery.start_soon(follow)
                await subscribed.wait()
                await act(served, task)
        assert seen[0].task.status.state == INPUT_REQUIRED
        assert seen[-1].status_update.status.state == ends
        assert seen[-1].status_update.task_id == task.id
        middle = [f.WhichOneof("payload") for f in seen[1:-1]]
        states = [f.status_update.status.state for f in seen[1:-1] if f.HasField("status_update")]
        assert set(states) <= {TaskState.TASK_STATE_WORKING}, states
        if ends == COMPLETED:
            assert middle[-1] == "artifact_update"
            assert seen[-2].artifact_update.artifact.parts[0].text == "done: paid 3"
        else:
            assert "artifact_update" not in middle
    assert ([3] if ends == COMPLETED else []) == PAID


@pytest.mark.parametrize("restart", [False, True])
async def test_a_task_decided_over_another_transport_runs_as_that_task(
    tmp_path: Path, restart: bool
) -> None:
    """A native decision runs a waiting task on: while it runs GetTask and
    ListTasks say WORKING (not FAILED: its turn is unfinished but running),
    and CancelTask stops it: CANCELED, history valid. Also when the task
    waited across a restart and the native decision is the conversation's
    first touch (the turn then learns its key from storage)."""
    database = tmp_path / "a.db"
    if restart:
        async with serving(database) as served:
            task = await send(served, user_message("pay 99", "m1", "ctx"))
        async with serving(database) as served:
            await run_on_natively(served, task.id)
    else:
        async with serving(database) as served:
            task = await send(served, user_message("pay 99", "m1", "ctx"))
            await run_on_natively(served, task.id)
    assert PAID == [99]


async def run_on_natively(served: Served, task_id: str) -> None:
    """Decide the waiting task's call over the native API; while the turn
    runs on, check GetTask and ListTasks, then cancel it over A2A."""
    task = await served.sdk.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == INPUT_REQUIRED
    [call] = waiting_calls(task)
    statuses: list[int] = []
    async with trio.open_nursery() as nursery:

        async def decide() -> None:
            reply = await served.raw.post(
                f"/agentik/conversations/ctx/approvals/{call['callId']}",
                json={"approve": True},
            )
            statuses.append(reply.status_code)

        nursery.start_soon(decide)
        await served.script.asked.wait()  # paid, the model answers slowly
        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_WORKING
        listed = await served.sdk.list_tasks(ListTasksRequest(context_id="ctx"))
        assert listed.tasks[0].id == task.id
        assert listed.tasks[0].status.state == TaskState.TASK_STATE_WORKING
        canceled = await served.sdk.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert statuses == [409]  # the native caller hears its turn was cancelled
    got = await served.sdk.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == TaskState.TASK_STATE_CANCELED
    check_history(await history(served.storage, "ctx"), once=("pay 99",))


@pytest.mark.parametrize(
    ("parts", "named"),
    [
        ([{"data": {"approve": True, "callId": "nope"}}], "'nope'"),
        ([{"data": {"decisions": [{"callId": "nope", "approve": True}]}}], "'nope'"),
        ([{"data": {"approve": "yes"}}], "approve"),
        ([{"data": {"approve": True, "reason": 5}}], "reason"),
        ([{"data": {"decisions": []}}], "decisions"),
        ([{"data": {"whatever": 1}}], "approve"),
        ([{"data": [1, 2]}], "approve"),
        ([{"data": {"approve": True}}, {"data": {"approve": False}}], "one data part"),
        ([{"text": "maybe"}], "approve"),
    ],
)
async def test_a_bad_decision_changes_nothing(
    tmp_path: Path, parts: list[dict[str, Any]], named: str
) -> None:
    """A follow-up that is not a valid decision for the waiting calls is
    -32602 naming what is wrong; the task still waits and nothing ran."""
    async with serving(tmp_path / "a.db") as served:
        task = await send(served, user_message("pay 5", "m1", "ctx"))
        message = {"messageId": "m2", "role": "ROLE_USER", "taskId": task.id, "parts": parts}
        reply = await served.rpc("SendMessage", {"message": message})
        assert reply["error"]["code"] == -32602, reply
        assert named in reply["error"]["message"]
        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == INPUT_REQUIRED
        assert PAID == []


async def test_a_data_part_outside_a_task_is_unsupported_content(tmp_path: Path) -> None:
    """Data parts are decisions: a new message (no taskId) made of one is -32005."""
    async with serving(tmp_path / "a.db") as served:
        message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"approve": True}}]}
        reply = await served.rpc("SendMessage", {"message": message})
        assert reply["error"]["code"] == -32005


async def test_another_owner_cannot_see_or_decide_a_paused_task(tmp_path: Path) -> None:
    """Bob, given alice's task id, gets TaskNotFound for every method; alice's
    task still waits and nothing ran."""
    async with serving(tmp_path / "a.db", owners=True) as served:
        task = await send(served, user_message("pay 5", "m1", "ctx"))  # alice's client
        assert task.status.state == INPUT_REQUIRED
        bob = TOKENS["bob"]
        decide = {
            "message": {
                "messageId": "m2",
                "role": "ROLE_USER",
                "taskId": task.id,
                "parts": [{"data": {"approve": True}}],
            }
        }
        for method, params in [
            ("SendMessage", decide),
            ("GetTask", {"id": task.id}),
            ("CancelTask", {"id": task.id}),
        ]:
            reply = await served.rpc(method, params, token=bob)
            assert reply["error"]["code"] == -32001, (method, reply)
        listed = await served.rpc("ListTasks", {"contextId": "ctx"}, token=bob)
        assert listed["result"]["tasks"] == []
        subscribe = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SubscribeToTask",
            "params": {"id": task.id},
        }
        response = await served.raw.post(
            "/a2a",
            json=subscribe,
            headers={"A2A-Version": "1.0", "Authorization": f"Bearer {bob}"},
        )
        assert rpc_reply(response)["error"]["code"] == -32001
        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == INPUT_REQUIRED
        assert PAID == []


async def test_cancel_a_paused_task(tmp_path: Path) -> None:
    """CancelTask on an INPUT_REQUIRED task: CANCELED, the waiting call answered
    (denied) so history stays valid, nothing ran; still CANCELED after a restart;
    a follow-up is refused (terminal) and so is a subscription."""
    database = tmp_path / "a.db"
    async with serving(database) as served:
        task = await send(served, user_message("pay 6", "m1", "ctx"))
        assert task.status.state == INPUT_REQUIRED
        canceled = await served.sdk.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
        stored = await history(served.storage, "ctx")
        check_history(stored, once=("pay 6",))
        assert stored[-1].content.startswith("denied:")
    async with serving(database, streaming=True) as served:
        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(UnsupportedOperationError):
            await send(served, user_message("approve", "m2", task_id=task.id))
        with pytest.raises(UnsupportedOperationError):
            await served.sdk.subscribe(SubscribeToTaskRequest(id=task.id)).__anext__()
        with pytest.raises(TaskNotFoundError):
            await served.sdk.get_task(GetTaskRequest(id=task.id + "x"))
    assert PAID == []


async def test_shutdown_ends_a_subscription_to_a_paused_task(tmp_path: Path) -> None:
    """Nothing runs a task that waits for input, so nothing would end a
    subscription to it: a graceful shutdown ends it (the last frame is the
    task) instead of waiting ``graceful_timeout`` (30 s here) for it."""
    frames: list[dict[str, Any]] = []
    subscribed = trio.Event()
    with trio.fail_after(15):  # well under graceful_timeout
        async with httpx2.AsyncClient(timeout=GUARD_SECONDS) as raw, trio.open_nursery() as nursery:
            async with serving(tmp_path / "a.db", limits=Limits(graceful_timeout=30)) as served:
                task = await send(served, user_message("pay 1", "m1", "ctx"))
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SubscribeToTask",
                    "params": {"id": task.id},
                }

                async def follow() -> None:
                    headers = {"A2A-Version": "1.0", "Accept": "text/event-stream"}
                    async with raw.stream(
                        "POST", f"{served.url}/a2a", json=body, headers=headers
                    ) as r:
                        async for line in r.aiter_lines():
                            if line.startswith("data:"):
                                frames.append(json.loads(line[5:]))
                                subscribed.set()

                nursery.start_soon(follow)
                await subscribed.wait()
    [only] = frames
    assert only["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_a_new_message_replaces_a_paused_task(tmp_path: Path) -> None:
    """A new message in the context while a task waits: the waiting call is
    denied (history stays valid), the new task runs, and the old one is
    CANCELED, saying why; a decision for it then is refused (terminal)."""
    async with serving(tmp_path / "a.db") as served:
        task = await send(served, user_message("pay 5", "m1", "ctx"))
        assert task.status.state == INPUT_REQUIRED
        new = await send(served, user_message("hello", "m2", "ctx"))
        assert new.status.state == COMPLETED
        old = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert old.status.state == TaskState.TASK_STATE_CANCELED
        assert "replaced" in status_text(old)
        with pytest.raises(UnsupportedOperationError):
            await send(served, user_message("approve", "m3", task_id=task.id))
        check_history(await history(served.storage, "ctx"), once=("pay 5", "hello"))
    assert PAID == []


async def test_a_decision_sent_with_return_immediately_runs_on_in_the_server(
    tmp_path: Path,
) -> None:
    """``returnImmediately`` on a decision: the answer is WORKING at once; GetTask
    says WORKING while the task runs on (never INPUT_REQUIRED again), CancelTask
    stops it (CANCELED, history valid), and the tool that was approved ran."""
    async with serving(tmp_path / "a.db") as served:
        task = await send(served, user_message("pay 99", "m1", "ctx"))
        assert task.status.state == INPUT_REQUIRED
        request = decision_message({"approve": True}, "m2", task.id)
        request.configuration.return_immediately = True
        working = await send(served, request)
        assert working.status.state == TaskState.TASK_STATE_WORKING
        got = await served.sdk.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_WORKING
        await served.script.asked.wait()
        assert PAID == [99]
        canceled = await served.sdk.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED

        async def ended() -> bool:
            got = await served.sdk.get_task(GetTaskRequest(id=task.id))
            return bool(got.status.state == TaskState.TASK_STATE_CANCELED)

        await wait_until(ended)
        check_history(await history(served.storage, "ctx"), once=("pay 99",))
