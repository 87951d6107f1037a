"""The refusal a command meets while a server uses its database, shared by the
SQLite lock file and the PostgreSQL node table (each backend imports it, so
neither imports the other)."""

from __future__ import annotations

from agentik._errors import StoreError


class DatabaseInUseError(StoreError):
    """A server (or another command) is using the database; the message names it."""


def through_server(asking: str, url: object) -> str:
    """The hint for ``agentik delete``: the server can do it itself."""
    if asking != "delete":
        return ""
    address = url if isinstance(url, str) and url else "<its address>"
    return f", or delete through it (agentik delete ID --url {address})"
