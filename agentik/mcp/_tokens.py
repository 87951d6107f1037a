"""OAuth tokens of MCP servers, kept in the storage bundle, encrypted.

``McpTokenVault`` keeps one record per server (its tokens and its client
registration) in the bundle's ``SecretStore``, under the name
``mcp-oauth:<server>``: a table of its own that no conversation id names, so
no request about a conversation can read, change or delete it. Tokens live
wherever the bundle lives (SQLite, PostgreSQL, memory), and ``agentik mcp
login`` in one process hands them to ``agentik serve`` in another. A record
is replaced atomically. (Until schema 5 (SQLite) / 4 (PostgreSQL) a record
was a working-memory note of the conversation ``agentik.mcp-oauth:<server>``;
that migration moves it.)

Invariants: a record is Fernet-encrypted (AES-128-CBC + HMAC) before it
reaches the store, so the database never holds a token in clear; no token,
secret or record text is ever logged or put in an error message (errors name
the server and what to do). The key comes from ``AGENTIK_MCP_TOKEN_KEY``, or
a key file beside the database (created 0600), or is made per process for
in-memory storage.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import trio
from cryptography.fernet import Fernet, InvalidToken
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from agentik._json import JsonObject
from agentik.storage import SecretStore, StorageBundle

logger = logging.getLogger("agentik.mcp")

KEY_VARIABLE = "AGENTIK_MCP_TOKEN_KEY"
SECRET_PREFIX = "mcp-oauth:"
"""A server's record is the secret ``mcp-oauth:<server>`` (the schema migrations that
moved records out of working memory name it too)."""
_MARGIN = 30
"""Seconds before expiry at which an access token is no longer used: a request
must not leave with a token that expires on the way."""


def token_key(database: str | os.PathLike[str] | None) -> bytes:
    """The vault key: ``AGENTIK_MCP_TOKEN_KEY``, else ``<database>.mcp-key`` (made once,
    mode 0600), else (no database file) a key for this process only."""
    if configured := os.environ.get(KEY_VARIABLE):
        return configured.encode()
    if database is None or str(database) == ":memory:":
        return Fernet.generate_key()
    path = Path(f"{os.fspath(database)}.mcp-key")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as file:
        key = Fernet.generate_key()
        file.write(key)
    return key


def _secret_store(storage: StorageBundle | SecretStore) -> SecretStore:
    if isinstance(storage, StorageBundle):
        if storage.secret_store is None:
            raise ValueError(
                "this storage bundle keeps no secrets (its secret_store is None);"
                " give McpTokenVault a SecretStore"
            )
        return storage.secret_store
    if isinstance(storage, SecretStore):
        return storage
    raise TypeError(
        "McpTokenVault takes the storage bundle or its secret_store, got a"
        f" {type(storage).__name__} (tokens no longer live in working memory)"
    )


class McpTokenVault:
    """Encrypted OAuth records of MCP servers, one per server name, in the bundle's
    ``SecretStore`` (pass the bundle, or a ``SecretStore``)."""

    def __init__(
        self,
        storage: StorageBundle | SecretStore,
        key: bytes,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        try:
            self._fernet = Fernet(key)
        except ValueError as error:
            raise ValueError(
                f"the mcp token key must be 32 url-safe base64-encoded bytes ({KEY_VARIABLE})"
            ) from error
        self._secrets = _secret_store(storage)
        self.clock = clock
        """Wall-clock seconds, to tell an expired access token (injectable for tests)."""
        self._writing = trio.Lock()
        """A write reads the record and replaces it: two at once (tokens and client
        registration) must not each drop the other's field."""

    def storage(
        self,
        server: str,
        *,
        client: OAuthClientInformationFull | None = None,
        redirect_uri: str | None = None,
        keep_client: bool = True,
    ) -> ServerTokens:
        """The SDK's ``TokenStorage`` for ``server``.

        ``client`` is a pre-registered client, used until a registration is
        stored. With ``redirect_uri``, a stored registration made for another
        redirect URI is ignored (the flow registers again). ``keep_client=False``
        drops new registrations: a daemon that cannot finish an authorization
        must not leave one behind for ``login`` to trip over."""
        return ServerTokens(self, server, client, redirect_uri, keep_client)

    async def read(self, server: str) -> JsonObject:
        stored = await self._secrets.get_secret(SECRET_PREFIX + server)
        if stored is None:
            return {}
        try:
            record: JsonObject = json.loads(self._fernet.decrypt(stored.encode()))
        except (InvalidToken, ValueError):
            logger.warning(
                "mcp server %r: its stored oauth record cannot be read with this key "
                "(was %s changed?); it needs a new login",
                server,
                KEY_VARIABLE,
            )
            return {}
        return record

    async def registered_redirect_uri(self, server: str) -> str | None:
        """The redirect URI ``server``'s stored client registration names, if any
        (a new authorization must come back where the client was registered)."""
        client = (await self.read(server)).get("client")
        if isinstance(client, dict):
            uris = client.get("redirect_uris")
            if isinstance(uris, list) and uris and isinstance(uris[0], str):
                return uris[0]
        return None

    async def write(self, server: str, field: str, value: JsonObject) -> None:
        async with self._writing:
            record = await self.read(server)
            record[field] = value
            text = self._fernet.encrypt(json.dumps(record).encode()).decode()
            await self._secrets.put_secret(SECRET_PREFIX + server, text)


class ServerTokens:
    """One server's tokens and client registration, as the SDK's OAuth provider asks for them."""

    def __init__(
        self,
        vault: McpTokenVault,
        server: str,
        client: OAuthClientInformationFull | None,
        redirect_uri: str | None,
        keep_client: bool,
    ) -> None:
        self._vault = vault
        self._server = server
        self._client = client
        self._redirect_uri = redirect_uri
        self._keep_client = keep_client

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens; an expired access token is left out (refresh token kept).

        The SDK's provider does not know when a token it loads expires, and on
        a 401 it starts a new authorization rather than a refresh; a daemon
        cannot do that alone. Without the access token it refreshes first.
        """
        record = await self._vault.read(self._server)
        stored = record.get("tokens")
        if not isinstance(stored, dict):
            return None
        tokens = OAuthToken.model_validate(stored["token"])
        expires_at = stored.get("expires_at")
        if isinstance(expires_at, int | float):
            left = int(expires_at - self._vault.clock())
            if left <= _MARGIN:
                return tokens.model_copy(update={"access_token": "", "expires_in": None})
            return tokens.model_copy(update={"expires_in": left})
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = self._vault.clock() + tokens.expires_in if tokens.expires_in else None
        stored: JsonObject = {"token": tokens.model_dump(mode="json"), "expires_at": expires_at}
        await self._vault.write(self._server, "tokens", stored)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        record = await self._vault.read(self._server)
        stored = record.get("client")
        if not stored:
            return self._client
        client = OAuthClientInformationFull.model_validate(stored)
        registered = {str(uri) for uri in client.redirect_uris or ()}
        if self._redirect_uri is not None and registered and self._redirect_uri not in registered:
            return self._client  # registered for another port: register again
        return client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self._keep_client:
            await self._vault.write(self._server, "client", client_info.model_dump(mode="json"))

    def __repr__(self) -> str:
        return f"ServerTokens({self._server!r})"
