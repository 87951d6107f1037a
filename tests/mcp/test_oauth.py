"""OAuth against a real OAuth-protected MCP server on 127.0.0.1 (the SDK's own auth
routes, ``tests/mcp/oauth_server.py``), real SQLite storage, and a real
loopback redirect for ``login``: the test plays the browser with httpx2.

Real time bounded by ``fail_after``: sockets and the SDK's OAuth flow.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import AsyncIterator

import httpx2
import pytest
import trio

from agentik.mcp import (
    HttpServer,
    LoginError,
    McpServerConfig,
    McpState,
    McpTokenVault,
    OAuthSettings,
    login,
    open_mcp_toolsets,
    token_key,
)
from agentik.storage import open_sqlite_storage
from tests.mcp import oauth_server
from tests.mcp.recording import serving
from tests.mcp.test_stdio import LIMIT, tool


@pytest.fixture
async def authority() -> AsyncIterator[tuple[str, oauth_server.Authority]]:
    """The protected server's base URL and its authorization server's state."""
    authority = oauth_server.Authority(access_ttl=3600)
    base = f"http://127.0.0.1:{oauth_server.free_port()}"
    app = oauth_server.build(base, authority).streamable_http_app(host="127.0.0.1")
    async with serving(app, base.removeprefix("http://")):
        yield base, authority


def _config(base: str, **oauth: object) -> McpServerConfig:
    settings = OAuthSettings(**oauth)  # type: ignore[arg-type]
    return McpServerConfig(
        transport=HttpServer(url=f"{base}/mcp", oauth=settings), name="web", backoff=0.05
    )


async def _browse(url: str, *, approve: bool = True) -> None:
    """A person's browser: open the authorization URL, follow its redirect to the callback."""
    async with httpx2.AsyncClient() as browser:
        answer = await browser.get(url)
        assert answer.status_code == 302, answer.text
        location = answer.headers["location"]
        if not approve:
            location = location.split("?", 1)[0] + "?error=access_denied&state=x"
        await browser.get(location)


async def _login(config: McpServerConfig, vault: McpTokenVault, **browse: bool) -> int:
    async with trio.open_nursery() as nursery:

        async def show(url: str) -> None:
            nursery.start_soon(lambda: _browse(url, **browse))

        return await login(config, vault, show)


class TestAuthorizationCode:
    async def test_without_a_login_the_server_says_how_to_get_one(
        self, authority: tuple[str, oauth_server.Authority]
    ) -> None:
        """A daemon never waits for a person: failed at once, naming the command to run."""
        base, _ = authority
        with trio.fail_after(LIMIT):
            async with open_mcp_toolsets([_config(base)]) as (src,):
                assert src.state is McpState.FAILED
                assert src.health.last_error == (
                    "mcp server 'web' needs an authorization: run `agentik mcp login web`"
                )

    async def test_a_login_is_kept_in_storage_for_the_daemon(
        self,
        authority: tuple[str, oauth_server.Authority],
        tmp_path: pathlib.Path,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """login (dynamic registration, PKCE, the redirect on 127.0.0.1) stores the tokens;
        a toolset opened on the same database connects with them, no second login; no token
        is in the database file, the log or /health."""
        caplog.set_level(logging.DEBUG)
        base, auth = authority
        database = tmp_path / "agentik.db"
        config = _config(base)
        with trio.fail_after(LIMIT):
            async with open_sqlite_storage(database) as storage:
                vault = McpTokenVault(storage, token_key(database))
                assert await _login(config, vault) == 10
            assert auth.authorizations == 1
            async with open_sqlite_storage(database) as storage:
                vault = McpTokenVault(storage, token_key(database))
                async with open_mcp_toolsets([config], tokens=vault) as (src,):
                    assert src.state is McpState.READY, src.health.last_error
                    assert await tool(src, "web_add").handler({"a": 1, "b": 2}) == "3"
                    health = repr(src.health)
        assert auth.authorizations == 1
        secrets = auth.issued_secrets()
        assert secrets
        files = b"".join(p.read_bytes() for p in tmp_path.iterdir())  # noqa: ASYNC240 - test data
        for secret in secrets:
            assert secret.encode() not in files
            assert secret not in caplog.text
            assert secret not in health

    async def test_an_expired_access_token_is_refreshed_not_reauthorized(
        self, authority: tuple[str, oauth_server.Authority], tmp_path: pathlib.Path
    ) -> None:
        """An access token about to expire is not sent: the refresh token gets a new one."""
        base, auth = authority
        auth.access_ttl = 10  # under the vault's 30 s margin: expired for the daemon
        database = tmp_path / "agentik.db"
        config = _config(base)
        with trio.fail_after(LIMIT):
            async with open_sqlite_storage(database) as storage:
                vault = McpTokenVault(storage, token_key(database))
                await _login(config, vault)
                async with open_mcp_toolsets([config], tokens=vault) as (src,):
                    assert src.state is McpState.READY, src.health.last_error
        assert (auth.authorizations, auth.refreshes) == (1, 1)

    async def test_a_declined_authorization_is_a_clear_error(
        self, authority: tuple[str, oauth_server.Authority], tmp_path: pathlib.Path
    ) -> None:
        """The person says no: LoginError naming the server's answer, nothing stored."""
        base, _ = authority
        database = tmp_path / "agentik.db"
        with trio.fail_after(LIMIT):
            async with open_sqlite_storage(database) as storage:
                vault = McpTokenVault(storage, token_key(database))
                with pytest.raises(ExceptionGroup) as error:  # through the browser's nursery
                    await _login(_config(base), vault, approve=False)
                assert error.group_contains(
                    LoginError,
                    match=r"^mcp server 'web': the login failed: "
                    r"the authorization server answered 'access_denied'$",
                )
                assert await vault.storage("web").get_tokens() is None
