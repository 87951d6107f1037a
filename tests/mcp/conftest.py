"""Fixtures for the MCP tests: the tiny server over stdio (a real subprocess) and HTTP.

Subprocess servers need real time, so those tests bound every wait with
``fail_after`` instead of using the autojump clock. Servers bind 127.0.0.1
on port 0.
"""

from __future__ import annotations

import pathlib
import sys
from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from agentik.mcp import HttpServer, McpServerConfig, StdioServer
from tests.mcp import tiny_server

TINY = str(pathlib.Path(tiny_server.__file__))


@pytest.fixture
def pid_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "pids"
    path.mkdir()
    return path


def tiny_stdio(pid_dir: pathlib.Path | None = None, **options: object) -> McpServerConfig:
    """A config for the tiny server as a subprocess; ``options`` go to McpServerConfig."""
    env = {"TINY_PID_DIR": str(pid_dir)} if pid_dir else {}
    transport = StdioServer(command=sys.executable, args=[TINY], env=env)
    return McpServerConfig(transport=transport, **options)  # type: ignore[arg-type]


def launches(pid_dir: pathlib.Path) -> list[int]:
    return sorted(int(p.name) for p in pid_dir.iterdir())


@pytest.fixture
async def http_url() -> AsyncIterator[str]:
    """The tiny server over Streamable HTTP, served in this test's trio loop."""
    app = tiny_server.build().streamable_http_app(host="127.0.0.1")
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        server = partial(serve, app, config, shutdown_trigger=trio.sleep_forever)
        binds = await nursery.start(server)
        yield f"{binds[0]}/mcp"
        nursery.cancel_scope.cancel()


def tiny_http(url: str, **options: object) -> McpServerConfig:
    return McpServerConfig(transport=HttpServer(url=url), **options)  # type: ignore[arg-type]
