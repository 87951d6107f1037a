"""A process killed (SIGKILL) in the middle of a summary request (issue 16):
nothing acknowledged is lost, no summary is half stored, the history is
valid, and the conversation goes on after the restart, summaries included.

The child (``summary_child``) runs turns on a real SQLite file and reports
each acknowledged turn on stdout; its model answers a given number of summary
requests and hangs in the next, and the test kills it there.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from agentik import (
    ContextPolicy,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    open_chat_agent,
    open_sqlite_storage,
)
from tests.agent.helpers import assert_valid_history, stored


async def kill_mid_summary(database: Path, answered: int) -> dict[str, int]:
    """Run the child until it hangs in a summary request, SIGKILL it; the
    keys it acknowledged, with the seq of each turn's last message."""
    child = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "tests.agent.summary_child",
            str(database),
            str(answered),
        ],
        stdout=subprocess.PIPE,
    )
    acked: dict[str, int] = {}
    summarized = 0
    buffer = b""
    assert child.stdout is not None
    try:
        with trio.fail_after(120):
            while b"summarizing\n" not in buffer:
                chunk = await child.stdout.receive_some()
                assert chunk, f"the child ended early: {buffer[-500:]!r}"
                buffer += chunk
        child.send_signal(signal.SIGKILL)
    finally:
        with trio.CancelScope(shield=True):
            child.kill()
            await child.wait()
    for line in buffer.decode().splitlines():
        if line.startswith("acked "):
            _, seq, key = line.split()
            acked[key] = int(seq)
        elif line == "summarized":
            summarized += 1
    assert summarized == answered
    assert child.returncode == -signal.SIGKILL
    return acked


async def summarize(request: ModelRequest) -> ModelResponse:
    if request.purpose == "summary":
        return ModelResponse(text="a summary written after the restart")
    return ModelResponse(text=f"answer to: {request.messages[-1].content[:20]}")


@pytest.mark.parametrize("answered", [0, 2], ids=["first-summary", "third-summary"])
async def test_a_kill_mid_summary_loses_nothing(tmp_path: Path, answered: int) -> None:
    database = tmp_path / "summary.db"
    acked = await kill_mid_summary(database, answered)
    assert acked, "no turn was acknowledged before the summary"
    async with open_sqlite_storage(database) as storage:
        history = await stored(storage, "c")
        assert_valid_history(history)
        by_seq = {m.seq: m for m in history}
        for key, seq in acked.items():
            assert seq in by_seq, f"acknowledged turn {key} (seq {seq}) lost"
            assert by_seq[seq].content.startswith("answer to: question")
        store = storage.message_store
        before = await store.list_summaries("c")
        assert len(before) == answered, "a summary half stored, or one lost"
        async with open_chat_agent(
            model=ScriptedModel(summarize), storage=storage, context=ContextPolicy(max_tokens=300)
        ) as agent:
            last = max(acked, key=acked.__getitem__)
            again = await agent.send("c", f"question {last[1:]} " * 5, idempotency_key=last)
            assert again.messages[-1].seq == acked[last], "a retried turn was answered twice"
            for i in range(20):
                await agent.send("c", f"after the restart {i} " * 5)
            assert agent.stats.summaries >= 1, "summaries stopped after the restart"
        after = await store.list_summaries("c")
        assert after[: len(before)] == before
        assert after[-1].text == "a summary written after the restart"
        assert_valid_history(await stored(storage, "c"))
