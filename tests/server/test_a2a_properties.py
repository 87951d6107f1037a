"""Properties of A2A tasks, one per class of defect:

- task state: any sequence of A2A operations on a context (new messages that
  pause or answer, decisions by data or text, bad decisions, CancelTask,
  restarts) leaves every task where a simple model says, GetTask and
  ListTasks agree with it, history stays valid and only approved calls ran
  (a real server and the a2a-sdk client; Hypothesis picks the sequence);
- decisions: any JSON a client puts in a follow-up gives decisions about
  waiting calls only, each once, or -32602, and nothing else;
- ``statusTimestampAfter``: any RFC 3339 text reads back as the instant it
  names, anything else is -32602; and paging a context with the filter gives
  exactly the tasks at or after it, newest first.
"""

from __future__ import annotations

import datetime
import json
import string
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentik import Message, Role, ToolCall
from agentik.server._owners import DEFAULT_CALLER
from agentik.server.a2a import _tasks as _a2a_tasks
from agentik.server.a2a._answers import parse_decisions
from agentik.server.a2a._ledger import TaskLedger
from agentik.server.a2a._list import Query, context_page, parse_timestamp
from agentik.server.a2a._rpc import A2AError, make_task_id
from agentik.server.a2a._send import SendParams
from agentik.storage import in_memory_storage
from tests.reliability.helpers import check_history, history
from tests.server.a2a_support import A2A_1, GUARD_SECONDS, PAID, Served, serving

# --- task state, over a real server --------------------------------------------------

OPS = st.lists(
    st.sampled_from(
        [
            "pay",
            "pay2",
            "chat",
            "approve-data",
            "deny-data",
            "approve-text",
            "deny-text",
            "decide-first",
            "bad",
            "cancel",
            "restart",
            "native-chat",
            "native-decide-first",
        ]
    ),
    min_size=1,
    max_size=7,
)


