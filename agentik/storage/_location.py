"""Where a configured bundle lives: a SQLite file path, or a PostgreSQL URL.

``agentik serve --database``, ``[storage] database``/``url`` and the
inspection commands take one string; a ``postgresql://`` (or ``postgres://``)
URL opens PostgreSQL, anything else is a SQLite path.
"""

from __future__ import annotations

import re
from contextlib import AbstractAsyncContextManager

from agentik._errors import StoreError
from agentik.storage._protocols import Storage

POSTGRES_SCHEMES = ("postgresql://", "postgres://")

# A libpq key=value string with a secret in it (``host=db password=x``): taken
# for a SQLite path it would become a file of that name, shown in /health.
_CONNINFO_SECRET = re.compile(
    r"(?:^|\s)(?:password|sslpassword|oauth_client_secret|scram_client_key|scram_server_key)"
    r"\s*=",
    re.IGNORECASE,
)


def is_postgres_url(location: str) -> bool:
    return location.startswith(POSTGRES_SCHEMES)


def _looks_like_conninfo(location: str) -> bool:
    return not is_postgres_url(location) and _CONNINFO_SECRET.search(location) is not None


def open_storage(
    location: str,
    *,
    lease_seconds: float | None = None,
    readers: int | None = None,
    shards: int | None = None,
) -> AbstractAsyncContextManager[Storage]:
    """Open the bundle ``location`` names, with the backend's defaults; a
    PostgreSQL one joins as a node with ``lease_seconds`` when given (SQLite,
    one process by nature, ignores it). ``readers``: the read connections
    (None: the backend's default); ``shards``: PostgreSQL's shard count
    (None: the default, 256)."""
    if _looks_like_conninfo(location):
        raise StoreError(
            "the database location looks like a libpq key=value connection string;"
            " agentik opens PostgreSQL from a postgresql:// URL (the location is not shown)"
        )
    if is_postgres_url(location):
        from agentik.storage._shards import DEFAULT_SHARDS
        from agentik.storage.postgres._open import open_postgres_storage

        return open_postgres_storage(
            location,
            lease_seconds=lease_seconds,
            readers=4 if readers is None else readers,
            shards=DEFAULT_SHARDS if shards is None else shards,
        )
    from agentik.storage.sqlite._open import open_sqlite_storage

    if readers is None:
        return open_sqlite_storage(location)
    return open_sqlite_storage(location, readers=readers)


def describe_location(location: str) -> str:
    """``location`` for logs and ``/health``: a SQLite path as it is; a
    PostgreSQL URL as libpq reads it, every password and key as ``***``
    (``postgres/_dsn.py``: user-info, ``password=`` in the query, ...)."""
    if _looks_like_conninfo(location):
        return "sqlite:(not shown: it looks like a connection string with a password)"
    if not is_postgres_url(location):
        return f"sqlite:{location}"
    try:
        from agentik.storage.postgres._dsn import describe
    except ImportError:  # no psycopg, so no libpq to read it with: show none of it
        return "postgresql:(not shown: psycopg is not installed)"
    return f"postgresql:{describe(location)}"
