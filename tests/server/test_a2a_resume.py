"""A2A tasks whose turn a stop interrupted (issue "hardening", item 8), in
process: the database is left as a killed process leaves it (a task whose
approved call has no result), then a server opens on it.

- while the agent resumes the turn (at start, no request needed), GetTask
  and ListTasks say WORKING, never FAILED; then COMPLETED;
- the decision sent again meanwhile waits for the resumed turn and answers
  the task COMPLETED (not -32004), changing nothing; the approved call of a
  tool that is not idempotent is answered ``interrupted`` and never runs;
- an interrupted task that a later turn followed (it will not resume: a
  failure whose record was lost) is FAILED, and a lone one WORKING, in
  ListTasks as in GetTask (``will_resume``).
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
import trio
from a2a.types import GetTaskRequest, ListTasksRequest, TaskState

from agentik import Message, ModelRequest, ModelResponse, Role, ToolCall
from agentik.server._owners import DEFAULT_CALLER
from agentik.server.a2a._ledger import TaskLedger
from agentik.server.a2a._list import Query, context_page
from agentik.server.a2a._rpc import make_task_id
from agentik.storage import in_memory_storage, open_sqlite_storage
from tests.reliability.helpers import check_history, history
from tests.server.a2a_support import (
    PAID,
    Script,
    Served,
    decision_message,
    responses,
    serving,
    wait_until,
)

WORKING = TaskState.TASK_STATE_WORKING
COMPLETED = TaskState.TASK_STATE_COMPLETED
INTERRUPTED = "interrupted: the process stopped before this call finished"


@pytest.fixture(autouse=True)
def nothing_paid() -> None:
    PAID.clear()


@attrs.define
class HeldResume(Script):
    """The scripted model, holding the resumed turn's model call (the one
    after the interrupted call's result) until ``release``."""

    async def respond(self, request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if last.role is Role.TOOL and last.content.startswith("interrupted:"):
            self.asked.set()
            await self.release.wait()
        return await super().respond(request)


async def killed_while_paying(database: Path) -> str:
    """The database as a process killed while an approved ``vault_pay`` ran
    leaves it; the task's id."""
    task_id = make_task_id("ctx", "m1")
    async with open_sqlite_storage(database) as storage:
        store = storage.message_store
        await store.append("ctx", Message(Role.USER, "pay 5"), idempotency_key=task_id)
        calls = (ToolCall("pay-1-0", "vault_pay", json.dumps({"amount": 5})),)
        made = await (
            await store.submit_awaiting("ctx", Message(Role.ASSISTANT, "", calls), ["pay-1-0"])
        ).wait()
        assert made.seq is not None
        await (await store.submit_decision("ctx", made.seq, "pay-1-0", approve=True)).wait()
    return task_id


async def states(served: Served, task_id: str) -> list[TaskState.ValueType]:
    got = await served.sdk.get_task(GetTaskRequest(id=task_id))
    listed = await served.sdk.list_tasks(ListTasksRequest(context_id="ctx"))
    return [got.status.state, *(t.status.state for t in listed.tasks if t.id == task_id)]


async def test_a_resuming_task_is_working_and_a_repeated_decision_waits_for_it(
    tmp_path: Path,
) -> None:
    database = tmp_path / "a.db"
    task_id = await killed_while_paying(database)
    script = HeldResume()
    async with serving(database, script=script) as served:
        with trio.fail_after(20):
            await script.asked.wait()  # resumed at start: nothing asked for it
        assert await states(served, task_id) == [WORKING, WORKING]
        answers = []
        async with trio.open_nursery() as nursery:

            async def decide_again() -> None:
                repeat = decision_message({"approve": True}, "m2", task_id)
                answers.extend(await responses(served.sdk, repeat))

            nursery.start_soon(decide_again)
            await trio.sleep(0.2)  # it waits for the resumed turn
            assert answers == []
            assert await states(served, task_id) == [WORKING, WORKING]
            script.release.set()
        [answer] = answers
        assert answer.task.status.state == COMPLETED
        assert answer.task.artifacts[0].parts[0].text == f"done: {INTERRUPTED}"
        assert await states(served, task_id) == [COMPLETED, COMPLETED]
        stored = await history(served.storage, "ctx")
        check_history(stored, once=("pay 5",))
        assert [m.content for m in stored] == ["pay 5", "", INTERRUPTED, f"done: {INTERRUPTED}"]
        again = await responses(served.sdk, decision_message({"approve": True}, "m3", task_id))
        assert again[0].task.status.state == COMPLETED
        assert await history(served.storage, "ctx") == stored
        denied = await served.rpc(
            "SendMessage",
            {
                "message": {
                    "messageId": "m4",
                    "role": "ROLE_USER",
                    "taskId": task_id,
                    "parts": [{"data": {"approve": False}}],
                }
            },
        )
        assert denied["error"]["code"] == -32004, denied  # the other way: not a repeat
    assert PAID == []


@pytest.mark.parametrize("later", [False, True])
async def test_an_interrupted_task_is_working_only_while_it_can_resume(later: bool) -> None:
    storage = in_memory_storage()
    store = storage.message_store
    task_id = make_task_id("ctx", "m1")
    await store.append("ctx", Message(Role.USER, "work"), idempotency_key=task_id)
    if later:  # a later turn ran after it: it will not be resumed
        await store.append("ctx", Message(Role.USER, "next"))
        await store.append("ctx", Message(Role.ASSISTANT, "fine"))
    for resumes, state in ((True, "WORKING"), (False, "FAILED")):
        ledger = TaskLedger(turn_resumes=lambda conversation_id, seq, resumes=resumes: resumes)
        query = Query("ctx", 10, None, None, None, False)
        page = await context_page(store, store, ledger, DEFAULT_CALLER, query)
        [view] = page.views
        expected = "TASK_STATE_FAILED" if later else f"TASK_STATE_{state}"
        assert view.state == expected, (later, resumes)


async def test_a_task_stopped_before_the_model_answered_is_working_until_resumed(
    tmp_path: Path,
) -> None:
    """Served, with the agent: GetTask on a task whose user message alone was
    stored is WORKING until the resumed turn answers, then COMPLETED."""
    database = tmp_path / "a.db"
    task_id = make_task_id("ctx", "m1")
    async with open_sqlite_storage(database) as storage:
        await storage.message_store.append(
            "ctx", Message(Role.USER, "slow"), idempotency_key=task_id
        )
    script = Script()
    async with serving(database, script=script) as served:
        with trio.fail_after(20):
            await script.asked.wait()
        assert await states(served, task_id) == [WORKING, WORKING]
        script.release.set()
        await wait_until(lambda: _completed(served, task_id))


async def _completed(served: Served, task_id: str) -> bool:
    return await states(served, task_id) == [COMPLETED, COMPLETED]