class Model:
    """What each task should be: its state, its calls still waiting, those
    approved while others wait (they run once all are decided), and what paid."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.waiting: dict[str, list[int]] = {}
        self.approved: dict[str, list[int]] = {}
        self.paid: list[int] = []
        self.next_amount = 1

    def paused(self) -> str | None:
        found = [t for t, s in self.states.items() if s == "TASK_STATE_INPUT_REQUIRED"]
        assert len(found) <= 1
        return found[0] if found else None

    def end(self, task_id: str, state: str) -> None:
        self.states[task_id] = state
        del self.waiting[task_id]
        approved = self.approved.pop(task_id)
        if state == "TASK_STATE_COMPLETED":
            self.paid += approved  # a cancelled or replaced task runs none

    def new_message(self, task_id: str, amounts: list[int]) -> None:
        paused = self.paused()
        if paused is not None:  # the new message replaces it: its calls denied
            self.end(paused, "TASK_STATE_CANCELED")
        if amounts:
            self.states[task_id] = "TASK_STATE_INPUT_REQUIRED"
            self.waiting[task_id] = amounts
            self.approved[task_id] = []
        else:
            self.states[task_id] = "TASK_STATE_COMPLETED"


async def rpc_send(served: Served, message: dict[str, Any]) -> dict[str, Any]:
    reply = await served.rpc("SendMessage", {"message": {"role": "ROLE_USER", **message}})
    return reply


async def apply(served: Served, model: Model, op: str, n: int) -> None:
    """Perform ``op`` (the ``n``th) and update the model. The ``native-`` ops
    change the context's tasks over the native API (the same conversation):
    a message there is no task, but replaces a waiting one."""
    if op == "native-chat":
        reply = await served.raw.post("/agentik/conversations/ctx/turns", json={"text": "hi"})
        assert reply.status_code == 200, reply.text
        model.new_message("", [])
        del model.states[""]
        return
    if op in ("pay", "pay2", "chat"):
        amounts: list[int] = []
        if op != "chat":
            amounts = [model.next_amount] + ([model.next_amount + 1] if op == "pay2" else [])
            model.next_amount += len(amounts)
        text = "hi" if not amounts else "pay " + " and ".join(map(str, amounts))
        reply = await rpc_send(
            served, {"messageId": f"m{n}", "contextId": "ctx", "parts": [{"text": text}]}
        )
        task_id = reply["result"]["task"]["id"]
        model.new_message(task_id, amounts)
        assert reply["result"]["task"]["status"]["state"] == model.states[task_id]
        return
    paused = model.paused()
    if paused is None:
        return  # nothing waits: the decisions and the cancel have no task to name
    waiting = model.waiting[paused]
    base = {"messageId": f"m{n}", "taskId": paused}
    if op == "bad":
        reply = await rpc_send(served, {**base, "parts": [{"data": {"approve": "sure"}}]})
        assert reply["error"]["code"] == -32602
        return
    if op == "cancel":
        reply = await served.rpc("CancelTask", {"id": paused})
        assert reply["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        model.end(paused, "TASK_STATE_CANCELED")
        return
    if op in ("decide-first", "native-decide-first"):
        task = (await served.rpc("GetTask", {"id": paused}))["result"]
        [data] = [p["data"] for p in task["status"]["message"]["parts"] if "data" in p]
        call_id = data["approvals"][0]["callId"]
        if op == "native-decide-first":
            path = f"/agentik/conversations/ctx/approvals/{call_id}"
            answer = await served.raw.post(path, json={"approve": True})
            assert answer.status_code == 200, answer.text
            state = (await served.rpc("GetTask", {"id": paused}))["result"]["status"]["state"]
        else:
            decision = {"decisions": [{"callId": call_id, "approve": True}]}
            reply = await rpc_send(served, {**base, "parts": [{"data": decision}]})
            state = reply["result"]["task"]["status"]["state"]
        model.approved[paused].append(waiting.pop(0))
        if not waiting:
            model.end(paused, "TASK_STATE_COMPLETED")
        assert state == model.states[paused]
        return
    approve = op.startswith("approve")
    parts: list[dict[str, Any]]
    if op.endswith("data"):
        parts = [{"data": {"approve": approve, "reason": "r"}}]
    else:
        parts = [{"text": "approve" if approve else "deny: no"}]
    reply = await rpc_send(served, {**base, "parts": parts})
    assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply
    if approve:
        model.approved[paused] += waiting
    model.end(paused, "TASK_STATE_COMPLETED")


async def check(served: Served, model: Model) -> None:
    for task_id, state in model.states.items():
        task = (await served.rpc("GetTask", {"id": task_id}))["result"]
        assert task["status"]["state"] == state, (task_id, task)
        if state == "TASK_STATE_INPUT_REQUIRED":
            [data] = [p["data"] for p in task["status"]["message"]["parts"] if "data" in p]
            amounts = [json.loads(c["arguments"])["amount"] for c in data["approvals"]]
            assert amounts == model.waiting[task_id]
    listed = (await served.rpc("ListTasks", {"contextId": "ctx"}))["result"]
    assert {t["id"]: t["status"]["state"] for t in listed["tasks"]} == model.states
    assert [t["id"] for t in listed["tasks"]] == list(model.states)[::-1]


async def follow(served: Served, task_id: str, seen: list[str], started: trio.Event) -> None:
    """SubscribeToTask, raw: the state of each frame into ``seen``, to its end."""
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    headers = {**A2A_1, "Accept": "text/event-stream"}
    async with served.raw.stream("POST", "/a2a", json=rpc, headers=headers) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            result = json.loads(line.removeprefix("data:"))["result"]
            if "task" in result:
                seen.append(result["task"]["status"]["state"])
            elif "statusUpdate" in result:
                seen.append(result["statusUpdate"]["status"]["state"])
            started.set()


async def apply_followed(served: Served, model: Model, op: str, n: int) -> None:
    """``apply``, with a subscriber on the task that waits (if one does): when
    the op changes that task, the subscriber's stream must end by itself with
    the task's new state, however the change came (A2A, the native API)."""
    paused = model.paused()
    if paused is None:
        await apply(served, model, op, n)
        return
    before = (model.states[paused], list(model.waiting[paused]))
    seen: list[str] = []
    started = trio.Event()
    with trio.fail_after(GUARD_SECONDS):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow, served, paused, seen, started)
            await started.wait()
            await apply(served, model, op, n)
            after = (model.states[paused], list(model.waiting.get(paused, [])))
            if after == before:
                nursery.cancel_scope.cancel()  # nothing to tell: it follows on
    if after != before:
        assert seen[-1] == after[0], (op, seen)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
async def test_any_sequence_of_operations_keeps_tasks_as_the_model_says(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, ops: list[str]
) -> None:
    """Also: a subscriber on a waiting task sees each change of it (real
    sockets: the recheck interval is made tiny rather than mocked)."""
    monkeypatch.setattr(_a2a_tasks, "IDLE_RECHECK_SECONDS", 0.01)
    PAID.clear()
    database = tmp_path_factory.mktemp("a2a") / "a.db"
    model = Model()
    pending = list(enumerate(ops))
    while pending:
        async with serving(database) as served:
            while pending:
                n, op = pending.pop(0)
                if op == "restart":
                    break
                await apply_followed(served, model, op, n)
                await check(served, model)
            await check(served, model)
            if model.paused() is None:  # else exactly its waiting calls have no result
                check_history(await history(served.storage, "ctx"))
    # The approved calls of one answer run together (max_parallel_tools), so
    # they may pay in any order; each paid exactly once, and nothing else did.
    assert sorted(model.paid) == sorted(PAID)


# --- decisions ---------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["approve", "reason", "callId", "decisions", "x"])
            | st.text(max_size=4),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
WAITING = st.lists(st.sampled_from(["c1", "c2", "c3"]), min_size=1, max_size=3, unique=True)


def follow_up(data: tuple[Any, ...] = (), text: str = "") -> SendParams:
    return SendParams(
        text=text, context_id="ctx", task_id="t.ctx", message_id="m", follow_up=True, data=data
    )


