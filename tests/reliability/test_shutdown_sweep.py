"""The fault sweep's script, met by a shutdown past its grace
(``ChatAgent.close(grace=0)``: the turn under way is interrupted) at each
point where it waits, as ``test_cancel_sweep`` cancels it: each COMMIT (held
in the writer's thread by ``FaultyVFS.pause`` meanwhile; on PostgreSQL, in
the server by ``CommitTrigger.pause``), each model call
and each tool run. The script is the fault sweep's (``sweep.py``).

What holds, whichever COMMIT the shutdown meets:
1. the step under way fails with ``interrupted`` (its turn cut short) and
   alone: the steps before it answered as scripted (at a COMMIT, the step
   that waits for it); or, when it finished before the close took effect,
   the next step is refused (``the agent is closed``);
2. the history, read from the file reopened, is valid but for the turn the
   shutdown cut short (its calls answered ``interrupted: …``, or waiting for
   a decision), and holds every message the steps acknowledged;
3. a fresh agent resumes that turn (it is not over: a shutdown is no
   failure) and goes on: the history is then valid, each user message once;
4. no call runs twice, but an idempotent one the shutdown cut short.

On PostgreSQL, a shutdown's last resort too: the agent and its storage
cancelled at once while each COMMIT waits in the server. The cancellation
takes ``CANCEL_GRACE`` (the writer cuts the connection), not as long as the
server makes the COMMIT wait; the COMMIT, let go on after, commits with
nobody to tell (in doubt, as the writer said), and 2 to 4 hold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from agentik import AgentikError, Message, Role, TurnError
from agentik.storage.postgres._watchdog import CANCEL_GRACE
from tests.reliability.commit_trigger import SCHEMA, CommitTrigger
from tests.reliability.faulty_vfs import FaultyVFS
from tests.reliability.helpers import history
from tests.reliability.sweep import (
    COMMITS,
    FAILING_STEP,
    Faults,
    agent,
    check_resumes_and_goes_on,
    run_script,
)
from tests.reliability.test_cancel_sweep import ASKS, KINDS, RUNS, Store, Watched, store


async def shutdown_case(
    where: Store,
    faulty_vfs: Faults,
    asked: Watched,
    ran: Watched,
    reached: Callable[[], Awaitable[object]],
    arm: Callable[[], None] = lambda: None,
) -> str | None:
    """Close the agent with no grace where ``reached`` says (``arm`` called
    once the agent is open, before the script runs), check all four; the
    step that failed."""
    async with where.open(first=True) as bundle:
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            arm()

            async def close_when_reached() -> None:
                await reached()
                chat.close(grace=0)
                await trio.testing.wait_all_tasks_blocked()
                faulty_vfs.resume()
                faulty_vfs.release()  # a COMMIT the script held itself ("idem")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(close_when_reached)
                acknowledged, failed, error = await run_script(chat)
    # 1. the step under way was cut short, and it alone; or it finished
    # before the close took effect (no checkpoint left: in memory), and the
    # next was refused. Cut short, it resumes at the next start
    # (``interrupted``), unless its user message was not stored: then
    # nothing resumes it, and its caller is told to send it again
    # (``unavailable``; "skip" cut while it supersedes the paused turn).
    assert failed is not None
    if isinstance(error, TurnError):
        assert error.code in ("interrupted", "unavailable"), error
    else:
        assert isinstance(error, AgentikError) and str(error) == "the agent is closed", error
    await check_resumes_and_goes_on(where.open, acknowledged, faulty_vfs, asked, ran)
    if isinstance(error, TurnError) and error.code == "unavailable":
        async with where.open() as bundle:
            texts = [m.content for m in await history(bundle, "c") if m.role is Role.USER]
        assert failed not in texts, f"{failed!r} was stored, yet its caller was told to resend"
    return failed


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
async def test_shutdown_while_a_commit_waits(k: int, faulty_vfs: FaultyVFS, tmp_path: Path) -> None:
    reached = lambda: trio.to_thread.run_sync(faulty_vfs.paused.wait)  # noqa: E731
    failed = await shutdown_case(
        Store("sqlite", tmp_path),
        faulty_vfs,
        Watched(),
        Watched(),
        reached,
        lambda: faulty_vfs.pause(k - 1),
    )
    assert failed == FAILING_STEP[k - 1]


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
async def test_shutdown_while_a_commit_waits_postgres(
    k: int, database: str, trigger: CommitTrigger, tmp_path: Path
) -> None:
    """The same on PostgreSQL: the k-th COMMIT waits in the server (its
    backend paused by the trigger) when the shutdown comes."""
    failed = await shutdown_case(
        Store("postgres", tmp_path, database, SCHEMA),
        trigger,
        Watched(),
        Watched(),
        lambda: trio.to_thread.run_sync(trigger.wait_paused),
        lambda: trigger.pause(k - 1),
    )
    assert failed == FAILING_STEP[k - 1]


CUT_SLACK = 1.0
"""Seconds of scheduling on a busy 2-core machine allowed on top of ``CANCEL_GRACE``."""


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
async def test_storage_cancelled_while_a_commit_waits_postgres(
    k: int, database: str, trigger: CommitTrigger, tmp_path: Path
) -> None:
    """The agent and its storage cancelled at once (a deadline around both,
    as ``agentik serve``'s last resort) while the k-th COMMIT waits in the
    server: the cancellation does not wait for the server (the writer cuts
    the connection ``CANCEL_GRACE`` later). The COMMIT, let go on after,
    goes through with nobody to tell (the writer said it was in doubt);
    reopened, checks 2 to 4 hold as after a shutdown."""
    where = Store("postgres", tmp_path, database, SCHEMA)
    asked, ran = Watched(), Watched()
    acknowledged: dict[int | None, Message] = {}
    began = math.inf
    with trio.CancelScope() as scope:
        async with where.open(first=True) as bundle:
            async with agent(bundle, trigger, asked, ran) as chat:
                trigger.pause(k - 1)

                async def cut_when_reached() -> None:
                    nonlocal began
                    await trio.to_thread.run_sync(trigger.wait_paused)
                    began = time.monotonic()
                    scope.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cut_when_reached)
                    await run_script(chat, acknowledged)
    took = time.monotonic() - began
    assert scope.cancelled_caught
    assert took <= CANCEL_GRACE + CUT_SLACK, took
    trigger.resume()
    trigger.release()  # a COMMIT the script held itself ("idem")
    await trio.to_thread.run_sync(trigger.wait_writers_gone)
    await check_resumes_and_goes_on(where.open, list(acknowledged.values()), trigger, asked, ran)


@pytest.mark.parametrize("n", range(1, ASKS + 1))
@pytest.mark.parametrize("kind", KINDS)
async def test_shutdown_while_the_model_is_asked(
    kind: str, n: int, faulty_vfs: FaultyVFS, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    asked = Watched(n)
    where = store(kind, request, tmp_path)
    await shutdown_case(where, faulty_vfs, asked, Watched(), asked.reached.wait)


@pytest.mark.parametrize("call_id", RUNS)
@pytest.mark.parametrize("kind", KINDS)
async def test_shutdown_while_a_tool_runs(
    kind: str, call_id: str, faulty_vfs: FaultyVFS, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    ran = Watched(call_id)
    where = store(kind, request, tmp_path)
    await shutdown_case(where, faulty_vfs, Watched(), ran, ran.reached.wait)
