"""Opening PostgreSQL connections: one shape for the writer, the readers and the lease.

Every connection is synchronous psycopg 3 (its async API runs only on
asyncio; agentik is on trio), used only from worker threads, in autocommit
mode (the writer opens its transactions itself; a reader's statement is its
own transaction), with the session's time zone UTC and ``search_path`` set
to the bundle's schema. ``application_name`` names the role, so an operator
sees agentik's writer and readers in ``pg_stat_activity``.

Every connection is bounded, so a server that stops answering fails calls
instead of hanging them (docs/storage.md, "When PostgreSQL stops
answering"). Each default below applies only where nobody chose a value:
libpq's options only if the DSN does not name them, the server's settings
only where ``pg_settings`` says ``source = 'default'`` (so the DSN's
``options=-c …``, ``PGOPTIONS``, ``ALTER ROLE/DATABASE … SET`` and
``postgresql.conf`` all win). ``_watchdog`` adds the client's own bound on
each call.

The DSN is read by libpq (``_dsn``); no message names its secrets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, final

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import make_conninfo

from agentik._errors import StoreError
from agentik.storage.postgres._dsn import parse, scrub, shown
from agentik.storage.postgres._migrate import fix_shards, migrate
from agentik.storage.postgres._watchdog import GRACE, Watchdog

T = TypeVar("T")

KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
"""libpq's TCP keepalives (the client's socket): a server host that died or
a network path that broke, on an idle connection, is noticed after 10 s of
silence and 3 unanswered probes 5 s apart (25 s), not after the kernel's
2 hours 11 minutes. No cost on a Unix socket, where libpq ignores them."""

TCP_USER_TIMEOUT = "25000"
"""Milliseconds sent data may stay unacknowledged before the kernel drops the
connection (libpq 12+): a write into a dead path fails as an idle
connection's keepalives would, after 25 s, instead of after ~15 minutes of
retransmissions."""

SESSION_DEFAULTS = (
    ("statement_timeout", "10s"),
    ("lock_timeout", "5s"),
    ("idle_in_transaction_session_timeout", "15s"),
    ("tcp_keepalives_idle", "10"),
    ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "3"),
)
"""The server's side of each session.

- ``statement_timeout`` 10 s: agentik's statements take milliseconds (a batch
  of 2,000 appends is one statement of a few ms), so 10 s is a thousand
  times the usual and still short enough that a turn fails with a clear
  error rather than hang past a client's own timeout.
