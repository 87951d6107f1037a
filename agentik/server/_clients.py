"""Bearer tokens and the owners they act for: ``[[server.clients]]`` and ``AGENTIK_CLIENTS``.

A client is one token and the owner whose conversations it reaches; one owner
may have several tokens (rotation). The server keeps each owner's
conversations apart (``agentik.server._owners``). Owner names go into stored
conversation ids, so they are short and plain; tokens are RFC 6750
``b64token`` text, so ``owner:token,owner:token`` is an unambiguous
environment form. Invariant: no error message and no ``repr`` ever shows a
token, only the entry's position and owner.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from agentik._errors import AgentikError, ConfigError
from agentik._scope import OWNER, OWNER_RULE

TOKEN = re.compile(r"^[A-Za-z0-9._~+/-]{16,}=*$")
"""RFC 6750 ``b64token``, at least 16 characters before any ``=`` padding."""
CLIENTS_ENV = "AGENTIK_CLIENTS"

_TOKEN_RULE = "16 or more of A-Z a-z 0-9 - . _ ~ + / (then '=' padding)"


class ClientConfigError(AgentikError):
    """A client entry is invalid; the message names the entry, never the token."""


@attrs.frozen(kw_only=True)
class Client:
    """One bearer token and the owner whose conversations it may use."""

    owner: str
    """Conversations are scoped to this name (``[A-Za-z0-9._-]``, at most 48)."""
    token: str = attrs.field(repr=False)
    """Sent as ``Authorization: Bearer <token>``; never logged or shown."""


def _client(owner: object, token: object, where: str) -> Client:
    if not isinstance(owner, str) or not OWNER.fullmatch(owner):
        raise ClientConfigError(f"{where}: owner must be {OWNER_RULE}, got {owner!r}")
    if not isinstance(token, str) or not TOKEN.match(token):
        raise ClientConfigError(f"{where} (owner {owner!r}): token must be {_TOKEN_RULE}")
    return Client(owner=owner, token=token)


def parse_clients_table(entries: object, env: Mapping[str, str]) -> tuple[Client, ...]:
    """The ``[[server.clients]]`` array: ``owner`` and ``token`` or ``token_env``."""
    if not isinstance(entries, list):
        raise ClientConfigError("[server] clients must be an array of tables ([[server.clients]])")
    clients = []
    for number, entry in enumerate(entries, 1):
        where = f"[[server.clients]] entry {number}"
        if not isinstance(entry, dict):
            raise ClientConfigError(f"{where} must be a table")
        unknown = sorted(set(entry) - {"owner", "token", "token_env"})
        if unknown:
            raise ClientConfigError(f"{where}: unknown key {unknown[0]!r}")
        if ("token" in entry) == ("token_env" in entry):
            raise ClientConfigError(f"{where} needs exactly one of 'token' and 'token_env'")
        token = entry.get("token")
        if "token_env" in entry:
            variable = entry["token_env"]
            if not isinstance(variable, str) or variable not in env:
                raise ClientConfigError(
                    f"{where}: token_env names {variable!r}, which is not set in the environment"
                )
            token = env[variable]
        clients.append(_client(entry.get("owner"), token, where))
    return tuple(clients)


def parse_clients_env(text: str) -> tuple[Client, ...]:
    """``AGENTIK_CLIENTS``: comma-separated ``owner:token`` pairs."""
    clients = []
    for number, pair in enumerate((p.strip() for p in text.split(",") if p.strip()), 1):
        owner, sep, token = pair.partition(":")
        where = f"{CLIENTS_ENV} entry {number}"
        if not sep:
            raise ClientConfigError(f"{where} must be 'owner:token'")
        clients.append(_client(owner.strip(), token.strip(), where))
    return tuple(clients)


def check_distinct(clients: Sequence[Client], auth_token: str | None) -> None:
    """Each token names one owner: no token twice, none equal to ``auth_token``."""
    seen: dict[str, int] = {}
    for number, client in enumerate(clients, 1):
        if client.token == auth_token:
            raise ClientConfigError(
                f"client entry {number} (owner {client.owner!r}) reuses [server] auth_token;"
                " a token must name one owner"
            )
        first = seen.setdefault(client.token, number)
        if first != number:
            raise ClientConfigError(
                f"client entries {first} and {number} have the same token;"
                " a token must name one owner"
            )


def read_clients(path: Path | None, env: Mapping[str, str]) -> tuple[Client, ...]:
    """``AGENTIK_CLIENTS`` if set, else the file's ``[[server.clients]]``."""
    try:
        if CLIENTS_ENV in env:
            return parse_clients_env(env[CLIENTS_ENV])
        if path is None:
            return ()
        server = tomllib.loads(path.read_bytes().decode("utf-8")).get("server", {})
        if not isinstance(server, dict) or "clients" not in server:
            return ()
        return parse_clients_table(server["clients"], env)
    except ClientConfigError as error:
        origin = "" if CLIENTS_ENV in env else f"{path}: "
        raise ConfigError(f"{origin}{error}") from None
