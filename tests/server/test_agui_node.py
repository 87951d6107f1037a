"""One end-to-end AG-UI run with the npm ``@ag-ui/client`` HttpAgent under node.

Needs node and ``npm ci`` at the repository root (package.json pins the
client; ``.ci/run`` installs it). When either is missing the tests are
skipped *loudly*: a warning in the summary of every run says why and what to
run, so a green run cannot hide that they did not run. Under CI (``CI`` set),
where ``.ci/run`` installs the client, they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import pytest
import trio

from tests.server.conftest import Running

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("agui_client.mjs")


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed"
    if not (ROOT / "node_modules" / "@ag-ui" / "client").is_dir():
        return "@ag-ui/client is not installed: run `npm ci` at the repository root"
    return None


MISSING = _missing()
if MISSING is not None and not os.environ.get("CI"):
    warnings.warn(
        f"the AG-UI npm client tests (tests/server/test_agui_node.py) are skipped: {MISSING}",
        pytest.PytestWarning,
        stacklevel=1,
    )
    pytestmark = pytest.mark.skip(reason=MISSING)


@pytest.fixture(autouse=True)
def _required_under_ci() -> None:
    """CI installs the client (``.ci/run`` runs ``npm ci``): missing there is a failure."""
    if MISSING is not None:
        pytest.fail(f"CI must run the AG-UI npm client tests: {MISSING}")


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
