"""OAuth for MCP servers over HTTP: the SDK's providers, built from agentik's settings.

The mcp SDK does the MCP authorization spec (2025-11-25): protected-resource
metadata from ``WWW-Authenticate`` with the well-known fallbacks,
authorization-server metadata, client ID metadata documents, dynamic or
pre-registered clients, PKCE, scope selection and step-up, refresh, and the
client-credentials grant. agentik adds the two things a daemon needs: where
tokens live (``McpTokenVault``) and how a person completes the
authorization-code flow (``login``: the URL is shown, the redirect comes back
to a one-shot listener on 127.0.0.1).

A daemon does not wait for a person to connect: when a server needs a login
to connect, the flow stops at once with ``LoginRequired``, and ``/health``
says to run ``agentik mcp login NAME``. Mid-call it may ask one: when a
server answers a tool call with 403 ``insufficient_scope`` (step-up), the
SDK starts a new authorization with the wider scope, and ``ask_person``
(the toolset's) puts the authorization URL to the person of the
conversation whose call it is, as a URL-mode elicitation, and receives the
redirect on 127.0.0.1. Machine grants (client credentials with a secret or
a private-key JWT) step up by themselves.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import jwt
import trio
from mcp import Client
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyUrl

from agentik._errors import AgentikError
from agentik._groups import innermost
from agentik.mcp._config import HttpServer, McpServerConfig, OAuthSettings
from agentik.mcp._credentials import McpCredentials
from agentik.mcp._tokens import McpTokenVault
from agentik.mcp._transport import CLIENT_INFO, StderrTail, mcp_http_client, open_transport

logger = logging.getLogger("agentik.mcp")

_MAX_REQUEST = 16384
"""The redirect is one GET; a longer head is not a browser coming back."""


class LoginRequired(AgentikError):
    """The server needs a person to authorize agentik; the message says how."""


class LoginError(AgentikError):
    """The interactive authorization did not complete; the message says why."""


class StepUpRefused(LoginRequired):
    """The wider authorization a tool call needs was declined, cancelled or not given in
    time; the call fails, the connection stays."""


class _QuietRefusals(logging.Filter):
    """The SDK logs every failed authorization as an error with its traceback; a person
    saying no to a step-up is not one (the toolset logs it, at info)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StepUpRefused))


logging.getLogger("mcp.client.auth.oauth2").addFilter(_QuietRefusals())


class _PersonFlowProvider(OAuthClientProvider):
    """The SDK's authorization-code provider, where a step-up the person refuses ends
    only the request, not the connection.

    The SDK's flow raises whatever the callback raised, which tears the whole
    session down (the request's POST task fails its transport's task group),
    so one conversation's "no" would break every other call to the server.
    Here the request goes once more with its old token instead: the server
    refuses it again (403), and that refusal is the request's answer. The
    toolset tells the call why (``StepUpRefused``'s message).
    """

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = super().async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except StepUpRefused:
            yield request
        finally:
            await flow.aclose()


PersonFlow = Callable[[str], Awaitable[AuthorizationCodeResult]]
"""Takes an authorization URL to a person and returns what the redirect carried."""

_ASSERTION_LIFETIME = 300
"""Seconds a private-key JWT client assertion is valid (RFC 7523: short-lived)."""


def _unseen(*secrets: str) -> None:
    """Where credentials go when nothing masks them (``login``: no tool results)."""


