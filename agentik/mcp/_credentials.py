"""What agentik sends one MCP server as credentials, to mask wherever the server's
words go.

A server, or a proxy in front of it, may quote the request's headers back: in
a tool result, an error, a tool's description, a question it asks. Everything
an MCP server sends the agent passes through its toolset (``McpToolset``),
which masks these credentials there with the Redactor a model backend masks
its API key with (``agentik._redact``, ``***``), before the text reaches a
turn, a stream, the storage, a model request, ``/health`` or a log:

- fixed, from the config: the values of secret headers (``Authorization``,
  ``X-Api-Key``, a name with TOKEN, SECRET, PASSWORD, API-KEY, CREDENTIAL or
  AUTH; scheme stripped), a password in the URL, the OAuth client secrets
  (and their HTTP Basic form), a stdio server's ``env`` values whose names say
  secret;
- seen on the way (``add``): the access and refresh tokens the vault hands
  out or stores, a registered client's secret, every private-key JWT client
  assertion signed, the ID token and ID-JAG of an identity assertion. The
  newest ``KEPT`` are remembered, old tokens too (a cache or a log may
  still quote one).

The mcp SDK's own loggers quote whole messages at DEBUG (``SSE message: …``),
which agentik cannot mask at the source: a filter on them masks the
credentials of every live toolset (``_LogMask``; logging is process-wide, so
the set of live credentials is too, held weakly).

Invariants: ``redactor`` is replaced, never changed (a reader always holds a
whole one); a masked error is a new ``ToolError`` without the chained causes,
whose messages may show the secret too.
"""

from __future__ import annotations

import base64
import logging
import re
import weakref
from collections.abc import Iterable
from urllib.parse import quote

from mcp.client.auth import TokenStorage
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from agentik._errors import ToolError
from agentik._json import JsonObject, JsonValue
from agentik._redact import MIN_SECRET, SECRET_HEADERS, Redactor
from agentik.mcp._config import HttpServer, McpServerConfig, OAuthSettings, StdioServer

KEPT = 64
"""Credentials seen on the way that are remembered (besides the configured ones)."""
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API[-_]?KEY|CREDENTIAL|AUTH", re.IGNORECASE)
"""A header or variable named so holds a credential."""
_SDK_LOGGERS = (
    "mcp.client.streamable_http",
    "mcp.client.stdio",
    "mcp.client.sse",
    "mcp.client.client",
    "mcp.client.auth.oauth2",
    "mcp.client.auth.extensions.client_credentials",
    "mcp.client.auth.extensions.identity_assertion",
    "mcp.shared.session",
    "client",  # mcp.client.session's logger
    "agentik.mcp",  # masked at the source already; this catches what a change forgets
    "agentik.mcp.stderr",  # a stdio server's own words, line by line
)


def _basic(client_id: str | None, secret: str | None) -> list[str]:
    """The secret as HTTP Basic credentials, both as the SDK encodes them (RFC 6749:
    form-encoded first) and as httpx's ``BasicAuth`` does."""
    if not client_id or not secret:
        return []
    forms = {f"{quote(client_id, safe='')}:{quote(secret, safe='')}", f"{client_id}:{secret}"}
    return [base64.b64encode(form.encode()).decode() for form in forms]


def _oauth(settings: OAuthSettings) -> list[str]:
    return [
        settings.client_secret or "",
        settings.idp_client_secret or "",
        *_basic(settings.client_id, settings.client_secret),
        *_basic(settings.idp_client_id, settings.idp_client_secret),
    ]


def configured(config: McpServerConfig) -> list[str]:
    """The credentials ``config`` itself holds."""
    transport = config.transport
    if isinstance(transport, StdioServer):
        return [value for name, value in transport.env if _SECRET_NAME.search(name)]
    assert isinstance(transport, HttpServer)
    found = list(Redactor.for_credentials(None, {}, transport.url).secrets)  # a password
    for name, value in transport.headers:
        if name.lower() in SECRET_HEADERS or _SECRET_NAME.search(name):
            # "Bearer k" shows as "Bearer ***", as a model backend's key does
            scheme, _, credentials = value.strip().partition(" ")
            found.append(credentials.strip() or scheme)
    if transport.oauth is not None:
        found += _oauth(transport.oauth)
    return found


