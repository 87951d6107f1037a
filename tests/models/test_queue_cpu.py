"""CPU per model call stays flat when thousands of calls queue (the check CI runs).

httpx's pool scanned its connections and queued requests on every pass
(encode/httpcore#1035), so the client's CPU per call grew with the pool and
the queue: 26 ms per call at 1,000 conversations on 100 connections. Here the
process's CPU per call with 2,000 calls started at once on 100 connections
must stay within 3x of 200 calls sent 10 at a time on 10 connections (no
queue). Measured while writing it: httpx2 behind the gate 0.6-1.0x, the same
model on httpx 4.6x. The server is ``bench.fake_openai`` in its own process
(50 ms per answer), so its CPU is not counted; the ratio is checked, not a
time, so a slow machine passes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import trio

from agentik._messages import Message, Role
from agentik.models import ModelRequest, OpenAICompatibleModel


@pytest.fixture(scope="module")
def fake_server() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.fake_openai", "--median", "0.05", "--sigma", "0.3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait()


def requests(tag: str, count: int) -> list[ModelRequest]:
    return [
        ModelRequest(messages=[Message(role=Role.USER, content=f"{tag} {i}")]) for i in range(count)
    ]


async def cpu_per_call(url: str, *, pool: int, calls: int, at_once: int) -> float:
    """Process CPU seconds per call for ``calls`` calls on ``pool`` connections,
    started ``at_once`` at a time (each group waits for the one before)."""
    async with OpenAICompatibleModel(url, "m", max_connections=pool) as model:
        async with trio.open_nursery() as warm:  # connections opened outside the figure
            for request in requests("warm", pool):
                warm.start_soon(model.complete, request)
        batch = requests(f"pool {pool}", calls)
        began = time.process_time()
        for first in range(0, calls, at_once):
            async with trio.open_nursery() as nursery:
                for request in batch[first : first + at_once]:
                    nursery.start_soon(model.complete, request)
        return (time.process_time() - began) / calls


async def test_cpu_per_call_does_not_grow_with_the_queue(fake_server: str) -> None:
    """2,000 calls queued on 100 connections cost at most 3x per call what
    200 calls cost sent 10 at a time on 10."""
    alone = await cpu_per_call(fake_server, pool=10, calls=200, at_once=10)
    queued = await cpu_per_call(fake_server, pool=100, calls=2000, at_once=2000)
    assert queued <= 3 * alone, (
        f"CPU per call: {1000 * queued:.2f} ms with 2,000 queued on 100 connections,"
        f" {1000 * alone:.2f} ms without a queue"
    )
