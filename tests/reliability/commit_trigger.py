"""Faults at COMMIT inside PostgreSQL itself: a trigger, no mock.

``install`` puts a schema ``sweep`` into a database and, on every table of
agentik's schema, a ``DEFERRABLE INITIALLY DEFERRED`` constraint trigger: it
runs at COMMIT, once per row written, in the committing backend. Its
function counts each transaction that wrote once (the first row marks the
transaction with a transaction-local ``set_config``; the count is a
sequence, which rollback does not undo) and, at the count ``sweep.plan``
names, fails that COMMIT:
- ``fail``: it raises; the COMMIT fails cleanly, nothing of the transaction
  is written;
- ``lost``: it terminates its own backend; FATAL, the transaction is not
  committed, and the client sees its connection drop at COMMIT, in doubt;
- ``committed``: it sets ``synchronous_commit`` on for the transaction, which
  commits, then waits for a synchronous standby that never answers
  (``never_answering_standby``) until a thread of the test terminates the
  backend: the transaction *is* committed, and the client sees its
  connection drop at COMMIT, in doubt.
It can also make one COMMIT wait for an advisory lock the test holds
(``CommitTrigger.hold``; ``pause``, another lock, for the k-th COMMIT: the
sweeps' COMMIT in flight).

``CommitTrigger`` arms it from the test's own connection (autocommit); it
has ``FaultyVFS``'s interface (``tests.reliability.sweep.Faults``). A
database with the trigger must be the tests' alone (``fresh_database``): the
trigger would fail anyone's k-th COMMIT.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import final

import psycopg
import trio
from psycopg import sql

from agentik.storage import open_postgres_storage
from tests.postgres import fresh_database

FAULTS = ["fail", "lost", "committed"]

SCHEMA = "agentik"
"""The schema of agentik's tables in a database with the trigger (``conftest.database``)."""

_HOLD_LOCK = 0x7377656570  # "sweep": the advisory lock a held COMMIT waits for
_PAUSE_LOCK = 0x7061757365  # "pause": the one a paused COMMIT waits for

_WAIT_SECONDS = 10.0
"""A COMMIT armed to be ``committed`` that never comes is a test's bug: stop waiting."""

_STANDBY = "agentik_sweep_nobody"
"""A synchronous standby's name that no standby has."""

_SCHEMA = f"""
CREATE SCHEMA sweep;
CREATE SEQUENCE sweep.commits;
CREATE SEQUENCE sweep.injected;
CREATE TABLE sweep.plan (fault text, fail_at bigint, hold_at bigint, pause_at bigint);
INSERT INTO sweep.plan VALUES (NULL, NULL, NULL, NULL);
CREATE FUNCTION sweep.at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    p sweep.plan;
BEGIN
    IF current_setting('sweep.counted', true) = 'yes' THEN
        RETURN NULL;  -- this transaction is counted already
    END IF;
    PERFORM set_config('sweep.counted', 'yes', true);
    n := nextval('sweep.commits');
    SELECT * INTO p FROM sweep.plan;
    IF p.pause_at = n THEN
        PERFORM pg_advisory_xact_lock({_PAUSE_LOCK});
    END IF;
    IF p.hold_at = n THEN
        PERFORM pg_advisory_xact_lock({_HOLD_LOCK});
    END IF;
    IF p.fail_at = n THEN
        PERFORM nextval('sweep.injected');
        IF p.fault = 'committed' THEN
            -- Commit, then wait for a standby that never answers, until terminated.
            PERFORM set_config('synchronous_commit', 'on', true);
            RETURN NULL;
        ELSIF p.fault = 'lost' THEN
            PERFORM pg_terminate_backend(pg_backend_pid());
            PERFORM pg_sleep(1);  -- the FATAL comes at its first interrupt check
        END IF;
        RAISE EXCEPTION 'injected COMMIT failure' USING ERRCODE = 'io_error';
    END IF;
    RETURN NULL;
END
$$;
"""


