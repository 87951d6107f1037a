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

The module has a database of its own, migrated, with the trigger installed;
each test empties agentik's tables first.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import trio
from psycopg.conninfo import conninfo_to_dict

from agentik.storage import open_postgres_storage
from tests.postgres import fresh_database
from tests.reliability.commit_trigger import (
    FAULTS,
    CommitTrigger,
    install,
    never_answering_standby,
)
from tests.reliability.sweep import (
    COMMITS,
    Open,
    check_commit_fails,
    check_the_script_commits_the_same_way,
)

SCHEMA = "agentik"


@pytest.fixture(scope="module")
def database(postgres_dsn: str) -> Iterator[str]:
    """A database of this module's own, migrated, with the trigger installed
    (the trigger would fail anyone's k-th COMMIT); dropped after."""
    url = fresh_database(postgres_dsn)

    async def migrate() -> None:
        async with open_postgres_storage(url, schema=SCHEMA, readers=1):
            pass

    trio.run(migrate)
    with psycopg.connect(url, autocommit=True) as connection:
        install(connection, SCHEMA)
    try:
        yield url
    finally:
        name = conninfo_to_dict(url)["dbname"]
        with psycopg.connect(postgres_dsn, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE {name} WITH (FORCE)")


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


@pytest.fixture
def trigger(database: str) -> Iterator[CommitTrigger]:
    """The trigger, disarmed, over agentik's tables emptied: each test starts
    from a store just opened (emptying them is quicker than copying a
    database: 10 ms against 20 to 400)."""
    armed = CommitTrigger(database)
    try:
        armed.reset(SCHEMA)
        yield armed
    finally:
        armed.close()


def opener(url: str) -> Open:
    return lambda: open_postgres_storage(url, schema=SCHEMA, readers=2)


RESUMED_IF_COMMITTED = {
    1: "hello",
    3: "one",
    7: "two",
    11: "idem",
    14: "pay",
    20: "typed",
    23: "keyed",
    25: "wait",
    28: "skip",
}
"""The COMMITs that, committed but in doubt, leave a turn the next request
resumes (``committed``): each holds a turn's user message. The turn failed,
its caller was told so, but the agent remembers no failure for it
(``Turn._remember_failure``: ``TurnWrites.stored`` takes the in-doubt write
for lost), so the reload of the next request finds a turn with no answer and
no failure, takes it for interrupted, and resumes it behind its caller's
back: the model is asked about it again, and where it calls a tool (3, 7,
11) the tool runs. Making ``stored`` say None (unknown) for an in-doubt
write passes these, but where the message was in fact lost (``lost``) it
keeps a failure under a seq the next turn then takes, which would end that
turn if it paused and were reloaded: the doubt is to be settled at the next
reload, which reads the store before the conversation writes again."""


def cases() -> list[object]:
    found: list[object] = []
    for fault in FAULTS:
        for k in range(1, COMMITS + 1):
            resumed = RESUMED_IF_COMMITTED.get(k) if fault == "committed" else None
            marks = (
                pytest.mark.xfail(
                    strict=True,
                    reason=f"agent: an in-doubt COMMIT that committed: turn {resumed!r},"
                    " failed, is resumed by the next request (RESUMED_IF_COMMITTED)",
                )
                if resumed is not None
                else ()
            )
            found.append(pytest.param(fault, k, marks=marks, id=f"{fault}-{k}"))
    return found


async def test_the_script_commits_the_same_way(database: str, trigger: CommitTrigger) -> None:
    """Without a fault, every step answers as scripted, each call runs once,
    and the script makes ``COMMITS`` COMMITs (the same every run)."""
    await check_the_script_commits_the_same_way(opener(database), trigger)


@pytest.mark.parametrize(("fault", "k"), cases(), indirect=["fault"])
async def test_commit_fails(fault: str, k: int, database: str, trigger: CommitTrigger) -> None:
    told = "nothing of the batch was written" if fault == "fail" else "outcome is unknown"
    await check_commit_fails(k, fault, told, opener(database), opener(database), trigger)
