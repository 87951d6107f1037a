"""A2A task ids are idempotency keys: a cancelled task never answers with
another task's result (issue 14, defect 2).

The reported sequence over HTTP, through the a2a-sdk client, against a real
server on 127.0.0.1 and a real SQLite file: ``SendMessage`` with
``returnImmediately``, ``CancelTask`` at once, a second message, then the
first message sent again. It went wrong when the cancel landed after the task
id was remembered and before the store accepted the user message; here that
moment is made certain, with real parts only: a second connection holds
SQLite's write lock, so the writer (queue of 0) is stuck with another write
and the turn waits for room to submit its user message.

Waits for the server's state poll real time in steps of a few milliseconds
(the server answers on real sockets, so a mock clock cannot drive it); each
poll is bounded by ``GUARD_SECONDS``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import apsw
import httpx2
import trio
from a2a.client import Client, ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from agentik import Message as StoredMessage
from agentik import ModelBackendError, ModelRequest, ModelResponse
from agentik import Role as StoredRole
from agentik.models import ChatModel, ScriptedModel
from agentik.server import ServerConfig, serve_agentik
from agentik.server.a2a._rpc import make_task_id
from agentik.storage import StorageBundle, open_sqlite_storage, writer_stats
from tests.reliability.helpers import check_history, history

GUARD_SECONDS = 20
POLL_SECONDS = 0.002
A2A_1 = {"A2A-Version": "1.0"}


def echo(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"You said: {request.messages[-1].content}")


def user_message(text: str, message_id: str, context_id: str) -> SendMessageRequest:
    message = Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)])
    message.context_id = context_id
    return SendMessageRequest(message=message)


async def poll(condition: Callable[[], bool]) -> None:
    """Until ``condition()`` holds: the writer's queue has no event to wait on."""
    with trio.fail_after(GUARD_SECONDS):
        while True:
            if condition():
                return
            await trio.sleep(POLL_SECONDS)


@asynccontextmanager
async def serving(
    path: Path, *, queue_size: int = 1000, model: ChatModel | None = None
) -> AsyncIterator[tuple[Client, StorageBundle]]:
    """A server over a SQLite bundle, and an a2a-sdk client of it."""
    async with (
        open_sqlite_storage(path, queue_size=queue_size, busy_timeout=GUARD_SECONDS) as bundle,
        trio.open_nursery() as nursery,
    ):
        stop = trio.Event()
        config = ServerConfig(port=0, database=str(path))
        url = await nursery.start(
            lambda task_status: serve_agentik(
                config,
                shutdown_trigger=stop.wait,
                storage=bundle,
                model=model or ScriptedModel(echo),
                task_status=task_status,
            )
        )
        client = await create_client(url, client_config=ClientConfig(streaming=False))
        _urls[id(client)] = url
        try:
            yield client, bundle
        finally:
            await client.close()
            stop.set()


_urls: dict[int, str] = {}


def served_url(client: Client) -> str:
    """The base URL ``serving`` started its server at."""
    return _urls[id(client)]


async def send(client: Client, request: SendMessageRequest) -> StreamResponse:
    [reply] = [r async for r in client.send_message(request)]
    return reply


async def test_a_cancelled_task_resent_is_its_own_turn(tmp_path: Path) -> None:
    """SendMessage(returnImmediately) + CancelTask while the turn waits to store
    its user message, a second message, the first resent: the resend answers
    the first message, and every text is stored once."""
    path = tmp_path / "agentik.db"
    # A writer queue of 0: the writer takes one request at a time.
    async with serving(path, queue_size=0) as (client, bundle):
        await send(client, user_message("warmup", "m0", "ctx"))
        lock = apsw.Connection(str(path))
        lock.execute("BEGIN IMMEDIATE")
        try:
            async with trio.open_nursery() as nursery:
                # Another conversation's write: the writer takes it and waits
                # for the lock, so the next write waits for room.
                blocker_started = trio.Event()

                async def blocker() -> None:
                    blocker_started.set()
                    await bundle.message_store.append(
                        "other", StoredMessage(StoredRole.USER, "hold")
                    )

                nursery.start_soon(blocker)
                await blocker_started.wait()
                await poll(lambda: queue_depth(bundle) == 0)

                first = user_message("first", "m1", "ctx")
                first.configuration.return_immediately = True
                submitted = await send(client, first)
                task_id = submitted.task.id
                assert submitted.task.status.state == TaskState.TASK_STATE_SUBMITTED
                await poll(lambda: queue_depth(bundle) == 1)  # "first" waits for room
                canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
                assert canceled.status.state == TaskState.TASK_STATE_CANCELED
                await poll(lambda: queue_depth(bundle) == 0)  # the cancelled submit left
                lock.execute("ROLLBACK")
        finally:
            lock.close()
        second = await send(client, user_message("second", "m2", "ctx"))
        assert second.task.artifacts[0].parts[0].text == "You said: second"
        resent = await send(client, user_message("first", "m1", "ctx"))
        task = resent.task
        assert task.id == task_id
        assert task.artifacts[0].parts[0].text == "You said: first"
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        got = await client.get_task(GetTaskRequest(id=task_id, history_length=10))
        assert got.artifacts[0].parts[0].text == "You said: first"
        assert [p.text for m in got.history for p in m.parts] == ["first", "You said: first"]
        stored = await history(bundle, "ctx")
    check_history(stored, once=("warmup", "first", "second"))