def install(connection: psycopg.Connection, schema: str) -> None:
    """The schema ``sweep`` and a trigger on each table of ``schema``
    (agentik's, migrated); ``connection`` in autocommit mode."""
    connection.execute(_SCHEMA.encode())
    tables = connection.execute(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = %s AND table_type = 'BASE TABLE'",
        (schema,),
    ).fetchall()
    assert tables, f"no tables in schema {schema!r}"
    for (table,) in tables:
        connection.execute(
            sql.SQL(
                "CREATE CONSTRAINT TRIGGER sweep AFTER INSERT OR UPDATE OR DELETE ON {}"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sweep.at_commit()"
            ).format(sql.Identifier(schema, table))
        )


@final
class CommitTrigger:
    """Arms the trigger ``install`` put into the database at ``dsn``."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._connection = psycopg.connect(dsn, autocommit=True)
        self._holding = False
        self._pausing = False
        self._stop = threading.Event()
        self._terminator: threading.Thread | None = None

    def close(self) -> None:
        self._stop.set()
        if self._terminator is not None:
            self._terminator.join()
        self._connection.close()

    def reset(self, schema: str) -> None:
        """Empty the tables of ``schema`` (but its version: it stays migrated),
        disarm the trigger and zero its counts."""
        tables = self._connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            " AND table_type = 'BASE TABLE' AND table_name <> 'agentik_schema_version'",
            (schema,),
        ).fetchall()
        self._connection.execute(
            sql.SQL("TRUNCATE {} RESTART IDENTITY").format(
                sql.SQL(", ").join(sql.Identifier(schema, table) for (table,) in tables)
            )
        )
        self._connection.execute(
            "UPDATE sweep.plan SET fault = NULL, fail_at = NULL, hold_at = NULL, pause_at = NULL"
        )
        self._connection.execute("ALTER SEQUENCE sweep.commits RESTART")
        self._connection.execute("ALTER SEQUENCE sweep.injected RESTART")

    def _count(self, sequence: str) -> int:
        row = self._connection.execute(
            sql.SQL("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {}").format(
                sql.Identifier("sweep", sequence)
            )
        ).fetchone()
        assert row is not None
        count: int = row[0]
        return count

    @property
    def commits(self) -> int:
        """Transactions that wrote and reached COMMIT, failed on purpose or not."""
        return self._count("commits")

    @property
    def injected(self) -> int:
        """COMMITs failed on purpose."""
        return self._count("injected")

    def fail_after(self, commits: int, fault: str) -> None:
        """Let ``commits`` COMMITs through, then fail the next one (``fail``:
        cleanly; ``lost``: its backend terminated; ``committed``: its backend
        terminated once it committed, which needs ``never_answering_standby``);
        once."""
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}, got {fault!r}")
        if commits < 0:
            raise ValueError(f"commits must be >= 0, got {commits}")
        if fault == "committed":
            self._terminator = threading.Thread(
                target=_terminate_when_committed, args=(self._dsn, self._stop), daemon=True
            )
            self._terminator.start()
        self._connection.execute(
            "UPDATE sweep.plan SET fault = %s, fail_at = %s", (fault, self.commits + commits + 1)
        )

    def hold(self) -> None:
        """Make the next COMMIT wait (in its backend, so in the writer's
        thread) until ``release()``."""
        if not self._holding:
            self._connection.execute("SELECT pg_advisory_lock(%s)", (_HOLD_LOCK,))
            self._holding = True
        self._connection.execute("UPDATE sweep.plan SET hold_at = %s", (self.commits + 1,))

    def release(self) -> None:
        """Let the held COMMIT go on (or the next one not wait, if none is held yet)."""
        self._connection.execute("UPDATE sweep.plan SET hold_at = NULL")
        if self._holding:
            self._connection.execute("SELECT pg_advisory_unlock(%s)", (_HOLD_LOCK,))
            self._holding = False

    def pause(self, after: int) -> None:
        """Let ``after`` COMMITs through, then make the next wait (in its
        backend, so in the writer's thread) until ``resume()``."""
        if not self._pausing:
            self._connection.execute("SELECT pg_advisory_lock(%s)", (_PAUSE_LOCK,))
            self._pausing = True
        self._connection.execute("UPDATE sweep.plan SET pause_at = %s", (self.commits + after + 1,))

    def resume(self) -> None:
        """Let the paused COMMIT go on (or the one ``pause`` named not wait)."""
        self._connection.execute("UPDATE sweep.plan SET pause_at = NULL")
        if self._pausing:
            self._connection.execute("SELECT pg_advisory_unlock(%s)", (_PAUSE_LOCK,))
            self._pausing = False

    def wait_paused(self) -> None:
        """Return once a COMMIT waits for ``resume()`` (in a thread: it polls
        another process's state, on a connection of its own)."""
        self._poll(
            "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND database = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())"
            " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
            (_PAUSE_LOCK >> 32, _PAUSE_LOCK & 0xFFFFFFFF),
            "no COMMIT paused",
        )

    def wait_writers_gone(self) -> None:
        """Return once no agentik writer is connected to the database (a
        cut connection's backend goes once its COMMIT ends); in a thread."""
        self._poll(
            "SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'agentik-writer'",
            (),
            "an agentik writer still connected",
        )

    def _poll(self, query: str, params: tuple[int, ...], failure: str) -> None:
        """Run ``query`` (one boolean) every 5 ms on a connection of its own
        until it is true; ``failure`` after ``_WAIT_SECONDS``."""
        deadline = time.monotonic() + _WAIT_SECONDS
        with psycopg.connect(self._dsn, autocommit=True) as connection:
            while time.monotonic() < deadline:
                row = connection.execute(query, params).fetchone()
                if row is not None and row[0]:
                    return
                time.sleep(0.005)
        raise AssertionError(f"{failure} after {_WAIT_SECONDS} s")


@contextlib.contextmanager
def never_answering_standby(dsn: str) -> Iterator[str | None]:
    """Server-wide for the block (``ALTER SYSTEM``): a synchronous standby
    that never answers, and ``synchronous_commit`` ``local`` by default, so a
    COMMIT waits for the standby only where the trigger asks (``committed``);
    every other session of the server commits as before. Both settings change
    in one reload, and are reset after. Yields None, or why the server cannot
    be set so (only a superuser may)."""
    settings = (("synchronous_commit", "local"), ("synchronous_standby_names", _STANDBY))
    with psycopg.connect(dsn, autocommit=True) as connection:
        try:
            for name, value in settings:
                connection.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)
                    )
                )
        except psycopg.errors.InsufficientPrivilege as error:
            yield f"the server cannot be set to wait for a standby: {error}"
            return
        connection.execute("SELECT pg_reload_conf()")
        try:
            yield None
        finally:
            for name, _ in reversed(settings):
                connection.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
            connection.execute("SELECT pg_reload_conf()")


