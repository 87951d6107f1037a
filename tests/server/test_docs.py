"""Every ``sh`` example in docs/server.md, run with curl against a real server
configured as plain ``agentik serve`` is (no toolsets, the demo model), so
an example cannot lean on something only the tests' servers have."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.server.conftest import Running, start_server

DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"
DOC_URL = "http://127.0.0.1:8080"


def examples() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_every_endpoint_has_an_example() -> None:
    text = "\n".join(examples())
    for path in [
        "/health",
        "/metrics",
        "/agentik/conversations/demo/turns",
        "/agentik/conversations?",
        "/messages?",
        "/memory",
        "/memory/archive",
        "/cancel",
        "/summary",
        "/toolsets",
        "/approvals",
        "/elicitations",
        "/agentik/reflections",
        "-X PUT http://127.0.0.1:8080/agentik/skills/",
        "-X DELETE",
        "/agui",
        "/.well-known/agent-card.json",
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
    ]:
        assert path in text, path


@pytest.fixture
async def plain_server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Running]:
    """What ``agentik serve`` runs with no configuration (the address aside)."""
    async for running in start_server(nursery, tmp_path, toolsets=()):
        yield running


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_examples_run(plain_server: Running, tmp_path: Path) -> None:
    """Each example exits 0 with curl --fail-with-body, and the JSON ones print JSON.
    They run in ``tmp_path``: the export example writes demo.jsonl."""
    outputs = []
    for example in examples():
        script = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n'
        script += example.replace(DOC_URL, plain_server.url)
        result = await trio.run_process(
            ["bash", "-c", script],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=tmp_path,
        )
        assert result.returncode == 0, (example, result.stderr.decode(), result.stdout.decode())
        outputs.append(result.stdout.decode())
    joined = "\n".join(outputs)
    assert '"text":"You said: hello"' in joined
    # The demo clock of a bare `agentik serve` (no toolsets, no model configured).
    assert '"text":"enable_toolset returned: Toolset \'clock\' activated."' in joined
    assert '"text":"clock_now returned: 12:00 UTC (a demo clock)"' in joined
    assert "event: turn_finished" in joined
    assert "event: tool_call_finished" in joined  # the streaming example runs a tool
    assert '"text":"likes short answers"' in joined  # ... whose note the memory example shows
    assert '"type":"RUN_FINISHED"' in joined
    assert '"state":"TASK_STATE_COMPLETED"' in joined
    assert '"code":-32002' in joined  # cancelling a finished task
    assert '"code":-32004' in joined  # subscribing to a finished task
    assert "agentik_turns_total" in joined
    assert '{"conversation_id":"demo","approvals":[]}' in joined
    assert '{"conversation_id":"demo","archived":1}' in joined
    assert '{"conversation_id":"demo","summary":null}' in joined
    assert '{"conversation_id":"demo","elicitations":[]}' in joined


def doc_json_after(marker: str) -> object:
    """The first ``json`` block of docs/server.md after ``marker``, parsed."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"```json\n(.*?)```", text[text.index(marker) :], flags=re.DOTALL)
    assert found is not None, marker
    return json.loads(found.group(1))


def shape(value: object) -> object:
    """The structure of a JSON value: keys and types, not the values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    return type(value).__name__


async def test_the_approvals_answer_is_what_the_doc_shows(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The doc's answer of ``GET …/approvals`` has the shape of the real one,
    waiting call included; with nothing waiting the list is empty."""
    async for server in start_server(
        nursery, tmp_path, tools=("tests.server.approval_tools:ledger_tools",)
    ):
        approvals = "/agentik/conversations/demo/approvals"
        turns = "/agentik/conversations/demo/turns"
        paused = await server.client.post(turns, json={"text": 'call ledger_pay {"amount": 5}'})
        assert paused.json()["status"] == "awaiting_approval"
        real = (await server.client.get(approvals)).json()
        call_id = real["approvals"][0]["call_id"]
        await server.client.post(f"{approvals}/{call_id}", json={"approve": False})
        empty = (await server.client.get(approvals)).json()
    doc = doc_json_after("curl -sS http://127.0.0.1:8080/agentik/conversations/demo/approvals\n")
    assert shape(real) == shape(doc)
    assert real["conversation_id"] == "demo"
    assert real["approvals"][0] == {**paused.json()["approvals"][0], "call_id": call_id}
    assert empty == {"conversation_id": "demo", "approvals": []}
