"""One end-to-end AG-UI run with the npm ``@ag-ui/client`` HttpAgent under node.

Needs node and ``npm install`` at the repository root (package.json pins the
client; ``.ci/run`` installs it). Skipped, saying why, when either is missing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio

from tests.server.conftest import Running

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("agui_client.mjs")

pytestmark = [
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
    pytest.mark.skipif(
        not (ROOT / "node_modules" / "@ag-ui" / "client").is_dir(),
        reason="@ag-ui/client is not installed: run `npm install` at the repository root",
    ),
]


async def run_node(*args: str) -> dict[str, object]:
    result = await trio.run_process(
        ["node", str(SCRIPT), *args], capture_stdout=True, capture_stderr=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    parsed = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert isinstance(parsed, dict)
    return parsed


async def test_http_agent_run_with_a_tool(server: Running) -> None:
    """The npm client accepts the stream: events verified, messages rebuilt, state applied."""
    seen = await run_node(f"{server.url}/agui", "node-1", 'call enable_toolset {"name": "clock"}')
    assert seen["failure"] is None, seen
    types = seen["types"]
    assert isinstance(types, list)
    assert types[0] == "RUN_STARTED"
    assert types[-1] == "RUN_FINISHED"
    assert "TOOL_CALL_RESULT" in types
    messages = seen["newMessages"]
    assert isinstance(messages, list)
    assistant = next(m for m in messages if m["role"] == "assistant" and m.get("toolCalls"))
    assert assistant["toolCalls"][0]["function"]["name"] == "enable_toolset"
    assert assistant["toolCalls"][0]["function"]["arguments"] == '{"name": "clock"}'
    tool = next(m for m in messages if m["role"] == "tool")
    assert tool["content"] == "Toolset 'clock' activated."
    assert messages[-1]["content"] == "enable_toolset returned: Toolset 'clock' activated."
    assert seen["state"] == {"activeToolsets": ["clock"]}


async def test_http_agent_sees_http_errors(secured: Running) -> None:
    """A refusal before the run (here: no token) reaches the client as an HTTP error."""
    seen = await run_node(f"{secured.url}/agui", "node-2", "hi")
    assert "401" in str(seen["failure"])
    ok = await run_node(f"{secured.url}/agui", "node-2", "hi", "s3cret")
    assert ok["failure"] is None
    types = ok["types"]
    assert isinstance(types, list)
    assert types[-1] == "RUN_FINISHED"