def _terminate_when_committed(dsn: str, stop: threading.Event) -> None:
    """Terminate the backend of this database that waits for the standby
    (the ``committed`` COMMIT, written), once it does; polls: it is another
    process's state."""
    deadline = time.monotonic() + _WAIT_SECONDS
    with psycopg.connect(dsn, autocommit=True) as connection:
        while not stop.is_set() and time.monotonic() < deadline:
            terminated = connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE wait_event = 'SyncRep' AND datname = current_database()"
            ).fetchall()
            if terminated:
                return
            stop.wait(0.002)


def writers(url: str, *, waiting: bool = False) -> int:
    """agentik writer backends of ``url``'s database (``waiting``: those that
    wait for a lock: a COMMIT the trigger holds)."""
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agentik-writer'"
            " AND datname = current_database() AND (NOT %s OR wait_event_type = 'Lock')",
            (waiting,),
        ).fetchone()
    assert row is not None
    count: int = row[0]
    return count


def triggered_database(server: str, schema: str) -> str:
    """A fresh database on ``server``, migrated (agentik's tables in
    ``schema``), with the COMMIT trigger installed; its URL."""
    url = fresh_database(server)

    async def migrate() -> None:
        async with open_postgres_storage(url, schema=schema, readers=1):
            pass

    trio.run(migrate)
    with psycopg.connect(url, autocommit=True) as connection:
        install(connection, schema)
    return url
