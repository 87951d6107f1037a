"""``agentik mcp login NAME`` end to end: the real command (in a worker thread, since
it runs its own trio loop), a real OAuth-protected server, the test as the browser."""

from __future__ import annotations

import pathlib
import re
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx2
import pytest
import trio

from agentik.cli import main
from agentik.server import load_config, serve_agentik
from tests.mcp import oauth_server
from tests.mcp.recording import serving
from tests.mcp.test_oauth import _browse
from tests.mcp.test_stdio import LIMIT


@pytest.fixture
async def authority() -> AsyncIterator[tuple[str, oauth_server.Authority]]:
    authority = oauth_server.Authority()
    base = f"http://127.0.0.1:{oauth_server.free_port()}"
    app = oauth_server.build(base, authority).streamable_http_app(host="127.0.0.1")
    async with serving(app, base.removeprefix("http://")):
        yield base, authority


def _toml(base: str, database: pathlib.Path) -> str:
    return (
        f'[storage]\ndatabase = "{database}"\n\n'
        f'[[mcp.servers]]\nname = "web"\nurl = "{base}/mcp"\n'
        '[mcp.servers.oauth]\ngrant = "authorization_code"\n'
    )


async def test_login_prints_the_url_and_stores_the_tokens(
    authority: tuple[str, oauth_server.Authority],
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before the login `serve` reports what to do in /health; the command prints an
    authorization URL and, once the browser comes back, says so and exits 0; `serve` on
    the same database then connects with no further login, and no token shows in
    /health or /metrics."""
    base, auth = authority
    database = tmp_path / "agentik.db"
    path = tmp_path / "agentik.toml"
    path.write_text(_toml(base, database), encoding="utf-8")
    printed = ""
    with trio.fail_after(LIMIT):
        before = await _served(path)
        assert before["health"]["mcp"][0]["state"] == "failed"
        assert before["health"]["mcp"][0]["last_error"] == (
            "mcp server 'web' needs an authorization: run `agentik mcp login web`"
        )
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
        after = await _served(path)
        assert after["health"]["mcp"][0]["state"] == "ready", after
        for secret in auth.issued_secrets():
            assert secret not in str(after)


async def _served(path: pathlib.Path) -> dict[str, Any]:
    """Run `serve` on the config for one look at /health and /metrics."""
    config = load_config(path, env={}, overrides={("server", "bind"): "127.0.0.1:0"})
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_agentik, config, shutdown_trigger=stop.wait))
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            health = (await client.get("/health")).json()
            metrics = (await client.get("/metrics")).text
        stop.set()
    return {"health": health, "metrics": metrics}


def test_an_unknown_name_is_a_usage_error(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(_toml("http://127.0.0.1:9", tmp_path / "a.db"), encoding="utf-8")
    assert main(["mcp", "login", "nope", "--config", str(path)]) == 2
    assert capsys.readouterr().err == (
        "agentik mcp login: no mcp server named 'nope' (configured: 'web')\n"
    )
