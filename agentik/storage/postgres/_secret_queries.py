"""PostgreSQL's SQL for the ``secret`` table (``SecretStore``): one row per name,
names and values as UTF-8 ``bytea`` like every string of the schema."""

from __future__ import annotations

import psycopg

from agentik.storage.postgres._queries import Session


def get_secret(connection: psycopg.Connection, name: str) -> str | None:
    row = connection.execute(
        "SELECT value FROM secret WHERE name = %s", (name.encode(),)
    ).fetchone()
    return None if row is None else bytes(row[0]).decode()


def put_secret(session: Session, name: str, value: str) -> None:
    session.connection.execute(
        "INSERT INTO secret (name, value, updated_at) VALUES (%s, %s, %s)"
        " ON CONFLICT (name) DO UPDATE SET value = excluded.value,"
        " updated_at = excluded.updated_at",
        (name.encode(), value.encode(), session.now),
    )


def delete_secret(session: Session, name: str) -> bool:
    cursor = session.connection.execute("DELETE FROM secret WHERE name = %s", (name.encode(),))
    return cursor.rowcount > 0
