"""An OAuth-protected MCP server for the tests, built from the mcp SDK's own auth helpers.

``build(base_url)`` is the tiny server with ``auth=AuthSettings(...)`` and
``auth_server_provider=Authority()``: the SDK serves the protected-resource
metadata, the authorization-server metadata, ``/register`` (dynamic
registration), ``/authorize`` and ``/token``, and guards ``/mcp`` with
bearer tokens. ``Authority`` keeps everything in memory and approves every
authorization at once (it redirects straight back with a code), as a person
clicking "allow" would; it counts refreshes, and ``access_ttl`` makes access
tokens expire so refresh can be seen.
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

import attrs
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl

from tests.asgi import read_body
from tests.mcp import tiny_server


@attrs.define
class Authority:
    access_ttl: int = 3600
    clients: dict[str, OAuthClientInformationFull] = attrs.field(factory=dict)
    codes: dict[str, AuthorizationCode] = attrs.field(factory=dict)
    access: dict[str, AccessToken] = attrs.field(factory=dict)
    refresh: dict[str, RefreshToken] = attrs.field(factory=dict)
    refreshes: int = 0
    authorizations: int = 0
    registered_scope: str | None = None
    """Scopes a registration is granted whatever it asked (RFC 7591 lets the server choose)."""

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        if self.registered_scope is not None:
            client_info = client_info.model_copy(update={"scope": self.registered_scope})
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        self.authorizations += 1
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id or "",
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        return self._issue(client, authorization_code.scopes)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        self.refreshes += 1
        del self.refresh[refresh_token.token]
        return self._issue(client, scopes or refresh_token.scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)

    def _issue(self, client: OAuthClientInformationFull, scopes: list[str]) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        client_id = client.client_id or ""
        expires = int(time.time()) + self.access_ttl
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=expires
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes)
        return OAuthToken(
            access_token=access,
            expires_in=self.access_ttl,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )

    def issued_secrets(self) -> list[str]:
        return [*self.access, *self.refresh]


def free_port() -> int:
    """A port that was free a moment ago (the issuer URL must be known before serving)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def build(
    base_url: str, authority: Authority, server: Callable[..., MCPServer] = tiny_server.build
) -> MCPServer:
    """The tiny server's tools (or ``server``'s) behind OAuth, issuer and resource both at
    ``base_url``."""
    settings = AuthSettings(
        issuer_url=AnyHttpUrl(base_url),
        resource_server_url=AnyHttpUrl(f"{base_url}/mcp"),
        client_registration_options=ClientRegistrationOptions(enabled=True),
        validate_token_resource=False,
    )
    return server(auth=settings, auth_server_provider=authority)


@attrs.define
class ScopeGate:
    """Step-up in front of an MCP app: ``tools/call`` needs ``needed`` scopes.

    A request whose bearer token ``scopes_of`` does not know gets 401 with the
    resource-metadata challenge (so a server without the SDK's own guard is
    protected too); a ``tools/call`` whose token lacks a scope of ``needed``
    gets 403 ``insufficient_scope`` naming them, as the MCP authorization spec
    describes step-up. Everything else goes on to ``app`` unchanged.
    """

    app: Any
    base: str
    scopes_of: Callable[[str], list[str] | None]
    needed: tuple[str, ...] = ("read", "write")
    refused: int = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/mcp":
            await self.app(scope, receive, send)
            return
        metadata = f'resource_metadata="{self.base}/.well-known/oauth-protected-resource/mcp"'
        authorization = dict(scope["headers"]).get(b"authorization", b"").decode()
        granted = self.scopes_of(authorization.removeprefix("Bearer "))
        if granted is None:
            await _reply(send, 401, f'Bearer error="invalid_token", {metadata}')
            return
        body = await read_body(receive)
        message = json.loads(body) if body else {}
        if message.get("method") == "tools/call" and not set(self.needed) <= set(granted):
            self.refused += 1
            challenge = f'Bearer error="insufficient_scope", scope="{" ".join(self.needed)}"'
            await _reply(send, 403, f"{challenge}, {metadata}")
            return
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return dict(await receive())

        await self.app(scope, replay, send)


async def _reply(send: Any, status: int, challenge: str) -> None:
    headers = [(b"www-authenticate", challenge.encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b'{"error": "refused"}'})


def stepping_up(base_url: str, authority: Authority) -> Any:
    """The OAuth-protected tiny server where ``tools/call`` needs scopes ``read write``.

    Registration grants the client both scopes (the authorization server may, RFC
    7591), so a step-up authorization can ask for them; the first login asks for
    none (no scope in the challenge or metadata)."""
    authority.registered_scope = "read write"
    app = build(base_url, authority).streamable_http_app(host="127.0.0.1")

    def scopes_of(token: str) -> list[str] | None:
        found = authority.access.get(token)
        return None if found is None else list(found.scopes)

    return ScopeGate(app, base_url, scopes_of)