class McpCredentials:
    """One MCP server's credentials and the ``Redactor`` that masks them."""

    def __init__(self, config: McpServerConfig) -> None:
        self._fixed = frozenset(s for s in configured(config) if len(s) >= MIN_SECRET)
        self._seen: dict[str, None] = {}
        """Insertion-ordered: the oldest is dropped first."""
        self.redactor = Redactor(self._fixed)
        _LIVE.add(self)

    def add(self, *secrets: str | None) -> None:
        """Remember credentials seen on the way (short or empty ones are ignored)."""
        changed = False
        for secret in secrets:
            if not secret or len(secret) < MIN_SECRET or secret in self._fixed:
                continue
            if secret in self._seen:
                del self._seen[secret]  # seen again: it is the newest now
            else:
                changed = True
            self._seen[secret] = None
        while len(self._seen) > KEPT:
            del self._seen[next(iter(self._seen))]
        if changed:
            self.redactor = Redactor((*self._fixed, *self._seen))

    def text(self, value: str) -> str:
        return self.redactor.text(value)

    def structure(self, value: JsonValue) -> JsonValue:
        return self.redactor.structure(value)

    def schema(self, schema: JsonObject) -> JsonObject:
        """A JSON Schema the server sent, any credential in it masked."""
        masked = self.redactor.structure(schema)
        assert isinstance(masked, dict)
        return masked

    def tool_error(self, error: ToolError) -> ToolError:
        """``error`` itself when it shows no credential, else a masked copy."""
        message = str(error)
        masked = self.text(message)
        return error if masked == message else ToolError(masked)

    def watch(self, storage: TokenStorage) -> TokenStorage:
        """``storage``, noting every token and client secret that passes through it."""
        return _Watched(storage, self)

    def seen_client(self, client: OAuthClientInformationFull | None) -> None:
        if client is not None and client.client_secret:
            self.add(client.client_secret, *_basic(client.client_id, client.client_secret))

    def seen_tokens(self, tokens: OAuthToken | None) -> None:
        if tokens is not None:
            self.add(tokens.access_token, tokens.refresh_token)


class _Watched:
    """A ``TokenStorage`` that tells its ``McpCredentials`` what it hands out and keeps:
    the SDK's providers load and store every token and registration through it."""

    def __init__(self, inner: TokenStorage, credentials: McpCredentials) -> None:
        self._inner = inner
        self._credentials = credentials

    async def get_tokens(self) -> OAuthToken | None:
        tokens = await self._inner.get_tokens()
        self._credentials.seen_tokens(tokens)
        return tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._credentials.seen_tokens(tokens)
        await self._inner.set_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        client = await self._inner.get_client_info()
        self._credentials.seen_client(client)
        return client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._credentials.seen_client(client_info)
        await self._inner.set_client_info(client_info)


_LIVE: weakref.WeakSet[McpCredentials] = weakref.WeakSet()


def _mask_all(text: str) -> str:
    for credentials in list(_LIVE):
        text = credentials.text(text)
    return text


class _LogMask(logging.Filter):
    """Masks every live toolset's credentials in a record of the SDK's loggers: the
    message (formatted, then kept as is) and the traceback (if it shows one: formatted,
    then kept as text, the exception itself dropped from the record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _LIVE:
            return True
        message = record.getMessage()
        masked = _mask_all(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            if (masked := _mask_all(text)) != text:
                record.exc_text, record.exc_info = masked, None
        elif record.exc_text:
            record.exc_text = _mask_all(record.exc_text)
        return True


def _install(names: Iterable[str]) -> None:
    mask = _LogMask()
    for name in names:
        logging.getLogger(name).addFilter(mask)


_install(_SDK_LOGGERS)
