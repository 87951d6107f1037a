"""A cancelled writer stops waiting for a PostgreSQL that never answers.

The bundle is cancelled (a shutdown past its grace, a deadline around the
block) while its writer's thread waits on a frozen server: the writer cuts
the connection (the watchdog's cut, ``Watchdog.hurry``) so the cancellation
takes about ``CANCEL_GRACE``, not ``statement_timeout`` + the watchdog's
grace (12 s by default), and the batch's callers hear the truth: in doubt if
the COMMIT was sent (the server may commit it once it runs again), not
written if it was not.

A throwaway cluster of the module's own is frozen whole (SIGSTOP to the
postmaster and every backend) and thawed in a ``finally``; the tests' shared
cluster is never frozen. A COMMIT is caught in flight by the sweep's trigger
(``tests/reliability/commit_trigger.py``), which holds it on an advisory
lock the test owns. The clocks are real: the server is another process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from agentik import Message, Role, StoreError
from agentik.storage import CommitInDoubt, open_postgres_storage
from agentik.storage.postgres._watchdog import CANCEL_GRACE
from tests.postgres import own_cluster
from tests.reliability.commit_trigger import CommitTrigger, triggered_database, writers
from tests.reliability.helpers import history as messages
from tests.storage.test_postgres_bounds import cluster_processes

SCHEMA = "agentik"
SLACK = 1.0
"""Seconds of scheduling on a busy 2-core machine allowed on top of ``CANCEL_GRACE``."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A throwaway cluster of this module's own, to freeze; its DSN."""
    yield from own_cluster()


@pytest.fixture
def database(cluster: str) -> str:
    """A fresh database on the cluster, migrated, with the COMMIT trigger."""
    return triggered_database(cluster, SCHEMA)


async def poll(check: Callable[[], bool], seconds: float = 10.0) -> None:
    """Ask ``check`` (in a thread) until it is true: another process's state."""
    with trio.fail_after(seconds):
        while not await trio.to_thread.run_sync(check):  # noqa: ASYNC110
            await trio.sleep(0.05)


async def cancel_while_frozen(
    url: str, directory: str, *, held: bool
) -> tuple[BaseException | None, float]:
    """Open the bundle, submit one message, freeze the cluster while its
    batch waits on the server (``held``: in COMMIT, held by the trigger;
    else wherever it is), cancel the bundle's block; thaw. The error the
    message's caller got, and how long the cancellation took."""
    trigger = CommitTrigger(url)
    frozen: list[int] = []
    try:
        if held:
            trigger.hold()
        with trio.CancelScope() as scope:
            async with open_postgres_storage(url, schema=SCHEMA, readers=1) as bundle:
                if not held:
                    frozen = freeze(directory)
                pending = await bundle.message_store.submit("c", Message(Role.USER, "hello"))
                if held:
                    await poll(lambda: writers(url, waiting=True) == 1)
                    frozen = freeze(directory)
                else:  # the batch is in the writer's thread, waiting on the server
                    with trio.fail_after(5):
                        while bundle.message_store.writer_stats().busy_seconds < 0.2:  # type: ignore[attr-defined]  # noqa: ASYNC110
                            await trio.sleep(0.02)
                began = time.monotonic()
                scope.cancel()
                await trio.sleep_forever()
        took = time.monotonic() - began
        error: BaseException | None = None
        try:
            await pending.wait()
        except StoreError as failed:
            error = failed
    finally:
        signal_all(frozen, signal.SIGCONT)
        trigger.release()
        trigger.close()
    # The cut connection's backend goes once it notices (it may commit first).
    await poll(lambda: writers(url) == 0)
    return error, took


def freeze(directory: str) -> list[int]:
    frozen = cluster_processes(directory)
    signal_all(frozen, signal.SIGSTOP)
    return frozen


def signal_all(pids: list[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # a backend that was leaving
            os.kill(pid, signum)


async def history(url: str) -> list[tuple[int | None, str]]:
    """What the conversation holds, read by a bundle opened again; and that
    the store goes on: a new message commits after it."""
    async with open_postgres_storage(url, schema=SCHEMA, readers=1) as bundle:
        before = await messages(bundle, "c")
        await bundle.message_store.append("c", Message(Role.USER, "again"))
        after = await messages(bundle, "c")
    assert [(m.seq, m.content) for m in after[:-1]] == [(m.seq, m.content) for m in before]
    assert (after[-1].seq, after[-1].content) == (len(before) + 1, "again")
    return [(m.seq, m.content) for m in before]


async def test_a_cancel_cuts_a_commit_the_frozen_server_never_answers(database: str) -> None:
    directory = str(conninfo_to_dict(database)["host"])
    error, took = await cancel_while_frozen(database, directory, held=True)
    assert took <= CANCEL_GRACE + SLACK, took
    assert isinstance(error, CommitInDoubt), error
    assert "outcome is unknown" in str(error)
    assert "the storage was closing" in str(error)
    # In doubt: the server may have committed it once thawed, whole or not at all.
    assert await history(database) in ([], [(1, "hello")])


async def test_a_cancel_before_the_commit_was_sent_writes_nothing(database: str) -> None:
    directory = str(conninfo_to_dict(database)["host"])
    error, took = await cancel_while_frozen(database, directory, held=False)
    assert took <= CANCEL_GRACE + SLACK, took
    assert isinstance(error, StoreError) and not isinstance(error, CommitInDoubt), error
    assert "nothing of the batch was written" in str(error)
    assert await history(database) == []
