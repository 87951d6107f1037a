"""Bounded shutdown (issue 30, item 3): ``agentik serve`` in a subprocess, its
model a real Chat Completions endpoint on 127.0.0.1 that never answers, or
its PostgreSQL frozen while a turn's COMMIT is in flight.

On SIGTERM the server takes no new turn, gives the turn under way
``graceful_timeout`` seconds, interrupts it (its client gets 503, the turn is
resumed at the next start) and exits 0 within ``graceful_timeout + 5``
seconds; a turn queued behind it whose client left is never sent to the
model; nothing is logged as an error. A second SIGTERM exits at once.

On PostgreSQL frozen whole (SIGSTOP to the postmaster and every backend of
a throwaway cluster of the test's own) while the turn's COMMIT waits, SIGTERM
still exits 0 within ``graceful_timeout + 5`` seconds: once the last resort
cancels the storage, its writer cuts the connection the COMMIT waits on
rather than wait for the watchdog's 12 s. Thawed, the next start finds the
turn's message written (the COMMIT went through after all: in doubt, as
the writer said) and resumes the turn.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from agentik.storage import open_postgres_storage
from tests.models.chat_server import ChatServer, Hang, Json, completion
from tests.postgres import fresh_database, own_cluster
from tests.reliability.commit_trigger import CommitTrigger, install, writers
from tests.reliability.helpers import history as history_of
from tests.reliability.test_crash import ROOT, START_SECONDS, ServerProcess
from tests.storage.test_postgres_bounds import cluster_processes

GRACE = 2.0
TURNS = "/agentik/conversations/c/turns"


@asynccontextmanager
async def serve(
    database: Path | str, model: ChatServer, *, grace: float = GRACE, cwd: Path | None = None
) -> AsyncIterator[ServerProcess]:
    """``agentik serve`` on ``database`` (a file, or a PostgreSQL URL: then
    it runs in ``cwd``) with ``model`` as its backend; on exit the process is
    gone (killed if the body left it running)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["AGENTIK_MODEL_BASE_URL"] = model.base_url
    env["AGENTIK_MODEL"] = "m"
    env["AGENTIK_GRACEFUL_TIMEOUT"] = str(grace)
    command = [
        sys.executable,
        "-m",
        "agentik.cli",
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--database",
        str(database),
    ]
    process = await trio.lowlevel.open_process(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=database.parent if isinstance(database, Path) else cwd,
        env=env,
    )
    server = ServerProcess(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.read_log)
            with trio.fail_after(START_SECONDS):
                await server.bound.wait()
            assert server.url is not None, server.log_tail()
            yield server
            if process.returncode is None:
                process.kill()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


async def until(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    """Poll ``condition`` (a subprocess or a server elsewhere: nothing to wait on)."""
    with trio.fail_after(seconds):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.02)


async def stopped_within(server: ServerProcess) -> float:
    """Wait for the process to exit 0; the seconds it took."""
    began = time.monotonic()
    with trio.fail_after(60):
        code = await server.process.wait()
    assert code == 0, f"exit code {code}\n{server.log_tail()}"
    return time.monotonic() - began