def private_key_assertion(
    settings: OAuthSettings, seen: Callable[..., None] = _unseen
) -> Callable[[str], Awaitable[str]]:
    """Signs RFC 7523 client assertions (``iss`` = ``sub`` = client id, ``aud`` = the
    authorization server's issuer) with the key in ``private_key_file``.

    The file is read for each assertion, so a rotated key is used from the next
    token request on, and the key is never kept beyond one signature. Errors
    name the file, never its content. Each assertion goes to ``seen`` (to be masked
    should a server quote it) before it is sent."""
    assert settings.private_key_file is not None
    assert settings.client_id is not None
    path, client_id = Path(settings.private_key_file), settings.client_id
    headers = {"kid": settings.key_id} if settings.key_id else None

    async def assertion(audience: str) -> str:
        try:
            key = await trio.Path(path).read_bytes()
        except OSError as error:
            raise LoginError(
                f"cannot read the private key file {str(path)!r}: {error.strerror}"
            ) from None
        now = int(time.time())
        claims = {
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + _ASSERTION_LIFETIME,
            "jti": uuid.uuid4().hex,
        }
        try:
            signed = jwt.encode(claims, key, algorithm=settings.signing_alg, headers=headers)
        except (ValueError, TypeError, jwt.PyJWTError):
            # The library's message may quote the key: say only what and where.
            raise LoginError(
                f"the private key in {str(path)!r} cannot sign {settings.signing_alg}"
            ) from None
        seen(signed)
        return signed

    return assertion


_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
_ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
_ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


def identity_assertion_grant(
    settings: OAuthSettings, seen: Callable[..., None] = _unseen
) -> Callable[[str, str], Awaitable[str]]:
    """SEP-990 leg 1: exchange the ID token (``id_token_file``) at the identity provider
    for an identity assertion grant (ID-JAG, RFC 8693 token exchange) naming the MCP
    authorization server (``audience``) and the MCP server (``resource``).

    The SDK's ``IdentityAssertionOAuthProvider`` does leg 2 (the ID-JAG for an
    access token at the configured issuer). The ID token file is read per
    exchange, so whatever renews it is picked up. Errors give the identity
    provider's status and error code, never a token or the response body. The ID
    token and the grant go to ``seen`` before they are sent."""
    assert settings.idp_token_endpoint is not None
    assert settings.id_token_file is not None
    endpoint, path = settings.idp_token_endpoint, trio.Path(settings.id_token_file)

    async def exchange(audience: str, resource: str) -> str:
        try:
            id_token = (await path.read_text()).strip()
        except OSError as error:
            raise LoginError(
                f"cannot read the ID token file {str(path)!r}: {error.strerror}"
            ) from None
        seen(id_token)
        form = {
            "grant_type": _TOKEN_EXCHANGE,
            "requested_token_type": _ID_JAG,
            "audience": audience,
            "resource": resource,
            "subject_token": id_token,
            "subject_token_type": _ID_TOKEN,
        }
        auth = None
        if settings.idp_client_id is not None and settings.idp_client_secret is not None:
            auth = httpx2.BasicAuth(settings.idp_client_id, settings.idp_client_secret)
        elif settings.idp_client_id is not None:
            form["client_id"] = settings.idp_client_id
        async with mcp_http_client(auth=auth) as http:
            response = await http.post(endpoint, data=form)
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            answer = {}
        grant = answer.get("access_token")
        if response.status_code != 200 or not isinstance(grant, str) or not grant:
            code = answer.get("error")
            why = f" ({code})" if isinstance(code, str) and code.isascii() else ""
            raise LoginError(
                f"the identity provider refused the token exchange: HTTP "
                f"{response.status_code}{why[:80]}"
            )
        seen(grant)
        if answer.get("issued_token_type", _ID_JAG) != _ID_JAG:
            raise LoginError("the identity provider's token exchange did not issue an ID-JAG")
        return grant

    return exchange


def _client(settings: OAuthSettings, redirect_uri: str | None) -> OAuthClientInformationFull | None:
    """The pre-registered client, if ``client_id`` is configured."""
    if settings.client_id is None:
        return None
    return OAuthClientInformationFull(
        client_id=settings.client_id,
        client_secret=settings.client_secret,
        redirect_uris=[AnyUrl(redirect_uri)] if redirect_uri else None,
        token_endpoint_auth_method=_auth_method(settings),
        grant_types=["authorization_code", "refresh_token"],
        scope=settings.scope,
    )


