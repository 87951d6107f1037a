"""An AG-UI run sent again after a crash (issue "hardening", item 9): the
server is SIGKILLed while the run's tool (not idempotent) runs, restarted on
the same file, and the client sends the same run again (same ``runId``, same
message id). The answer is that run: the events the first run had sent are
its beginning (same ids), it finishes with the turn's result, the tool never
runs again (its call is answered ``interrupted``), and the thread holds the
turn once. Streams are parsed into the ag-ui-protocol models and checked
against the client's rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.reliability.held_tools import RELEASE
from tests.reliability.test_crash import running_server
from tests.server.agui_rules import check_events
from tests.server.test_agui_retry import folded

TOOLS = ("tests.reliability.held_tools:held_work",)
GUARD_SECONDS = 60
INTERRUPTED = "interrupted: the process stopped before this call finished"
CALL = 'call held_work {"tag": "w1"}'
BODY = {
    "threadId": "t",
    "runId": "run-1",
    "protocolVersion": "1.0",
    "state": {},
    "messages": [{"id": "u1", "role": "user", "content": CALL}],
    "tools": [],
    "context": [],
    "forwardedProps": {},
}


def starts(runs: Path) -> list[str]:
    path = runs / "held_work.runs"
    return path.read_text().splitlines() if path.exists() else []


async def test_a_run_sent_again_after_a_crash_is_the_first_run(tmp_path: Path) -> None:
    database, runs = tmp_path / "a.db", tmp_path / "runs"
    received: list[dict[str, Any]] = []
    with trio.fail_after(GUARD_SECONDS):
        async with running_server(database, toolsets=(), tools=TOOLS) as server:
            async with (
                httpx2.AsyncClient(base_url=server.url or "", timeout=GUARD_SECONDS) as http,
                trio.open_nursery() as nursery,
            ):

                async def first() -> None:
                    headers = {"Accept": "text/event-stream"}
                    try:
                        async with http.stream("POST", "/agui", json=BODY, headers=headers) as r:
                            async for line in r.aiter_lines():
                                if line.startswith("data: "):
                                    received.append(json.loads(line[6:]))
                    except httpx2.HTTPError:
                        pass  # the server is killed under it: no answer

                nursery.start_soon(first)
                while not starts(runs):  # noqa: ASYNC110 (the server's tool writes it)
                    await trio.sleep(0.01)
                await server.kill()
        [started] = starts(runs)

        (runs / RELEASE).touch()  # from now on the work would end, if it ran again
        async with running_server(database, toolsets=(), tools=TOOLS) as server:
            async with httpx2.AsyncClient(base_url=server.url or "", timeout=GUARD_SECONDS) as http:
                reply = await http.post("/agui", json=BODY, headers={"Accept": "text/event-stream"})
                assert reply.status_code == 200, reply.text
                events = [json.loads(line[6:]) for line in reply.text.split("\n\n") if line]
                check_events(events)
                history = await http.get("/agentik/conversations/t/messages")
                again = await http.post("/agui", json=BODY, headers={"Accept": "text/event-stream"})

    answer = f"held_work returned: {INTERRUPTED}"
    assert events[-1]["type"] == "RUN_FINISHED", events
    assert events[-1]["outcome"] == {"type": "success"}
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == INTERRUPTED
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == answer
    mine = folded(received)
    assert mine, "the first run sent nothing before the kill"
    assert folded(events)[: len(mine)] == mine, "the first run's events are not its beginning"
    assert [m["content"] for m in history.json()["messages"]] == [CALL, "", INTERRUPTED, answer]
    assert starts(runs) == [started], "the work ran again"
    assert started.startswith("start w1 ")
    again_events = [json.loads(line[6:]) for line in again.text.split("\n\n") if line]
    assert folded(again_events) == folded(events)
