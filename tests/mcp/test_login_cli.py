"""``agentik mcp login NAME`` end to end: the real command (in a worker thread, since
it runs its own trio loop), a real OAuth-protected server, the test as the browser."""

from __future__ import annotations

import pathlib
import re
from collections.abc import AsyncIterator

import pytest
import trio

from agentik.cli import main
from agentik.mcp import McpState, McpTokenVault, open_mcp_toolsets, parse_mcp_servers, token_key
from agentik.storage import open_sqlite_storage
from tests.mcp import oauth_server
from tests.mcp.recording import serving
from tests.mcp.test_oauth import _browse
from tests.mcp.test_stdio import LIMIT


@pytest.fixture
async def base() -> AsyncIterator[str]:
    base = f"http://127.0.0.1:{oauth_server.free_port()}"
    app = oauth_server.build(base, oauth_server.Authority()).streamable_http_app(host="127.0.0.1")
    async with serving(app, base.removeprefix("http://")):
        yield base


def _toml(base: str, database: pathlib.Path) -> str:
    return (
        f'[storage]\ndatabase = "{database}"\n\n'
        f'[[mcp.servers]]\nname = "web"\nurl = "{base}/mcp"\n'
        '[mcp.servers.oauth]\ngrant = "authorization_code"\n'
    )


async def test_login_prints_the_url_and_stores_the_tokens(
    base: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command prints an authorization URL; once the browser comes back it says so,
    exits 0, and `serve` (here: the same database) connects with no further login."""
    database = tmp_path / "agentik.db"
    path = tmp_path / "agentik.toml"
    path.write_text(_toml(base, database), encoding="utf-8")
    printed = ""
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            done: list[int] = []

            async def command() -> None:
                argv = ["mcp", "login", "web", "--config", str(path), "--timeout", "20"]
                done.append(await trio.to_thread.run_sync(main, argv))

            nursery.start_soon(command)
            while not (found := re.search(r"(http://\S+/authorize\S+)", printed)):
                await trio.sleep(0.02)  # the command runs in another thread: poll its output
                printed += capsys.readouterr().out
            await _browse(found.group(1))
        printed += capsys.readouterr().out
        assert done == [0]
        assert "Logged in to mcp server 'web' (10 tools)" in printed
        (config,) = parse_mcp_servers([{"name": "web", "url": f"{base}/mcp", "oauth": {}}])
        async with open_sqlite_storage(database) as storage:
            vault = McpTokenVault(storage.working_memory_store, token_key(database))
            async with open_mcp_toolsets([config], tokens=vault) as (src,):
                assert src.state is McpState.READY, src.health.last_error


def test_an_unknown_name_is_a_usage_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(_toml("http://127.0.0.1:9", tmp_path / "a.db"), encoding="utf-8")
    assert main(["mcp", "login", "nope", "--config", str(path)]) == 2
    assert capsys.readouterr().err == (
        "agentik mcp login: no mcp server named 'nope' (configured: 'web')\n"
    )
