"""Every COMMIT of the sweep's script (``tests/reliability/sweep.py``), failed
in turn on PostgreSQL: for k = 1, 2, …, the k-th COMMIT the script makes
fails inside the server (``tests/reliability/commit_trigger.py``: a trigger
at COMMIT), and ``check_commit_fails`` checks what the caller and the store
see after.

Three faults, the last two in doubt (the writer cannot know whether the
COMMIT took: ``LOST_IN_COMMIT``, "the outcome is unknown"), and it connects
again for the next batch:
- ``fail``: the COMMIT fails cleanly; the writer says nothing of the batch
  was written;
- ``lost``: the backend dies during COMMIT, before it commits;
- ``committed``: the backend dies during COMMIT, after it committed (it
  waits for a synchronous standby that never answers: the server is set so
  for the module, ``never_answering_standby``).
The writer batches as SQLite's does (one writer, the same group commit), so
the script commits the same way (``FAILING_STEP``, the same table).

The module has a database of its own, migrated, with the trigger installed
(``conftest.database``); each test empties agentik's tables first
(``conftest.trigger``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentik import AgentikError, TurnError
from agentik.storage import open_postgres_storage
from tests.reliability.commit_trigger import (
    FAULTS,
    SCHEMA,
    CommitTrigger,
    never_answering_standby,
)
from tests.reliability.helpers import check_history, history
from tests.reliability.sweep import (
    COMMITS,
    Open,
    agent,
    check_commit_fails,
    check_the_script_commits_the_same_way,
)


@pytest.fixture(scope="module")
def standby(postgres_dsn: str) -> Iterator[str | None]:
    """The server set to wait for a standby that never answers where the
    trigger asks; None, or why it cannot be."""
    with never_answering_standby(postgres_dsn) as refused:
        yield refused


@pytest.fixture
def fault(request: pytest.FixtureRequest) -> str:
    """The fault the test asks for; ``committed`` skips where the server
    cannot wait for a standby (skipped here: a skip inside trio loses its reason)."""
    asked: str = request.param
    if asked == "committed":
        refused: str | None = request.getfixturevalue("standby")
        if refused is not None:
            pytest.skip(refused)
    return asked


def opener(url: str) -> Open:
    return lambda: open_postgres_storage(url, schema=SCHEMA, readers=2)


def cases() -> list[object]:
    return [
        pytest.param(fault, k, id=f"{fault}-{k}") for fault in FAULTS for k in range(1, COMMITS + 1)
    ]


async def test_the_script_commits_the_same_way(database: str, trigger: CommitTrigger) -> None:
    """Without a fault, every step answers as scripted, each call runs once,
    and the script makes ``COMMITS`` COMMITs (the same every run)."""
    await check_the_script_commits_the_same_way(opener(database), trigger)


@pytest.mark.parametrize(("fault", "k"), cases(), indirect=["fault"])
async def test_commit_fails(fault: str, k: int, database: str, trigger: CommitTrigger) -> None:
    told = "nothing of the batch was written" if fault == "fail" else "outcome is unknown"
    await check_commit_fails(k, fault, told, opener(database), opener(database), trigger)


async def test_a_doubt_settled_lost_does_not_end_the_turn_that_takes_its_seq(
    database: str, trigger: CommitTrigger
) -> None:
    """The first turn's user message commits in doubt and was in fact lost
    (``lost``): the turn's failure is kept in doubt. The next turn takes the
    same seq and pauses for approval; a decision whose commit fails makes the
    agent read the conversation again. The doubt is settled by that read
    (the seq holds another turn's message: forgotten), so the paused turn
    still waits and the decision sent again runs it; kept as a failure, it
    would have ended the paused turn."""
    asked: list[str] = []
    ran: list[str] = []
    async with opener(database)() as bundle:
        async with agent(bundle, trigger, asked, ran) as chat:
            trigger.fail_after(0, "lost")
            with pytest.raises(TurnError, match="outcome is unknown"):
                await chat.send("c", "hello")
            paused = await chat.send("c", "pay")
            assert [a.call.id for a in paused.approvals] == ["pay-1", "pay-2"]
            assert paused.messages[0].seq == 1  # the lost message's seq
            trigger.fail_after(0, "fail")
            with pytest.raises(AgentikError, match="nothing of the batch was written"):
                await chat.decide("c", "pay-1", approve=True)
            still = await chat.decide("c", "pay-1", approve=True)
            assert [a.call.id for a in still.approvals] == ["pay-2"]
            done = await chat.decide("c", "pay-2", approve=False)
            assert done.text == "paid"
        final = await history(bundle, "c")
    check_history(final, once=("pay",))
    assert ran == ["pay-1"]
