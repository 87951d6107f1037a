"""A2A ListTasks costs what its page costs (issue 14, item 7), and pages through
every task exactly once, under any page size and status filter.

The cost is asserted on what the server reads from its message store (a
counting wrapper around the real SQLite store), not on wall-clock time: 3,000
tasks with ``pageSize=1`` took 10-14 s before (every task's history was read
on every call), and must read a handful of messages now.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import httpx2
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, Role
from agentik.server import ServerConfig, serve_agentik
from agentik.server._owners import DEFAULT_CALLER, Caller
from agentik.server.a2a._ledger import TaskLedger
from agentik.server.a2a._list import Query, context_page, ledger_page
from agentik.server.a2a._rpc import make_task_id
from agentik.server.a2a._views import TaskView
from agentik.storage import (
    MessageStore,
    StorageBundle,
    in_memory_storage,
    open_sqlite_storage,
)
from bench.a2a_list_tasks import add_tasks
from tests.server.conftest import Running

A2A = {"A2A-Version": "1.0"}


class CountingStore:
    """The real message store, counting the reads ListTasks may make and the
    messages (or keys) they hand back."""

    def __init__(self, inner: MessageStore) -> None:
        self._inner = inner
        self.messages_read = 0
        self.calls: collections.Counter[str] = collections.Counter()

    async def get_messages(self, conversation_id: str, **kwargs: Any) -> AsyncIterator[Message]:
        self.calls["get_messages"] += 1
        async for message in self._inner.get_messages(conversation_id, **kwargs):
            self.messages_read += 1
            yield message

    async def list_keyed_turns(self, conversation_id: str, **kwargs: Any) -> Any:
        self.calls["list_keyed_turns"] += 1
        turns = await self._inner.list_keyed_turns(conversation_id, **kwargs)
        self.messages_read += sum(len(turn.messages) for turn in turns)
        return turns

    async def find_idempotency_key(self, conversation_id: str, key: str) -> int | None:
        self.calls["find_idempotency_key"] += 1
        return await self._inner.find_idempotency_key(conversation_id, key)

    async def count_idempotency_keys(self, conversation_id: str, **kwargs: Any) -> int:
        self.calls["count_idempotency_keys"] += 1
        return await self._inner.count_idempotency_keys(conversation_id, **kwargs)

    async def list_idempotency_keys(self, conversation_id: str, **kwargs: Any) -> Any:
        self.calls["list_idempotency_keys"] += 1
        keys = await self._inner.list_idempotency_keys(conversation_id, **kwargs)
        self.messages_read += len(keys)
        return keys

    def reset(self) -> None:
        self.messages_read = 0
        self.calls.clear()

    def __getattr__(self, name: str) -> Any:  # what the agent uses, uncounted
        return getattr(self._inner, name)


@attrs.frozen
class Served:
    client: httpx2.AsyncClient
    store: CountingStore
    task_ids: list[str]

    async def call(self, params: dict[str, object]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params}
        reply = (await self.client.post("/a2a", json=body, headers=A2A)).json()
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result


@pytest.fixture
async def three_thousand(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Served]:
    """A server on a SQLite file holding 3,000 finished tasks in context 'big'."""
    database = tmp_path / "tasks.db"
    async with open_sqlite_storage(database) as bundle:
        store = CountingStore(bundle.message_store)
        task_ids = await add_tasks(bundle.message_store, "big", 3000)
        counted = attrs.evolve(bundle, message_store=store)
        config = ServerConfig(port=0, database=str(database))
        stop = trio.Event()
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config, storage=counted, shutdown_trigger=stop.wait, task_status=task_status
            )
        )
        async with httpx2.AsyncClient(base_url=url, timeout=60) as client:
            yield Served(client, store, task_ids)
        stop.set()


async def test_a_page_of_one_reads_a_page_of_one(three_thousand: Served) -> None:
    """pageSize=1 of 3,000 tasks: the newest task, the right total, and a few
    messages read (the page's turn and one more, to know a next page exists).
    Before: 6,000 messages and 6,000 store calls, 10-14 s."""
    served, store = three_thousand, three_thousand.store
    store.reset()
    with trio.fail_after(10):  # generous: about 5 ms here; before, well past it
        first = await served.call({"contextId": "big", "pageSize": 1})
    assert [t["id"] for t in first["tasks"]] == [served.task_ids[-1]]
    assert first["totalSize"] == 3000
    assert first["tasks"][0]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert store.messages_read <= 4, store.messages_read
    assert sum(store.calls.values()) <= 4, store.calls

    store.reset()
    second = await served.call(
        {"contextId": "big", "pageSize": 1, "pageToken": first["nextPageToken"]}
    )
    assert [t["id"] for t in second["tasks"]] == [served.task_ids[-2]]
    assert store.messages_read <= 4, store.messages_read


async def test_a_status_filter_counts_every_match(three_thousand: Served) -> None:
    """totalSize counts the tasks that match the filter (as the a2a-sdk server
    counts them), exactly: none FAILED of 3,000 is 0 and no token; all of
    them COMPLETED, with a page of one, is 3,000 and a token to the next."""
    none = await three_thousand.call(
        {"contextId": "big", "pageSize": 1, "status": "TASK_STATE_FAILED"}
    )
    assert (none["tasks"], none["totalSize"], none["nextPageToken"]) == ([], 0, "")
    every = await three_thousand.call(
        {"contextId": "big", "pageSize": 1, "status": "TASK_STATE_COMPLETED"}
    )
    assert [t["id"] for t in every["tasks"]] == [three_thousand.task_ids[-1]]
    assert every["totalSize"] == 3000
    assert every["nextPageToken"]


async def test_a_timestamp_filter_stops_at_the_first_older_task(three_thousand: Served) -> None:
    """statusTimestampAfter in a context: tasks newest first are latest update
    first, so a bound after every task reads two turns, lists none, counts
    none (totalSize 0) and ends the listing (no token to follow through 3,000
    tasks, no 6,000 messages read); a bound before them all pages as usual
    and counts them all."""
    store = three_thousand.store
    store.reset()
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    page = await three_thousand.call({"contextId": "big", "statusTimestampAfter": future})
    assert (page["tasks"], page["totalSize"], page["nextPageToken"]) == ([], 0, "")
    assert store.messages_read <= 4, store.messages_read
    past = "2000-01-01T00:00:00Z"
    page = await three_thousand.call(
        {"contextId": "big", "pageSize": 2, "statusTimestampAfter": past}
    )
    assert [t["id"] for t in page["tasks"]] == three_thousand.task_ids[:-3:-1]
    assert page["totalSize"] == 3000
    assert page["nextPageToken"]


# --- paging, as a property -----------------------------------------------------------

# A context's history: each entry a turn. "done" is a task with its answer,
# "failed" a task whose turn stored only the user message, "native" a turn with
# a key that is no task id, "plain" a turn without a key.
turn_kinds = st.lists(st.sampled_from(["done", "failed", "native", "plain"]), max_size=30)


async def build(kinds: list[str]) -> tuple[StorageBundle, list[tuple[str, str]]]:
    """An in-memory bundle holding those turns in context 'ctx'; the tasks'
    (id, state), newest first."""
    bundle = in_memory_storage()
    store = bundle.message_store
    tasks: list[tuple[str, str]] = []
    for i, kind in enumerate(kinds):
        key = {"native": f"native-{i}", "plain": None}.get(kind, make_task_id("ctx", f"m{i}"))
        await store.append("ctx", Message(role=Role.USER, content=f"q{i}"), idempotency_key=key)
        if kind != "failed":
            await store.append("ctx", Message(role=Role.ASSISTANT, content=f"a{i}"))
        if kind in ("done", "failed"):
            assert key is not None
            state = "TASK_STATE_COMPLETED" if kind == "done" else "TASK_STATE_FAILED"
            tasks.append((key, state))
    return bundle, tasks[::-1]


async def page_through(
    bundle: StorageBundle, size: int, state: str | None, ledger: TaskLedger
) -> list[TaskView]:
    """Every page, following the tokens; each page but the last is full, and
    each says the same totalSize: the number of tasks listed in all."""
    store = bundle.message_store
    after: int | str | None = None
    seen: list[TaskView] = []
    totals: set[int] = set()
    for _ in range(1000):
        query = Query("ctx", size, after, state, history=None, artifacts=False)
        page = await context_page(store, store, ledger, DEFAULT_CALLER, query)
        seen += page.views
        totals.add(page.total)
        if page.after is None:
            assert totals == {len(seen)}, (totals, len(seen))
            return seen
        assert len(page.views) == size
        after = page.after
    raise AssertionError("paging never ended")


@settings(max_examples=60, deadline=None)
@given(
    kinds=turn_kinds,
    size=st.integers(1, 7),
    state=st.sampled_from([None, "TASK_STATE_COMPLETED", "TASK_STATE_FAILED"]),
)
async def test_paging_lists_every_task_once_newest_first(
    kinds: list[str], size: int, state: str | None
) -> None:
    """Following nextPageToken from the first page gives exactly the context's
    tasks in the wanted state, newest first, each once; native keys are not tasks."""
    bundle, tasks = await build(kinds)
    seen = await page_through(bundle, size, state, TaskLedger())
    assert [(v.task_id, v.state) for v in seen] == [t for t in tasks if state in (None, t[1])]


async def test_a_running_task_leads_the_first_page() -> None:
    """A task accepted whose user message is not stored yet is SUBMITTED, first."""
    bundle, tasks = await build(["done", "done"])
    ledger = TaskLedger()
    waiting = make_task_id("ctx", "not yet")
    ledger.start(("ctx", waiting))
    seen = await page_through(bundle, 1, None, ledger)
    assert [(v.task_id, v.state) for v in seen] == [(waiting, "TASK_STATE_SUBMITTED"), *tasks]


async def test_the_ledger_pages_by_task_id() -> None:
    """Without a contextId: the caller's tasks this process created, newest first,
    each read from the store only when its page is served."""
    _, tasks = await build(["done", "failed", "done"])
    ledger = TaskLedger()
    for task_id, _ in reversed(tasks):
        ledger.start(("ctx", task_id))
        ledger.finish(("ctx", task_id))
    ledger.start(("alice\x1fctx", tasks[0][0]))  # another owner's: never listed
    reads: list[str] = []

    async def find_task(caller: Caller, task_id: str) -> TaskView:
        reads.append(task_id)
        state = dict(tasks)[task_id]
        return TaskView(task_id, "ctx", state, datetime.now(UTC))

    first = await ledger_page(
        ledger, find_task, DEFAULT_CALLER, Query(None, 2, None, None, None, False)
    )
    assert [v.task_id for v in first.views] == [t for t, _ in tasks[:2]]
    assert reads == [t for t, _ in tasks[:2]]
    assert first.total == 3
    rest = await ledger_page(
        ledger, find_task, DEFAULT_CALLER, Query(None, 2, first.after, None, None, False)
    )
    assert [v.task_id for v in rest.views] == [tasks[2][0]]
    assert rest.after is None


@settings(max_examples=80, deadline=None)
@given(
    states=st.lists(st.sampled_from(["TASK_STATE_COMPLETED", "TASK_STATE_FAILED"]), max_size=20),
    size=st.integers(1, 6),
    state=st.sampled_from([None, "TASK_STATE_COMPLETED", "TASK_STATE_FAILED"]),
)
async def test_the_ledger_listing_counts_and_pages_the_matches(
    states: list[str], size: int, state: str | None
) -> None:
    """Without a contextId, under any status filter: following the tokens
    lists the matching tasks newest first, each once, full pages but the
    last, and every page's totalSize is their number."""
    ledger = TaskLedger()
    ids = [make_task_id("ctx", f"m{i}") for i in range(len(states))]
    for task_id in ids:
        ledger.start(("ctx", task_id))
    known = dict(zip(ids, states, strict=True))

    async def find_task(caller: Caller, task_id: str) -> TaskView:
        return TaskView(task_id, "ctx", known[task_id], datetime.now(UTC))

    expected = [t for t in reversed(ids) if state in (None, known[t])]
    seen: list[str] = []
    after: int | str | None = None
    for _ in range(100):
        page = await ledger_page(
            ledger, find_task, DEFAULT_CALLER, Query(None, size, after, state, None, False)
        )
        seen += [v.task_id for v in page.views]
        assert page.total == (len(expected) if state is not None else len(ids))
        if page.after is None:
            break
        assert len(page.views) == size
        after = page.after
    assert seen == expected


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"status": "TASK_STATE_DONE"}, "field 'status' must be a TaskState"),
        ({"status": 3}, "field 'status' must be a TaskState"),
        ({"pageToken": "eyJzZXEiOjB9"}, "pageToken"),  # {"seq":0}
        ({"pageToken": "eyJ0YXNrIjoieCJ9"}, "pageToken"),  # {"task":"x"}: no task id
        ({"pageToken": "e30"}, "pageToken"),  # {}
        ({"pageToken": "x" * 2000}, "pageToken"),
        ({"pageToken": 7}, "pageToken"),
        ({"contextId": "\x1f"}, "contextId"),
    ],
)
async def test_bad_params_are_invalid_params(
    server: Running, params: dict[str, object], named: str
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "ListTasks",
        "params": {"contextId": "c", **params},
    }
    reply = (await server.client.post("/a2a", json=body, headers=A2A)).json()
    assert reply["error"]["code"] == -32602, reply
    assert named in reply["error"]["message"]