@settings(max_examples=400, deadline=None)
@given(
    ids=WAITING,
    data=st.lists(JSON, max_size=2),
    text=st.text(max_size=20) | st.sampled_from(["approve", "Deny: no", "deny"]),
)
def test_any_follow_up_decides_waiting_calls_once_or_is_invalid_params(
    ids: list[str], data: list[Any], text: str
) -> None:
    waiting = [ToolCall(i, "pay", "{}") for i in ids]
    try:
        decisions = parse_decisions(follow_up(tuple(data), text), waiting)
    except A2AError as exc:
        assert exc.code == -32602  # noqa: PT017 (either outcome is fine; nothing else)
        return
    called = [d.call_id for d in decisions]
    assert called and set(called) <= set(ids) and len(set(called)) == len(called)
    assert all(isinstance(d.approve, bool) and isinstance(d.reason, str) for d in decisions)


@settings(max_examples=200, deadline=None)
@given(
    ids=WAITING,
    choices=st.lists(
        st.tuples(st.booleans(), st.text(alphabet=string.printable, max_size=10)), min_size=3
    ),
    form=st.sampled_from(["decisions", "single", "all"]),
)
def test_every_well_formed_decision_is_read_as_sent(
    ids: list[str], choices: list[tuple[bool, str]], form: str
) -> None:
    waiting = [ToolCall(i, "pay", "{}") for i in ids]
    if form == "decisions":
        entries = [
            {"callId": i, "approve": a, "reason": r}
            for i, (a, r) in zip(ids, choices, strict=False)
        ]
        got = parse_decisions(follow_up(({"decisions": entries},)), waiting)
        assert [(d.call_id, d.approve, d.reason) for d in got] == [
            (e["callId"], e["approve"], e["reason"]) for e in entries
        ]
    elif form == "single":
        approve, reason = choices[0]
        data = {"callId": ids[-1], "approve": approve, "reason": reason}
        got = parse_decisions(follow_up((data,)), waiting)
        assert [(d.call_id, d.approve, d.reason) for d in got] == [(ids[-1], approve, reason)]
    else:
        approve, reason = choices[0]
        got = parse_decisions(follow_up(({"approve": approve, "reason": reason},)), waiting)
        assert [(d.call_id, d.approve, d.reason) for d in got] == [
            (i, approve, reason) for i in ids
        ]


# --- statusTimestampAfter --------------------------------------------------------------

MOMENTS = st.datetimes(
    min_value=datetime.datetime(1970, 1, 2),
    max_value=datetime.datetime(9998, 12, 31),
    timezones=st.sampled_from(
        [datetime.UTC, datetime.timezone(datetime.timedelta(hours=5, minutes=30))]
    ),
)


@settings(max_examples=300, deadline=None)
@given(moment=MOMENTS, digits=st.integers(0, 9), zulu=st.booleans())
def test_an_rfc3339_timestamp_reads_back_as_its_instant(
    moment: datetime.datetime, digits: int, zulu: bool
) -> None:
    fraction = f"{moment.microsecond:06d}000"[:digits]
    offset = moment.strftime("%z")
    zone = "Z" if zulu and offset == "+0000" else f"{offset[:3]}:{offset[3:]}"
    text = moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if digits else "") + zone
    expected = moment.replace(microsecond=int((fraction + "000000")[:6]))
    assert parse_timestamp(text) == expected


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=40) | st.integers() | st.floats(allow_nan=False))
def test_anything_else_is_invalid_params(value: object) -> None:
    try:
        moment = parse_timestamp(value)  # type: ignore[arg-type]
    except A2AError as exc:
        assert exc.code == -32602  # noqa: PT017 (either outcome is fine; nothing else)
        assert "statusTimestampAfter" in exc.message  # noqa: PT017
        return
    assert moment is not None and moment.tzinfo is not None


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(0, 12),
    size=st.integers(1, 5),
    pick=st.integers(0, 12),
    shift=st.sampled_from([-1, 0, 1]),
)
async def test_paging_with_status_timestamp_after_lists_exactly_the_later_tasks(
    count: int, size: int, pick: int, shift: int
) -> None:
    bundle = in_memory_storage()
    store = bundle.message_store
    tasks: list[tuple[str, datetime.datetime]] = []
    for i in range(count):
        key = make_task_id("ctx", f"m{i}")
        await store.append("ctx", Message(role=Role.USER, content=f"q{i}"), idempotency_key=key)
        answer = await store.append("ctx", Message(role=Role.ASSISTANT, content=f"a{i}"))
        assert answer.created_at is not None
        tasks.append((key, answer.created_at))
    anchor = tasks[min(pick, count - 1)][1] if tasks else datetime.datetime.now(datetime.UTC)
    since = anchor + datetime.timedelta(microseconds=shift)
    seen: list[str] = []
    after: int | str | None = None
    expected = [key for key, at in reversed(tasks) if at >= since]
    for _ in range(100):
        query = Query("ctx", size, after, None, None, False, since=since)
        page = await context_page(store, store, TaskLedger(), DEFAULT_CALLER, query)
        seen += [v.task_id for v in page.views]
        assert page.total == len(expected)  # totalSize counts the matches
        if page.after is None:
            break
        after = page.after
    assert seen == expected
