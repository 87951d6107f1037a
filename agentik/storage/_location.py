"""Where a configured bundle lives: a SQLite file path, or a PostgreSQL URL.

``agentik serve --database``, ``[storage] database``/``url`` and the
inspection commands take one string; a ``postgresql://`` (or ``postgres://``)
URL opens PostgreSQL, anything else is a SQLite path.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from agentik.storage._protocols import StorageBundle

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(location: str) -> bool:
    return location.startswith(POSTGRES_SCHEMES)


def open_storage(
    location: str, *, lease_seconds: float | None = None
) -> AbstractAsyncContextManager[StorageBundle]:
    """Open the bundle ``location`` names, with the backend's defaults; a
    PostgreSQL one joins as a node with ``lease_seconds`` when given (SQLite,
    one process by nature, ignores it)."""
    if is_postgres_url(location):
        from agentik.storage.postgres._open import open_postgres_storage

        return open_postgres_storage(location, lease_seconds=lease_seconds)
    from agentik.storage.sqlite._open import open_sqlite_storage

    return open_sqlite_storage(location)


def describe_location(location: str) -> str:
    """``location`` for logs and ``/health``: a URL without its password."""
    if not is_postgres_url(location):
        return f"sqlite:{location}"
    scheme, _, rest = location.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return f"{scheme}://{userinfo}{at}{host}"
