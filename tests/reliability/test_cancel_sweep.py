"""The fault sweep's script, its turn cancelled (``ChatAgent.cancel``) at
each point where it waits: each COMMIT (held in the writer's thread by
``FaultyVFS.pause`` while the cancel comes, then let go on; on PostgreSQL, in
the server by the trigger's ``CommitTrigger.pause``), each model call
and each tool run (the cancel comes as it starts). The script is
the fault sweep's (``sweep.py``): a plain turn, a call committed before it
runs, two calls at once, an idempotent call, two calls waiting for approval
and their decisions, a typed answer, a keyed turn, a paused turn superseded.

What holds, wherever the cancel comes:
1. ``cancel`` stops the step under way, which fails with ``cancelled`` and
   alone (the steps before it answered as scripted; at a COMMIT, the step
   that waits for it), or, when it stops nothing (returns 0), the script
   runs on to its end;
2. in the same process the next request asks the model about the new
   message only (a cancelled turn is not resumed) and no tool runs again;
3. the history is valid and holds every message the steps acknowledged, in
   the same process and read from the file reopened;
4. reopened, a fresh agent goes on, without resuming the cancelled turn;
   no call ever runs twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import attrs
import pytest
import trio

from agentik import Message, TurnError
from agentik.agent import ChatAgent
from agentik.storage import (
    StorageBundle,
    in_memory_storage,
    open_postgres_storage,
    open_sqlite_storage,
)
from tests.postgres import fresh_schema
from tests.reliability.commit_trigger import SCHEMA, CommitTrigger
from tests.reliability.faulty_vfs import FaultyVFS
from tests.reliability.helpers import history
from tests.reliability.sweep import (
    COMMITS,
    FAILING_STEP,
    Faults,
    agent,
    check_kept_and_goes_on,
    run_script,
)

ASKS = 13
"""The model calls the script makes (``test_every_point_is_met``)."""

RUNS = ("one-1", "two-1", "two-2", "idem-1", "pay-1")
"""The calls the script runs."""

KINDS = ["sqlite", "postgres", "memory"]


@attrs.define
class Store:
    """The script's storage, opened again after the agent: SQLite on a file
    (first through ``FaultyVFS``, whose pauses and holds the script uses),
    PostgreSQL in a schema of its own (or the trigger's database, whose
    pauses and holds the script uses then), or one in-memory bundle kept
    across opens. The COMMIT points are SQLite's and PostgreSQL's; model
    calls and tool runs are met on each backend."""

    kind: str
    path: Path
    dsn: str | None = None
    schema: str = attrs.Factory(fresh_schema)
    memory: StorageBundle | None = None

    @contextlib.asynccontextmanager
    async def open(self, *, first: bool = False) -> AsyncIterator[StorageBundle]:
        if self.kind == "memory":
            if self.memory is None:
                self.memory = in_memory_storage()
            yield self.memory
        elif self.kind == "postgres":
            assert self.dsn is not None
            async with open_postgres_storage(self.dsn, schema=self.schema) as bundle:
                yield bundle
        else:
            vfs = FaultyVFS.NAME if first else None
            async with open_sqlite_storage(self.path / "db", vfs=vfs) as bundle:
                yield bundle


def store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    dsn = request.getfixturevalue("postgres_dsn") if kind == "postgres" else None
    return Store(kind, tmp_path, dsn)


class Watched(list[str]):
    """What the script appends to as each model call (its turn's text) or
    tool run (the call's id) starts; ``reached`` is set at the ``at``-th
    append (an int, from 1), or at the append of ``at`` (a str)."""

    def __init__(self, at: int | str | None = None) -> None:
        super().__init__()
        self.at = at
        self.reached = trio.Event()

    def append(self, item: str) -> None:
        super().append(item)
        if self.at == len(self) or self.at == item:
            self.reached.set()


Cancelled = tuple[list[Message], str | None, Exception | None, list[int]]


async def run_cancelled(
    chat: ChatAgent, reached: Callable[[], Awaitable[object]], after: Callable[[], None]
) -> Cancelled:
    """Run the script; once ``reached`` returns, cancel the conversation's
    turn, then call ``after``. What ``run_script`` returns, and what
    ``cancel`` returned (nothing if the point never came)."""
    stopped: list[int] = []

    async def cancel_when_reached() -> None:
        await reached()
        stopped.append(await chat.cancel("c"))
        after()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_when_reached)
        acknowledged, failed, error = await run_script(chat)
        nursery.cancel_scope.cancel()  # a point the script never met
    return acknowledged, failed, error, stopped


async def sweep_case(
    where: Store,
    faulty_vfs: Faults,
    asked: Watched,
    ran: Watched,
    reached: Callable[[], Awaitable[object]],
    after: Callable[[], None] = lambda: None,
    arm: Callable[[], None] = lambda: None,
) -> str | None:
    """Cancel the script where ``reached`` says (``arm`` called once the agent
    is open, before the script runs; ``after`` once the cancel is made),
    check all four; the step that failed (None if the cancel stopped nothing)."""
    async with where.open(first=True) as bundle:
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            arm()
            acknowledged, failed, error, stopped = await run_cancelled(chat, reached, after)
            # 1. the step under way was cancelled, and it alone.
            assert stopped in ([0], [1]), "the point never came"
            if stopped == [0]:
                assert failed is None, error
            else:
                assert failed is not None
                assert isinstance(error, TurnError) and error.code == "cancelled", error
            # 2. the next request is about itself alone; no tool runs again.
            asking, running = len(asked), len(ran)
            assert (await chat.send("c", "next")).text == "answer to next"
            assert asked[asking:] == ["next"]
            assert ran[running:] == []
            here = await history(bundle, "c")
    await check_kept_and_goes_on(here, acknowledged, where.open, faulty_vfs, asked, ran)
    return failed


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
async def test_cancel_while_a_commit_waits(k: int, faulty_vfs: FaultyVFS, tmp_path: Path) -> None:
    def go_on() -> None:
        faulty_vfs.resume()
        faulty_vfs.release()  # a COMMIT the script held itself ("idem")

    reached = lambda: trio.to_thread.run_sync(faulty_vfs.paused.wait)  # noqa: E731
    failed = await sweep_case(
        Store("sqlite", tmp_path),
        faulty_vfs,
        Watched(),
        Watched(),
        reached,
        go_on,
        lambda: faulty_vfs.pause(k - 1),
    )
    assert failed in (None, FAILING_STEP[k - 1])


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
async def test_cancel_while_a_commit_waits_postgres(
    k: int, database: str, trigger: CommitTrigger, tmp_path: Path
) -> None:
    """The same on PostgreSQL: the k-th COMMIT waits in the server (its
    backend paused by the trigger) when the cancel comes."""

    def go_on() -> None:
        trigger.resume()
        trigger.release()  # a COMMIT the script held itself ("idem")

    failed = await sweep_case(
        Store("postgres", tmp_path, database, SCHEMA),
        trigger,
        Watched(),
        Watched(),
        lambda: trio.to_thread.run_sync(trigger.wait_paused),
        go_on,
        lambda: trigger.pause(k - 1),
    )
    assert failed in (None, FAILING_STEP[k - 1])


@pytest.mark.parametrize("n", range(1, ASKS + 1))
@pytest.mark.parametrize("kind", KINDS)
async def test_cancel_while_the_model_is_asked(
    kind: str, n: int, faulty_vfs: FaultyVFS, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    asked = Watched(n)
    where = store(kind, request, tmp_path)
    # "idem": the model answers while its call's COMMIT is held; cancelled, it does not.
    release = faulty_vfs.release
    await sweep_case(where, faulty_vfs, asked, Watched(), asked.reached.wait, release)


@pytest.mark.parametrize("call_id", RUNS)
@pytest.mark.parametrize("kind", KINDS)
async def test_cancel_while_a_tool_runs(
    kind: str, call_id: str, faulty_vfs: FaultyVFS, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    ran = Watched(call_id)

    def go_on() -> None:
        faulty_vfs.release()  # "idem-1": its call's COMMIT, held while it runs

    where = store(kind, request, tmp_path)
    await sweep_case(where, faulty_vfs, Watched(), ran, ran.reached.wait, go_on)


async def test_every_point_is_met(faulty_vfs: FaultyVFS, tmp_path: Path) -> None:
    """Uncancelled, the script asks the model ``ASKS`` times and runs ``RUNS``."""
    asked, ran = Watched(), Watched()
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            assert (await run_script(chat))[1] is None
    assert len(asked) == ASKS
    assert sorted(ran) == sorted(RUNS)
