"""Whether a server is using a PostgreSQL database (``storage._in_use``), from
its node leases: a node with an unexpired ``agentik_node`` row is live.

``hold_against_nodes`` runs in a worker thread, on a connection of its own
(``agentik-cli``): one transaction that locks ``agentik_node`` in SHARE mode
(a node registering or renewing waits for it; ``lock_timeout`` bounds our
own wait for a renewal under way), then looks for live nodes. It refuses if
there is one, else keeps the transaction, and so the lock, open until
``release``.
"""

from __future__ import annotations

import psycopg

from agentik._errors import StoreError
from agentik.storage._in_use_error import DatabaseInUseError, through_server
from agentik.storage.postgres._connect import connect
from agentik.storage.postgres._open import DEFAULT_SCHEMA
from agentik.storage.postgres._watchdog import Watchdog

_LIVE = """
SELECT url, extract(epoch FROM expires_at - clock_timestamp())
FROM agentik_node WHERE expires_at > clock_timestamp() ORDER BY expires_at DESC
"""


def hold_against_nodes(dsn: str, shown: str, command: str) -> psycopg.Connection | None:
    """The connection holding the lock, or None where no node ever ran (no
    ``agentik_node`` table yet); ``DatabaseInUseError`` if a node is live."""
    # A one-off check with its own lock_timeout: an unstarted watchdog (no bound).
    connection = connect(dsn, schema=DEFAULT_SCHEMA, role="cli", timeout=10.0, watchdog=Watchdog())
    try:
        row = connection.execute("SELECT to_regclass('agentik_node') IS NOT NULL").fetchone()
        if row is None or not row[0]:
            connection.close()
            return None
        connection.execute("BEGIN")
        connection.execute("SET LOCAL lock_timeout = '10s'")
        connection.execute("LOCK TABLE agentik_node IN SHARE MODE")
        live = connection.execute(_LIVE).fetchall()
    except psycopg.Error as error:
        connection.close()
        raise StoreError(f"cannot check whether a server uses {shown}: {error}") from error
    if live:
        connection.close()  # rolls the transaction back: the lock goes with it
        url, seconds = live[0]
        who = "the agentik server" + (f" at {url}" if url else "")
        others = f" (and {len(live) - 1} more)" if len(live) > 1 else ""
        raise DatabaseInUseError(
            f"database {shown} is in use by {who}{others}: stop the server first"
            f"{through_server(command, url)}; a server that stopped without"
            f" leaving frees it when its lease runs out, in {max(1, round(seconds))} s"
        )
    return connection


def release(connection: psycopg.Connection | None) -> None:
    if connection is not None:
        connection.close()  # ends the transaction, and so the lock
