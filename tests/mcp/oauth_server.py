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

import secrets
import socket
import time

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

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
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


def build(base_url: str, authority: Authority) -> MCPServer:
    """The tiny server's tools behind OAuth, issuer and resource both at ``base_url``."""
    settings = AuthSettings(
        issuer_url=AnyHttpUrl(base_url),
        resource_server_url=AnyHttpUrl(f"{base_url}/mcp"),
        client_registration_options=ClientRegistrationOptions(enabled=True),
        validate_token_resource=False,
    )
    return tiny_server.build(auth=settings, auth_server_provider=authority)