- ``lock_timeout`` 5 s: the locks agentik waits for are held by one batch (a
  takeover waits for the writer's ``FOR SHARE``); shorter than the statement
  bound, so a lock wait is reported as one.
- ``idle_in_transaction_session_timeout`` 15 s: agentik never leaves a
  transaction idle between two statements for more than a moment; a node
  frozen inside one (its process stopped) releases its locks after 15 s, so
  the 20 s lease of a dead node can be taken over once it expires.
- ``tcp_keepalives_*``: the server's keepalives, the same as the client's, so
  the backend of a node that died is ended in 25 s, not 2 hours, and its
  connection slot is free again.

Migrations lift the two timeouts (``open_writer``): a migration's time grows
with the data, and it waits for other nodes' migrations on a lock."""

_APPLY_DEFAULTS = """
SELECT set_config(wanted.name, wanted.value, false)
FROM (VALUES {}) AS wanted (name, value)
JOIN pg_settings USING (name)
WHERE pg_settings.source = 'default'
"""

_STATEMENT_TIMEOUT = (
    "SELECT setting::float8 / 1000 FROM pg_settings WHERE name = 'statement_timeout'"
)


def client_options(options: dict[str, str]) -> dict[str, str]:
    """libpq's options to connect with: ``options`` (the DSN's), plus each
    keepalive default the DSN does not set."""
    defaults = dict(KEEPALIVES)
    if pq.version() >= 120000:
        defaults["tcp_user_timeout"] = TCP_USER_TIMEOUT
    return {**defaults, **options}


def _apply_defaults(connection: psycopg.Connection) -> None:
    values = sql.SQL(", ").join(
        sql.SQL("({}, {})").format(sql.Literal(name), sql.Literal(value))
        for name, value in SESSION_DEFAULTS
    )
    connection.execute(sql.SQL(_APPLY_DEFAULTS).format(values))


def answer_bound(connection: psycopg.Connection) -> float | None:
    """How long a call waits for the server: the session's
    ``statement_timeout`` plus ``GRACE``; None if the timeout is off."""
    row = connection.execute(_STATEMENT_TIMEOUT).fetchone()
    seconds = float(row[0]) if row is not None else 0.0
    return seconds + GRACE if seconds > 0 else None


def connect(
    dsn: str, *, schema: str, role: str, timeout: float, watchdog: Watchdog
) -> psycopg.Connection:
    """A connection for ``role`` (``writer``, ``reader`` or ``lease``);
    ``StoreError`` if the DSN is not valid, or the server cannot be reached
    or refuses us, or the storage is closing past its grace (``Watchdog.hurry``)."""
    options = parse(dsn)
    if watchdog.hurried:
        raise StoreError(
            f"not connecting to PostgreSQL at {shown(options)}: the storage is closing"
            " (its writer was cancelled)"
        )
    reason: str | None = None
    try:
        connection = psycopg.connect(
            make_conninfo("", **client_options(options)),
            autocommit=True,
            application_name=f"agentik-{role}",
            connect_timeout=max(1, round(timeout)),
        )
    except psycopg.Error as error:
        reason = scrub(str(error).strip(), options)
    if reason is not None:  # raised here, not in the ``except``: libpq's text stays behind
        raise StoreError(f"cannot connect to PostgreSQL at {shown(options)}: {reason}")
    try:
        with watchdog.watch(connection):
            connection.execute("SET TIME ZONE 'UTC'")
            connection.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            _apply_defaults(connection)
    except (psycopg.Error, StoreError) as error:
        connection.close()
        raise StoreError(f"cannot prepare a PostgreSQL session: {error}") from error
    return connection


def open_writer(
    make: Callable[[], psycopg.Connection],
    schema: str,
    dsn: str,
    watchdog: Watchdog,
    shards: int | None,
) -> psycopg.Connection:
    """The write connection, the schema migrated and, for a node of several
    (``shards`` given), split into ``shards`` (``fix_shards``); sets
    ``watchdog.bound`` from its session."""
    connection = make()
    try:
        limits = connection.execute(
            "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
        ).fetchone()
        assert limits is not None
        connection.execute("SET statement_timeout TO 0")
        connection.execute("SET lock_timeout TO 0")
        migrate(connection, schema)
        if shards is not None:
            fix_shards(connection, shards, shown(parse(dsn)))
        connection.execute(
            "SELECT set_config('statement_timeout', %s, false),"
            " set_config('lock_timeout', %s, false)",
            limits,
        )
        watchdog.bound = answer_bound(connection)
    except psycopg.Error as error:
        connection.close()
        raise StoreError(f"cannot prepare the database at {shown(parse(dsn))}: {error}") from error
    except BaseException:
        connection.close()
        raise
    return connection


@final
class Reconnecting:
    """The reader pool's runner: a connection found broken is replaced, and a
    read that failed because its connection died while idle (a server restart)
    runs once more on a new one; reads change nothing, so that is safe. A read
    the server did not answer in time is not retried (``_watchdog``)."""

    def __init__(self, make: Callable[[], psycopg.Connection], watchdog: Watchdog) -> None:
        self._make = make
        self._watchdog = watchdog

    def __call__(
        self, query: Callable[[psycopg.Connection], T], connection: psycopg.Connection
    ) -> tuple[T, psycopg.Connection]:
        if connection.closed or connection.broken:
            connection.close()
            connection = self._make()
        try:
            with self._watchdog.watch(connection):
                return query(connection), connection
        except psycopg.OperationalError:
            if not (connection.closed or connection.broken):
                raise
        connection.close()
        connection = self._make()
        with self._watchdog.watch(connection):
            return query(connection), connection