def queue_depth(bundle: StorageBundle) -> int:
    stats = writer_stats(bundle)
    assert stats is not None
    return stats.queue_depth


RUNS = 40


async def test_the_reported_sequence_as_is(tmp_path: Path) -> None:
    """The sequence of the report with no lock, ``RUNS`` times on fresh
    contexts: the cancel lands wherever it happens to (before the turn starts,
    during its reads, while its user message is submitted, or after the turn
    ended), and every resend still answers its own message: completed, or
    the cancelled task with its own user message (a turn cut short after its
    message was stored is not run again once another turn followed it)."""
    async with serving(tmp_path / "agentik.db") as (client, bundle):  # the default writer
        for run in range(RUNS):
            context = f"ctx{run}"
            first = user_message("first", f"a{run}", context)
            first.configuration.return_immediately = True
            task_id = (await send(client, first)).task.id
            # Already finished (not cancelable) or gone (cancelled unstored): fine.
            with contextlib.suppress(TaskNotCancelableError, TaskNotFoundError):
                await client.cancel_task(CancelTaskRequest(id=task_id))
            second = await send(client, user_message("second", f"b{run}", context))
            assert second.task.artifacts[0].parts[0].text == "You said: second"
            again = user_message("first", f"a{run}", context)
            again.configuration.history_length = 10
            resent = (await send(client, again)).task
            texts = [p.text for m in resent.history for p in m.parts]
            assert texts[:1] == ["first"], (run, texts)
            if resent.status.state == TaskState.TASK_STATE_COMPLETED:
                assert resent.artifacts[0].parts[0].text == "You said: first", run
            else:  # its user message was stored, then the turn was cancelled;
                # historyLength applies to a failed task too
                assert resent.status.state == TaskState.TASK_STATE_CANCELED, run
                assert texts == ["first"], (run, texts)
            check_history(await history(bundle, context), once=("first", "second"))


async def test_cancel_task_cancels_that_task_not_the_one_running(tmp_path: Path) -> None:
    """CancelTask of a task queued behind another turn of its context cancels
    that task (it never runs) and leaves the running one alone; resent, the
    cancelled task runs as a new turn."""
    holding, release = trio.Event(), trio.Event()
    seen: list[str] = []

    async def respond(request: ModelRequest) -> ModelResponse:
        text = request.messages[-1].content
        seen.append(text)
        if text == "hold":
            holding.set()
            await release.wait()
        return echo(request)

    async with serving(tmp_path / "agentik.db", model=ScriptedModel(respond)) as (client, bundle):
        running = user_message("hold", "r0", "ctx")
        running.configuration.return_immediately = True
        running_id = (await send(client, running)).task.id
        await holding.wait()
        queued = user_message("queued", "q1", "ctx")
        queued.configuration.return_immediately = True
        queued_id = (await send(client, queued)).task.id
        canceled = await client.cancel_task(CancelTaskRequest(id=queued_id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        release.set()
        # SUBMITTED until its user message is committed (the model is asked
        # while it is written), then WORKING, then how it ended.
        running = {TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING}
        get = GetTaskRequest(id=running_id)
        with trio.fail_after(GUARD_SECONDS):
            while (task := await client.get_task(get)).status.state in running:  # noqa: ASYNC110
                await trio.sleep(POLL_SECONDS)
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.artifacts[0].parts[0].text == "You said: hold"
        assert seen == ["hold"]  # the cancelled task never reached the model
        resent = (await send(client, user_message("queued", "q1", "ctx"))).task
        assert resent.id == queued_id
        assert resent.artifacts[0].parts[0].text == "You said: queued"
        stored = await history(bundle, "ctx")
    check_history(stored, once=("hold", "queued"))


async def test_a_task_whose_client_left_reports_how_its_turn_ended(tmp_path: Path) -> None:
    """A client that leaves a blocking SendMessage while its turn runs: the turn
    goes on, and once it fails GetTask says FAILED, not WORKING for ever (the
    task ledger's entry outlived the handler that was to clear it)."""
    release = trio.Event()
    asked = trio.Event()

    async def failing(request: ModelRequest) -> ModelResponse:
        asked.set()
        await release.wait()
        raise ModelBackendError("the backend went away")

    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "m1",
                "contextId": "ctx",
                "role": "ROLE_USER",
                "parts": [{"text": "hi"}],
            }
        },
    }
    path = tmp_path / "agentik.db"
    async with serving(path, model=ScriptedModel(failing)) as (client, _):
        async with httpx2.AsyncClient(timeout=GUARD_SECONDS) as raw:
            url = f"{served_url(client)}/a2a"
            with trio.move_on_after(GUARD_SECONDS) as left:
                async with trio.open_nursery() as nursery:
                    post = functools.partial(raw.post, url, json=body, headers=A2A_1)
                    nursery.start_soon(post)
                    await asked.wait()
                    nursery.cancel_scope.cancel()  # the client goes away mid-turn
            assert not left.cancelled_caught
        release.set()
        get = GetTaskRequest(id=make_task_id("ctx", "m1"))
        # SUBMITTED until the user message is committed (the model is asked
        # while it is written), then WORKING; WORKING for ever was the bug.
        running = {TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING}
        with trio.fail_after(GUARD_SECONDS):
            while (task := await client.get_task(get)).status.state in running:  # noqa: ASYNC110
                await trio.sleep(POLL_SECONDS)
        assert task.status.state == TaskState.TASK_STATE_FAILED