@attrs.define
class MachineAuthority:
    """An authorization server for machine clients: the client-credentials grant, with a
    client secret (``client_secret_basic``) or a private-key JWT assertion (RFC 7523)
    checked against ``public_key`` and ``key_id``; and, with ``id_token`` set, an
    enterprise identity provider beside it (SEP-990): ``/idp/token`` exchanges that ID
    token for an ID-JAG naming this server and the MCP resource, which ``/token``
    takes as a jwt-bearer grant from a client authenticated with its secret. Tokens
    carry the scopes asked for; ``grants`` records the scope of each grant."""

    base: str
    client_id: str = "agentik-m2m"
    client_secret: str | None = None
    public_key: Any = None
    key_id: str | None = None
    id_token: str | None = None
    tokens: dict[str, list[str]] = attrs.field(factory=dict)
    grants: list[str] = attrs.field(factory=list)
    assertions: list[str] = attrs.field(factory=list)
    exchanges: int = 0

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def resource(request: Request) -> JSONResponse:
            return JSONResponse(
                {"resource": f"{self.base}/mcp", "authorization_servers": [self.base]}
            )

        async def metadata(request: Request) -> JSONResponse:
            methods = (
                ["private_key_jwt"] if self.public_key is not None else ["client_secret_basic"]
            )
            return JSONResponse(
                {
                    "issuer": self.base,
                    "authorization_endpoint": f"{self.base}/authorize",
                    "token_endpoint": f"{self.base}/token",
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["client_credentials"],
                    "token_endpoint_auth_methods_supported": methods,
                }
            )

        async def exchange(request: Request) -> JSONResponse:
            form = await request.form()
            expected = {
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                "subject_token": self.id_token,
                "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                "requested_token_type": ID_JAG,
                "audience": self.base,
                "resource": f"{self.base}/mcp",
                "client_id": "agentik-at-idp",
            }
            if {key: form.get(key) for key in expected} != expected:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            self.exchanges += 1
            jag = "jag-" + secrets.token_urlsafe(24)
            self.assertions.append(jag)
            return JSONResponse(
                {"access_token": jag, "issued_token_type": ID_JAG, "token_type": "N_A"}
            )

        async def token(request: Request) -> JSONResponse:
            form = await request.form()
            authorization = request.headers.get("authorization", "")
            if form.get("grant_type") == JWT_BEARER:
                basic = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode())
                if authorization != f"Basic {basic.decode()}" or (
                    form.get("assertion") not in self.assertions
                ):
                    return JSONResponse({"error": "invalid_grant"}, status_code=400)
            elif form.get("grant_type") != "client_credentials" or not self._authenticated(
                authorization, dict(form)
            ):
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            scope = str(form.get("scope", ""))
            self.grants.append(scope)
            access = "m2m-" + secrets.token_urlsafe(24)
            self.tokens[access] = scope.split()
            return JSONResponse(
                {"access_token": access, "token_type": "Bearer", "expires_in": 3600, "scope": scope}
            )

        return Starlette(
            routes=[
                Route("/.well-known/oauth-protected-resource/mcp", resource),
                Route("/.well-known/oauth-authorization-server", metadata),
                Route("/token", token, methods=["POST"]),
                Route("/idp/token", exchange, methods=["POST"]),
            ]
        )

    def _authenticated(self, authorization: str, form: dict[str, Any]) -> bool:
        if self.public_key is None:
            expected = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
            return authorization == f"Basic {expected}"
        import jwt

        assertion = str(form.get("client_assertion", ""))
        if form.get("client_assertion_type") != JWT_ASSERTION or not assertion:
            return False
        if jwt.get_unverified_header(assertion).get("kid") != self.key_id:
            return False
        try:
            claims = jwt.decode(
                assertion, self.public_key, algorithms=["ES256", "RS256"], audience=self.base
            )
        except jwt.PyJWTError:
            return False
        self.assertions.append(assertion)
        return bool(claims["iss"] == claims["sub"] == self.client_id)

    def issued_secrets(self) -> list[str]:
        return [*self.tokens, *self.assertions]


JWT_ASSERTION = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


def machine(
    authority: MachineAuthority, server: Callable[[], MCPServer] = tiny_server.build
) -> Any:
    """The tiny server (or ``server``; no auth of its own) behind ``authority``'s tokens,
    with step-up."""
    tiny = server().streamable_http_app(host="127.0.0.1")
    routes = authority.app()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] != "/mcp":
            await routes(scope, receive, send)
        else:
            await gate(scope, receive, send)

    gate = ScopeGate(tiny, authority.base, authority.tokens.get)
    return app
