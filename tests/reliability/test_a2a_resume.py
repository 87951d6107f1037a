"""An A2A task whose approved call a SIGKILL interrupts is never reported
ended before it is (issue "hardening", item 8; seen from outside as FAILED,
then COMPLETED once anything touched its conversation).

``agentik serve`` in a subprocess on a SQLite file, the a2a-sdk client, the
demo model and ``held_tools.pay_once`` (needs approval, not idempotent,
holds until the test lets it go): the task waits for approval, the approval
runs the call, the server is killed while the call runs, and restarted on
the same file. Then, without any request for the conversation:

- the interrupted turn resumes at start: the call is answered
  ``interrupted`` (never run again), the model answers, the task ends
  COMPLETED; every GetTask and ListTasks read meanwhile says WORKING or
  COMPLETED, never a final state it later leaves;
- the tool ran exactly once, in the killed process, after its call and its
  approval were committed;
- retrying the decision (the same message, as a client that got no answer
  does) is answered with the task COMPLETED, not -32004, and adds nothing;
  so is a native decision of the same call; the native approvals list is
  empty and the messages the native API lists are the stored ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import trio
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, ListTasksRequest, Task, TaskState

from tests.agent.helpers import assert_valid_history
from tests.reliability.held_tools import RELEASE
from tests.reliability.test_crash import ServerProcess, running_server
from tests.server.a2a_support import decision_message, user_message

TOOLS = ("tests.reliability.held_tools:pay_once",)
GUARD_SECONDS = 60
INTERRUPTED = "interrupted: the process stopped before this call finished"

COMPLETED = TaskState.TASK_STATE_COMPLETED
WORKING = TaskState.TASK_STATE_WORKING
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


def pay_runs(runs: Path) -> list[tuple[str, str, int]]:
    """``pay_once``'s run lines: (phase, tag, pid), in order (``record_run``)."""
    path = runs / "pay_once.runs"
    if not path.exists():
        return []
    lines = (line.split(" ") for line in path.read_text().splitlines())
    return [(phase, tag, int(pid)) for phase, tag, pid in lines]


async def send(url: str, request: Any, *, immediately: bool = False) -> Task:
    """One blocking SendMessage (or, ``immediately``, one that returns once
    the turn is admitted) through the a2a-sdk client; its task."""
    if immediately:
        request.configuration.return_immediately = True
    async with httpx2.AsyncClient(timeout=GUARD_SECONDS) as http:
        client = await create_client(
            url, client_config=ClientConfig(streaming=False, httpx_client=http)
        )
        try:
            [reply] = [r async for r in client.send_message(request)]
        finally:
            await client.close()
    assert reply.WhichOneof("payload") == "task", reply
    task: Task = reply.task
    return task


async def states(url: str, task_id: str) -> list[TaskState.ValueType]:
    """The task's state as GetTask and as ListTasks (its context) say it."""
    async with httpx2.AsyncClient(timeout=GUARD_SECONDS) as http:
        client = await create_client(
            url, client_config=ClientConfig(streaming=False, httpx_client=http)
        )
        try:
            got = await client.get_task(GetTaskRequest(id=task_id))
            listed = await client.list_tasks(ListTasksRequest(context_id="ctx"))
        finally:
            await client.close()
    [same] = [t for t in listed.tasks if t.id == task_id]
    return [got.status.state, same.status.state]


async def stored(server: ServerProcess) -> list[dict[str, Any]]:
    """The conversation as the native API lists it: a read of the store, not
    a request the conversation's task serves (no touch)."""
    assert server.url is not None
    async with httpx2.AsyncClient(base_url=server.url, timeout=GUARD_SECONDS) as http:
        reply = await http.get("/agentik/conversations/ctx/messages")
    assert reply.status_code == 200, reply.text
    messages: list[dict[str, Any]] = reply.json()["messages"]
    return messages


async def test_an_approved_call_killed_mid_run_resumes_at_start_and_completes(
    tmp_path: Path,
) -> None:
    database = tmp_path / "a.db"
    runs = tmp_path / "runs"
    call = 'call pay_once {"amount": 5, "tag": "t1"}'
    with trio.fail_after(GUARD_SECONDS):
        async with running_server(database, toolsets=(), tools=TOOLS) as server:
            assert server.url is not None
            task = await send(server.url, user_message(call, "m1", "ctx"))
            assert task.status.state == INPUT_REQUIRED
            approve = decision_message({"approve": True}, "m2", task.id)
            admitted = await send(server.url, approve, immediately=True)
            assert admitted.status.state == WORKING
            while not pay_runs(runs):  # noqa: ASYNC110 (the server's tool writes it)
                await trio.sleep(0.01)
            killed = server.process.pid
            await server.kill()

        async with running_server(database, toolsets=(), tools=TOOLS) as server:
            assert server.url is not None
            seen: list[TaskState.ValueType] = []
            while True:  # no request for the conversation: only reads
                now = await states(server.url, task.id)
                assert set(now) <= {WORKING, COMPLETED}, f"reported {now} (it resumes)"
                seen += now
                if now == [COMPLETED, COMPLETED]:
                    break
                await trio.sleep(0.01)
            assert set(seen) <= {WORKING, COMPLETED}, seen
            assert server.resumed == 1
            before = await stored(server)

            retried = await send(server.url, decision_message({"approve": True}, "m2", task.id))
            assert retried.id == task.id
            assert retried.status.state == COMPLETED
            answer = retried.artifacts[0].parts[0].text
            assert answer == f"pay_once returned: {INTERRUPTED}"
            async with httpx2.AsyncClient(base_url=server.url, timeout=GUARD_SECONDS) as http:
                waiting = await http.get("/agentik/conversations/ctx/approvals")
                assert waiting.json()["approvals"] == []
                [stored_call] = [m for m in before if m.get("tool_calls")]
                call_id = stored_call["tool_calls"][0]["id"]
                native = await http.post(
                    f"/agentik/conversations/ctx/approvals/{call_id}", json={"approve": True}
                )
            assert native.status_code == 200, native.text
            assert native.json()["text"] == answer
            assert await stored(server) == before, "a repeated decision added something"
            (runs / RELEASE).touch()  # nothing holds: nothing runs it again either

    contents = [m["content"] for m in before]
    assert contents == [call, "", INTERRUPTED, answer], contents
    assert [json.loads(c["arguments"]) for c in stored_call["tool_calls"]] == [
        {"amount": 5, "tag": "t1"}
    ]
    assert pay_runs(runs) == [("start", "t1", killed)], "the payment ran again, or ran on"
    from agentik import Message, Role, ToolCall

    assert_valid_history(
        [
            Message(
                Role(m["role"]),
                m["content"],
                tuple(
                    ToolCall(c["id"], c["name"], c["arguments"]) for c in m.get("tool_calls") or ()
                ),
                tool_call_id=m.get("tool_call_id"),
                seq=m["seq"],
            )
            for m in before
        ]
    )