async def test_sigterm_bounds_shutdown_when_the_model_never_answers(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    model = ChatServer()
    await model.start(nursery)
    model.script(Hang())  # a second request would be counted (and refused)
    database = tmp_path / "agentik.db"
    answers: dict[str, httpx2.Response] = {}
    async with serve(database, model) as server:
        assert server.url is not None
        async with (
            httpx2.AsyncClient(base_url=server.url, timeout=60) as first,
            httpx2.AsyncClient(base_url=server.url, timeout=60) as second,
        ):

            async def post(name: str, client: httpx2.AsyncClient, text: str) -> None:
                answers[name] = await client.post(TURNS, json={"text": text})

            async with trio.open_nursery() as clients:
                clients.start_soon(post, "running", first, "hello")
                await until(lambda: len(model.received) == 1)
                # Queued behind the running turn; then its client leaves.
                with trio.move_on_after(0.5):
                    await post("left", second, "never sent to the model")
                assert "left" not in answers
                await second.aclose()
                server.process.send_signal(signal.SIGTERM)
                took = await stopped_within(server)
    assert took <= GRACE + 5, f"stopped {took:.1f} s after SIGTERM\n{server.log_tail()}"
    assert took >= GRACE - 0.5, "the turn under way did not get its grace"
    running = answers["running"]
    assert running.status_code == 503, running.text
    assert running.headers["retry-after"]
    assert running.json()["error"]["code"] == "interrupted"
    assert len(model.received) == 1, "the queued turn whose client left reached the model"
    assert server.errors == [], server.log_tail()
    # The next start resumes the interrupted turn (the model answers now).
    model.script(Json(completion("resumed answer")))
    async with serve(database, model) as again:
        assert again.url is not None
        async with httpx2.AsyncClient(base_url=again.url, timeout=30) as client:

            async def history() -> list[tuple[str, str]]:
                reply = await client.get("/agentik/conversations/c/messages")
                return [(m["role"], m["content"]) for m in reply.json()["messages"]]

            with trio.fail_after(20):
                while len(await history()) < 2:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            assert await history() == [("user", "hello"), ("assistant", "resumed answer")]
        assert again.resumed == 1
        again.process.send_signal(signal.SIGTERM)
        await stopped_within(again)
        assert again.errors == [], again.log_tail()


async def test_a_second_sigterm_exits_at_once(nursery: trio.Nursery, tmp_path: Path) -> None:
    model = ChatServer()
    await model.start(nursery)
    model.script(Hang())
    database = tmp_path / "agentik.db"
    answers: list[httpx2.Response] = []
    async with serve(database, model, grace=600) as server:
        assert server.url is not None
        async with httpx2.AsyncClient(base_url=server.url, timeout=60) as client:

            async def post() -> None:
                answers.append(await client.post(TURNS, json={"text": "hello"}))

            async with trio.open_nursery() as clients:
                clients.start_soon(post)
                await until(lambda: len(model.received) == 1)
                server.process.send_signal(signal.SIGTERM)
                await until(lambda: "no new turns" in server.log_tail())
                await trio.sleep(0.2)
                server.process.send_signal(signal.SIGTERM)
                took = await stopped_within(server)
    assert took <= 3, f"stopped {took:.1f} s after the second SIGTERM\n{server.log_tail()}"
    assert [a.status_code for a in answers] == [503]
    assert server.errors == [], server.log_tail()
    # Interrupted, not failed: the next start resumes it.
    model.script(Json(completion("resumed answer")))
    async with serve(database, model) as again:
        await until(lambda: again.resumed == 1)
        again.process.send_signal(signal.SIGTERM)
        await stopped_within(again)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A throwaway cluster of this module's own, to freeze; its DSN."""
    yield from own_cluster()


LEASE_SECONDS = 20
"""``agentik serve``'s node lease on PostgreSQL (``[storage] lease_seconds``)."""


def signal_all(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # a backend that was leaving
            os.kill(pid, signum)


async def test_sigterm_bounds_shutdown_when_postgresql_freezes_in_a_commit(
    nursery: trio.Nursery, cluster: str, tmp_path: Path
) -> None:
    url = fresh_database(cluster)
    async with open_postgres_storage(url, readers=1):  # migrated, for the trigger
        pass
    with psycopg.connect(url, autocommit=True) as connection:
        install(connection, "agentik")
    directory = str(conninfo_to_dict(url)["host"])
    # No lock_timeout: the held COMMIT, thawed and let go, commits (the
    # connection it would answer on is gone): in doubt, and in fact written.
    url += "&options=-c%20lock_timeout%3D0"
    model = ChatServer()
    await model.start(nursery)
    model.script(Json(completion("answer")))
    trigger = CommitTrigger(url)
    frozen: list[int] = []
    answers: list[httpx2.Response | httpx2.HTTPError] = []
    try:
        async with serve(url, model, cwd=tmp_path) as server:
            assert server.url is not None
            async with httpx2.AsyncClient(base_url=server.url, timeout=60) as client:

                async def post() -> None:
                    try:
                        answers.append(await client.post(TURNS, json={"text": "hello"}))
                    except httpx2.HTTPError as error:  # let go without an answer
                        answers.append(error)

                async with trio.open_nursery() as clients:
                    trigger.hold()  # the turn's first COMMIT waits in the server...
                    clients.start_soon(post)
                    await until(lambda: writers(url, waiting=True) == 1)
                    frozen = cluster_processes(directory)
                    signal_all(frozen, signal.SIGSTOP)  # ...which stops answering at all
                    server.process.send_signal(signal.SIGTERM)
                    took = await stopped_within(server)
        assert took <= GRACE + 5, f"stopped {took:.1f} s after SIGTERM\n{server.log_tail()}"
        # The turn's client was told, not let go: when the drain ended its
        # request was cut with a 503 (the turn's clean-up still waiting on
        # the frozen database), before the process exited.
        [answer] = answers
        assert isinstance(answer, httpx2.Response), answer
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert server.errors == [], server.log_tail()
    finally:
        signal_all(frozen, signal.SIGCONT)
        trigger.release()
        trigger.close()
    # Thawed, the held COMMIT went through: the next start finds the turn's
    # message, resumes the turn, and the conversation goes on.
    await until(lambda: writers(url) == 0)  # the cut connection's backend is gone
    async with open_postgres_storage(url, readers=1) as bundle:
        stored = [(m.role.value, m.content) for m in await history_of(bundle, "c")]
    assert stored == [("user", "hello")]
    model.script(Json(completion("resumed answer")), Json(completion("answer to again")))
    async with serve(url, model, cwd=tmp_path) as again:
        assert again.url is not None
        async with httpx2.AsyncClient(base_url=again.url, timeout=30) as client:

            async def history() -> list[tuple[str, str]]:
                reply = await client.get("/agentik/conversations/c/messages")
                return [(m["role"], m["content"]) for m in reply.json()["messages"]]

            # The stopped node could not leave (the server did not answer):
            # its shards, and so the turn, come free once its lease expires.
            with trio.fail_after(LEASE_SECONDS + 30):
                while len(await history()) < 2:  # noqa: ASYNC110
                    await trio.sleep(0.2)
            reply = await client.post(TURNS, json={"text": "again"})
            assert reply.status_code == 200, reply.text
            assert await history() == [
                ("user", "hello"),
                ("assistant", "resumed answer"),
                ("user", "again"),
                ("assistant", "answer to again"),
            ]
        assert again.resumed == 1
        again.process.send_signal(signal.SIGTERM)
        await stopped_within(again)
        assert again.errors == [], again.log_tail()
