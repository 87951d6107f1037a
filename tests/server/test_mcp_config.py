"""MCP servers configured in agentik.toml are served as toolsets, and their
health shows in /health (a real mcp-server-time over stdio)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx2
import pytest
import trio

from agentik.server import ConfigError, load_config, serve_agentik


def _write(path: Path, servers: str) -> Path:
    path.write_text(
        f'[storage]\ndatabase = "{path.parent / "agentik.db"}"\n[server]\nbind = "127.0.0.1:0"\n'
        + servers
    )
    return path


async def test_configured_mcp_server_is_a_toolset_with_health(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = load_config(
        _write(
            tmp_path / "agentik.toml",
            f"""
[[mcp.servers]]
name = "time"
command = "{sys.executable}"
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
""",
        ),
        env={},
    )
    assert [s.name for s in config.mcp_servers] == ["time"]
    stop = trio.Event()
    url = await nursery.start(
        lambda task_status: serve_agentik(
            config, shutdown_trigger=stop.wait, task_status=task_status
        )
    )
    try:
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            health = (await client.get("/health")).json()
            assert health["status"] == "ok"
            assert health["mcp"][0]["name"] == "time"
            assert health["mcp"][0]["state"] == "ready"
            assert health["mcp"][0]["tools"] >= 2
            turns = "/agentik/conversations/c1/turns"
            first = await client.post(turns, json={"text": 'call enable_toolset {"name": "time"}'})
            assert first.status_code == 200
            assert "Toolset 'time' activated." in first.text
            second = await client.post(
                turns, json={"text": 'call time_get_current_time {"timezone": "UTC"}'}
            )
            assert second.status_code == 200
            result = second.json()["messages"][2]
            assert result["role"] == "tool"
            assert '"timezone": "UTC"' in result["content"]
            toolsets = (await client.get("/agentik/conversations/c1/toolsets")).json()
            assert "time" in str(toolsets)
    finally:
        stop.set()


def test_bad_mcp_config_names_the_key(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "agentik.toml",
        """
[[mcp.servers]]
name = "broken"
command = "x"
args = ["ok", 3]
""",
    )
    with pytest.raises(ConfigError, match=r"mcp\.servers\[0\]\.args\[1\]"):
        load_config(path, env={})


def test_unknown_mcp_key_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "agentik.toml", "[mcp]\nservrs = []\n")
    with pytest.raises(ConfigError, match=r"\[mcp\] may only hold"):
        load_config(path, env={})
