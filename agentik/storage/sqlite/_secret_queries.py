"""SQLite's SQL for the ``secret`` table (``SecretStore``): one row per name."""

from __future__ import annotations

import apsw

from agentik.storage.sqlite._queries import Session


def get_secret(connection: apsw.Connection, name: str) -> str | None:
    value = connection.execute("SELECT value FROM secret WHERE name = ?", (name,)).get
    return value if isinstance(value, str) else None


def put_secret(session: Session, name: str, value: str) -> None:
    session.connection.execute(
        "INSERT INTO secret (name, value, updated_us) VALUES (?, ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET value = excluded.value,"
        " updated_us = excluded.updated_us",
        (name, value, session.now_us),
    )


def delete_secret(session: Session, name: str) -> bool:
    session.connection.execute("DELETE FROM secret WHERE name = ?", (name,))
    return session.connection.changes() > 0