def _auth_method(settings: OAuthSettings) -> str:
    if settings.token_endpoint_auth is not None:
        return settings.token_endpoint_auth
    return "client_secret_basic" if settings.client_secret else "none"


def oauth_provider(
    config: McpServerConfig,
    vault: McpTokenVault,
    *,
    redirect_uri: str | None = None,
    show_url: Callable[[str], Awaitable[None]] | None = None,
    receive_code: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
    ask_person: PersonFlow | None = None,
    credentials: McpCredentials | None = None,
) -> httpx2.Auth | None:
    """The SDK's OAuth provider for ``config`` (None without ``oauth``).

    Without ``show_url``/``receive_code`` (a daemon) an authorization-code
    server that needs a person goes to ``ask_person``, which finds one (a
    step-up in a conversation's tool call) or raises ``LoginRequired``; without
    ``ask_person`` it raises ``LoginRequired`` at once. ``credentials`` learns
    every token, registered secret and assertion the flow uses.
    """
    transport = config.transport
    if not isinstance(transport, HttpServer) or transport.oauth is None:
        return None
    settings, name = transport.oauth, config.name or transport.url
    seen = credentials.add if credentials is not None else _unseen

    def storage(
        client: OAuthClientInformationFull | None = None,
        redirect_uri: str | None = None,
        keep_client: bool = True,
    ) -> TokenStorage:
        tokens = vault.storage(
            name, client=client, redirect_uri=redirect_uri, keep_client=keep_client
        )
        return tokens if credentials is None else credentials.watch(tokens)

    if settings.grant == "identity_assertion":
        # Checked when the config was parsed.
        assert settings.client_id is not None
        assert settings.client_secret is not None
        assert settings.issuer is not None
        return IdentityAssertionOAuthProvider(
            server_url=transport.url,
            storage=storage(),
            client_id=settings.client_id,
            client_secret=settings.client_secret,
            issuer=settings.issuer,
            assertion_provider=identity_assertion_grant(settings, seen),
            scope=settings.scope,
            token_endpoint_auth_method="client_secret_basic"
            if settings.token_endpoint_auth == "client_secret_basic"
            else "client_secret_post",
        )
    if settings.grant == "client_credentials" and settings.private_key_file is not None:
        assert settings.client_id is not None  # checked when the config was parsed
        return PrivateKeyJWTOAuthProvider(
            server_url=transport.url,
            storage=storage(),
            client_id=settings.client_id,
            assertion_provider=private_key_assertion(settings, seen),
            scope=settings.scope,
            issuer=settings.issuer,
        )
    if settings.grant == "client_credentials":
        # Checked when the config was parsed.
        assert settings.client_id is not None
        assert settings.client_secret is not None
        method = _auth_method(settings)
        return ClientCredentialsOAuthProvider(
            server_url=transport.url,
            storage=storage(),
            client_id=settings.client_id,
            client_secret=settings.client_secret,
            token_endpoint_auth_method="client_secret_post"
            if method == "client_secret_post"
            else "client_secret_basic",
            scope=settings.scope,
            issuer=settings.issuer,
        )

    # The SDK shows the URL, then waits for the code: a person gets both at once.
    # The provider's lock serializes its flows, so one URL is pending at a time.
    urls: list[str] = []

    async def needs_login(url: str) -> None:
        if ask_person is None:
            raise LoginRequired(
                f"mcp server {name!r} needs an authorization: run `agentik mcp login {name}`"
            )
        urls.append(url)

    async def no_code() -> AuthorizationCodeResult:
        if ask_person is None or not urls:
            raise LoginRequired(f"mcp server {name!r} needs an authorization")
        return await ask_person(urls.pop())

    # Any loopback URI will do for a daemon: it never completes a redirect.
    uri = redirect_uri or f"http://127.0.0.1:{settings.redirect_port or 8976}/callback"
    metadata = OAuthClientMetadata(
        client_name="agentik",
        redirect_uris=[AnyUrl(uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method=_auth_method(settings),  # type: ignore[arg-type]
        scope=settings.scope,
    )
    provider = OAuthClientProvider if show_url is not None else _PersonFlowProvider
    return provider(
        server_url=transport.url,
        client_metadata=metadata,
        storage=storage(_client(settings, uri), redirect_uri, keep_client=show_url is not None),
        redirect_handler=show_url or needs_login,
        callback_handler=receive_code or no_code,
        client_metadata_url=settings.client_metadata_url,
    )


async def login(
    config: McpServerConfig,
    vault: McpTokenVault,
    show_url: Callable[[str], Awaitable[None]],
) -> int:
    """Authorize agentik at ``config``'s server with a person; return how many tools it lists.

    ``show_url`` hands the authorization URL to the person (the CLI prints
    it); the browser's redirect comes back to a listener on 127.0.0.1 at
    ``redirect_port`` (any free port by default), which takes exactly one
    request. The tokens go to ``vault``, where the daemon finds them.

    Raises:
        LoginError: the server refused, the person declined, or the redirect
            was not a valid answer.
    """
    transport = config.transport
    if not isinstance(transport, HttpServer) or transport.oauth is None:
        raise LoginError(f"mcp server {config.name!r} has no [mcp.servers.oauth] settings")
    if transport.oauth.grant != "authorization_code":
        raise LoginError(
            f"mcp server {config.name!r} uses grant {transport.oauth.grant!r}, which needs no login"
        )
    listeners = await trio.open_tcp_listeners(transport.oauth.redirect_port, host="127.0.0.1")
    async with listeners[0] as listener:
        port = listener.socket.getsockname()[1]
        redirect_uri = f"http://127.0.0.1:{port}/callback"

        async def receive_code() -> AuthorizationCodeResult:
            return await receive_redirect(listener)

        provider = oauth_provider(
            config, vault, redirect_uri=redirect_uri, show_url=show_url, receive_code=receive_code
        )
        try:
            async with Client(
                open_transport(transport, lambda: None, StderrTail("login"), auth=provider),
                mode=config.protocol,
                client_info=CLIENT_INFO,
                cache=None,
            ) as client:
                listing = await client.list_tools()
        except LoginError:
            raise
        # The boundary of the login command: whatever the SDK raised becomes one line.
        except Exception as error:
            why = _cause(error)
            raise LoginError(f"mcp server {config.name!r}: the login failed: {why}") from error
    return len(listing.tools)


def _cause(error: BaseException) -> str:
    error = innermost(error)
    return str(error) or type(error).__name__


async def receive_redirect(listener: trio.SocketListener) -> AuthorizationCodeResult:
    """Answer the browser's redirect to ``/callback`` and return what it carried."""
    while True:
        async with await listener.accept() as stream:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < _MAX_REQUEST:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                head += chunk
            target = head.split(b"\r\n", 1)[0].split(b" ")
            url = urlsplit(target[1].decode("latin-1") if len(target) == 3 else "")
            if url.path != "/callback":
                await _answer(stream, 404, "not the agentik login callback")
                continue  # a favicon or a stray request: keep waiting
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            if "error" in query:
                await _answer(stream, 400, "agentik: the authorization was declined")
                described = query.get("error_description", "")
                raise LoginError(
                    f"the authorization server answered {query['error']!r} {described}".strip()
                )
            if "code" not in query:
                await _answer(stream, 400, "agentik: no authorization code in the redirect")
                raise LoginError("the redirect carried no authorization code")
            await _answer(stream, 200, "agentik: logged in. You can close this tab.")
            return AuthorizationCodeResult(
                code=query["code"], state=query.get("state"), iss=query.get("iss")
            )


async def _answer(stream: trio.SocketStream, status: int, text: str) -> None:
    body = text.encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    await stream.send_all(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
