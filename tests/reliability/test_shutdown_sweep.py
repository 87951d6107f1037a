"""Every COMMIT of the sweep's script, met by a shutdown past its grace: for
k = 1, 2, …, the k-th COMMIT waits in the writer's thread
(``FaultyVFS.pause``), the agent is closed with no grace
(``ChatAgent.close(grace=0)``: the turn under way is interrupted) while it
does, then the COMMIT goes on. The script is ``test_commit_fault_sweep``'s.

What holds, whichever COMMIT the shutdown meets:
1. the step waiting for that COMMIT fails with ``interrupted`` (its turn cut
   short) and alone: the steps before it answered as scripted;
2. the history, read from the file reopened, is valid but for the turn the
   shutdown cut short (its calls answered ``interrupted: …``, or waiting for
   a decision), and holds every message the steps acknowledged;
3. a fresh agent resumes that turn (it is not over: a shutdown is no
   failure) and goes on: the history is then valid, each user message once;
4. no call runs twice, but an idempotent one the shutdown cut short.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import trio

from agentik import AgentikError, TurnError
from agentik.storage import open_sqlite_storage
from agentik.testing import assert_valid_history
from tests.reliability.faulty_vfs import FaultyVFS
from tests.reliability.helpers import check_history, history
from tests.reliability.test_commit_fault_sweep import (
    COMMITS,
    FAILING_STEP,
    agent,
    run_script,
    shapes,
)

IDEMPOTENT = "idem-1"


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
async def test_shutdown_while_a_commit_waits(k: int, faulty_vfs: FaultyVFS, tmp_path: Path) -> None:
    path = tmp_path / "db"
    asked: list[str] = []
    ran: list[str] = []
    async with open_sqlite_storage(path, vfs=FaultyVFS.NAME) as bundle:
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            faulty_vfs.pause(k - 1)

            async def close_when_paused() -> None:
                await trio.to_thread.run_sync(faulty_vfs.paused.wait)
                chat.close(grace=0)
                await trio.testing.wait_all_tasks_blocked()
                faulty_vfs.resume()
                faulty_vfs.release()  # a COMMIT the script held itself ("idem")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(close_when_paused)
                acknowledged, failed, error = await run_script(chat)
    # 1. the step waiting for the COMMIT was cut short, and it alone.
    assert failed == FAILING_STEP[k - 1], error
    assert isinstance(error, AgentikError), error
    code = error.code if isinstance(error, TurnError) else None
    assert code == "interrupted", error
    ran_before = len(ran)
    async with open_sqlite_storage(path) as bundle:
        stored = await history(bundle, "c")
        # 2. what was acknowledged is there.
        kept = set(shapes(stored))
        assert [m for m in shapes(acknowledged) if m not in kept] == []
        # 3. a fresh agent resumes the turn cut short and goes on.
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            pending = await chat.pending_approvals("c")
            for approval in pending:
                await chat.decide("c", approval.call.id, approve=False, reason="later")
            assert (await chat.send("c", "after")).text == "answer to after"
        final = await history(bundle, "c")
    check_history(final, once=("after",))
    assert_valid_history(final)
    assert shapes(final[: len(stored)]) == shapes(stored)
    # 4. no call ran twice, but an idempotent one the shutdown cut short.
    twice = [i for i, n in collections.Counter(ran).items() if n > 1]
    assert twice in ([], [IDEMPOTENT]), ran
    if twice:
        assert ran[ran_before:].count(IDEMPOTENT) == 1
