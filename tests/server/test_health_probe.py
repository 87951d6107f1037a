"""``/health`` probes the storage as a turn would find it, within a bound.

The probe (``agentik.server._health``) against a store whose reads take
scripted times or never end, on trio's mock clock: every check answers
within ``PROBE_TIMEOUT``, one read at most is in flight, reads start at most
once per ``PROBE_REUSE`` however many clients ask, and the answer is what a
turn would meet (Hypothesis over arrivals and read times). Then real
servers on real SQLite files: a writer stuck behind another process's write
lock, and a writer that stopped, each turn ``/health`` 503 in time and back
to 200 when it clears.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import apsw
import attrs
import httpx2
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik.server import ServerConfig, serve_agentik
from agentik.server._health import PROBE_REUSE, PROBE_TIMEOUT, StorageProbe
from agentik.storage import ConversationSnapshot, StorageBundle, in_memory_storage
from agentik.storage import open_sqlite_storage as open_sqlite_storage

HANGS = math.inf


@attrs.define
class ScriptedReads:
    """A message store whose reads take the scripted times (``HANGS``: until
    the test ends); it records when each read started and ended."""

    durations: list[float]
    inner: object
    started: list[float] = attrs.field(factory=list)
    ended: list[float] = attrs.field(factory=list)
    in_flight: int = 0
    most_in_flight: int = 0

    async def load_conversation(
        self, conversation_id: str, *, page_size: int = 50, after_seq: int = 0
    ) -> ConversationSnapshot:
        duration = self.durations[len(self.started) % len(self.durations)]
        self.started.append(trio.current_time())
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await trio.sleep(duration)
        finally:
            self.in_flight -= 1
        self.ended.append(trio.current_time())
        return ConversationSnapshot(messages=(), memory=())

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def scripted(durations: list[float]) -> tuple[StorageBundle, ScriptedReads]:
    memory = in_memory_storage()
    reads = ScriptedReads(durations, memory.message_store)
    return attrs.evolve(memory, message_store=reads), reads  # type: ignore[arg-type]


read_times = st.one_of(st.just(HANGS), st.floats(0.0, 2 * PROBE_TIMEOUT))


@given(
    durations=st.lists(read_times, min_size=1, max_size=6),
    arrivals=st.lists(st.tuples(st.floats(0.0, 3.0), st.integers(1, 20)), min_size=1, max_size=12),
)
@settings(max_examples=150, deadline=None)
def test_checks_are_bounded_single_flight_and_spaced(
    durations: list[float], arrivals: list[tuple[float, int]]
) -> None:
    """Bursts of clients (``count`` at once, ``gap`` seconds after the last
    burst) against reads that take scripted times or hang."""
    bundle, reads = scripted(durations)
    answers: list[tuple[float, float, bool]] = []

    async def main() -> None:
        probe = StorageProbe(bundle, lambda: None)

        async def ask() -> None:
            began = trio.current_time()
            answer = await probe.check(server)
            answers.append((began, trio.current_time(), answer.ok))

        async with trio.open_nursery() as server:
            async with trio.open_nursery() as clients:
                for gap, count in arrivals:
                    await trio.sleep(gap)
                    for _ in range(count):
                        clients.start_soon(ask)
            server.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(answers) == sum(count for _, count in arrivals)
    for began, ended, _ in answers:
        assert ended - began <= PROBE_TIMEOUT + 1e-9, "a check outlived the probe's bound"
    assert reads.most_in_flight <= 1, "two probe reads ran at once"
    for previous_end, start in zip(reads.ended, reads.started[1:], strict=False):
        assert start >= previous_end + PROBE_REUSE - 1e-9, "a read started within the reuse window"
    if all(d < PROBE_TIMEOUT for d in durations):
        assert all(ok for _, _, ok in answers), "a storage answering in time was reported down"
    for began, ended, ok in answers:
        finished = [(s, e) for s, e in zip(reads.started, reads.ended, strict=False) if e <= ended]
        if ok:  # some read ended, in time, no longer than the reuse window ago
            assert finished, "ok without any read having finished"
            start, end = finished[-1]
            assert end - start <= PROBE_TIMEOUT + 1e-9
            assert began - end < PROBE_REUSE + 1e-9
        hung = [s for s, d in zip(reads.started, durations * 100, strict=False) if d == HANGS]
        if hung and hung[0] <= began - PROBE_TIMEOUT and not reads.ended:
            assert not ok, "ok while the only read had hung past the bound"


@asynccontextmanager
async def serving(storage: StorageBundle, tmp_path: Path) -> AsyncIterator[httpx2.AsyncClient]:
    config = ServerConfig(port=0, database=str(tmp_path / "unused.db"))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(
            partial(serve_agentik, config, storage=storage, shutdown_trigger=stop.wait)
        )
        async with httpx2.AsyncClient(base_url=url, timeout=30) as client:
            yield client
        stop.set()


async def test_a_writer_stuck_behind_another_writer_is_degraded_in_time(tmp_path: Path) -> None:
    """Another process holds SQLite's write lock (inside the bundle's busy
    timeout, so no write has failed yet): the turn waits, and ``/health``
    says so within the probe's bound, then recovers once the lock is gone."""
    path = tmp_path / "agentik.db"
    async with (
        open_sqlite_storage(path, busy_timeout=60) as storage,
        serving(storage, tmp_path) as client,
    ):
        healthy = await client.get("/health")
        assert healthy.status_code == 200, healthy.text
        assert healthy.json()["storage_probe"]["ok"] is True
        other = apsw.Connection(str(path))
        other.execute("BEGIN IMMEDIATE")
        async with trio.open_nursery() as nursery:
            turned: list[httpx2.Response] = []

            async def turn() -> None:
                turned.append(
                    await client.post("/agentik/conversations/a/turns", json={"text": "hi"})
                )

            nursery.start_soon(turn)
            began = time.monotonic()
            with trio.fail_after(PROBE_TIMEOUT + 10):
                # The writer's state is another thread's: nothing to wait on but asking.
                while (health := await client.get("/health")).status_code == 200:  # noqa: ASYNC110
                    await trio.sleep(0.1)
            waited = time.monotonic() - began
            assert waited <= PROBE_TIMEOUT + 2, waited
            assert health.status_code == 503 and health.headers["Retry-After"] == "1"
            body = health.json()
            assert body["status"] == "degraded"
            assert "has not finished a commit for" in body["storage_probe"]["error"]
            other.execute("COMMIT")
            other.close()
        assert turned[0].status_code == 200, turned[0].text
        assert (await client.get("/health")).status_code == 200


async def test_a_stopped_writer_is_degraded(tmp_path: Path) -> None:
    """The bundle an embedder handed the server closes while it serves: turns
    cannot be stored, and ``/health`` says the writer stopped."""
    handed = trio.Event()
    close = trio.Event()
    box: list[StorageBundle] = []

    async def own_the_bundle() -> None:
        async with open_sqlite_storage(tmp_path / "agentik.db") as storage:
            box.append(storage)
            handed.set()
            await close.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(own_the_bundle)
        await handed.wait()
        async with serving(box[0], tmp_path) as client:
            assert (await client.get("/health")).status_code == 200
            close.set()
            await trio.testing.wait_all_tasks_blocked()
            health = await client.get("/health")
            assert health.status_code == 503, health.text
            assert health.json()["storage_probe"]["error"] == (
                "the storage writer has stopped: no write can be stored"
            )
            turn = await client.post("/agentik/conversations/a/turns", json={"text": "hi"})
            assert turn.status_code == 503, turn.text
