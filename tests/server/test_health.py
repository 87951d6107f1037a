"""``/health`` tells whether the server can store turns.

It answers 503, ``"status": "degraded"`` and the storage's last error with
its time while writes fail for a reason of the storage (here a full disk, from
the fault-injecting VFS, and a database opened read-only), and 200 ``ok``
again once a write commits. ``/metrics`` carries the same fact as a gauge.
Real servers on 127.0.0.1, real SQLite files, a real HTTP client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import httpx2
import trio

from agentik.server import ServerConfig, serve_agentik
from agentik.storage import StorageBundle, open_sqlite_storage
from tests.storage.vfs_faults import DiskFullVFS, ReadOnlyVFS
from tests.storage.vfs_faults import disk_full_vfs as disk_full_vfs
from tests.storage.vfs_faults import readonly_vfs as readonly_vfs


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


async def turn(client: httpx2.AsyncClient, conversation: str) -> httpx2.Response:
    return await client.post(f"/agentik/conversations/{conversation}/turns", json={"text": "hi"})


def metric(text: str, name: str) -> str:
    return next(line.split()[1] for line in text.splitlines() if line.startswith(name + " "))


async def test_health_is_degraded_while_the_disk_is_full_and_recovers(
    tmp_path: Path, disk_full_vfs: DiskFullVFS
) -> None:
    vfs = disk_full_vfs
    async with (
        open_sqlite_storage(tmp_path / "db", vfs=DiskFullVFS.NAME) as storage,
        serving(storage, tmp_path) as client,
    ):
        healthy = await client.get("/health")
        assert healthy.status_code == 200
        assert healthy.json()["status"] == "ok"
        assert "storage_error" not in healthy.json()
        assert metric((await client.get("/metrics")).text, "agentik_storage_failing") == "0"

        vfs.fail = "write"
        before = datetime.now(UTC)
        failed = await turn(client, "a")
        assert failed.status_code == 503  # the storage cannot take the turn now: retry
        assert failed.headers["Retry-After"] == "1"
        assert failed.json()["error"]["code"] == "store_error"
        degraded = await client.get("/health")
        assert degraded.status_code == 503
        body = degraded.json()
        assert body["status"] == "degraded"
        error = body["storage_error"]
        assert "FullError: database or disk is full" in error["message"]
        assert before <= datetime.fromisoformat(error["at"]) <= datetime.now(UTC)
        assert metric((await client.get("/metrics")).text, "agentik_storage_failing") == "1"

        vfs.fail = None
        assert (await turn(client, "b")).status_code == 200
        recovered = await client.get("/health")
        assert recovered.status_code == 200
        assert recovered.json()["status"] == "ok"
        assert "storage_error" not in recovered.json()
        assert metric((await client.get("/metrics")).text, "agentik_storage_failing") == "0"


async def test_health_is_degraded_on_a_read_only_database(
    tmp_path: Path, readonly_vfs: ReadOnlyVFS
) -> None:
    """Degraded from the start, before any write has failed; then it names
    SQLite's error."""
    path = tmp_path / "db"
    async with open_sqlite_storage(path):
        pass  # created and migrated
    async with (
        open_sqlite_storage(path, vfs=ReadOnlyVFS.NAME) as storage,
        serving(storage, tmp_path) as client,
    ):
        health = await client.get("/health")
        assert health.status_code == 503
        assert health.json()["status"] == "degraded"
        assert "read-only" in health.json()["storage_error"]["message"]
        assert (await turn(client, "a")).status_code == 503
        health = await client.get("/health")
        assert health.status_code == 503
        assert "attempt to write a readonly database" in health.json()["storage_error"]["message"]


async def test_health_sees_a_recovered_disk_without_any_turn(
    tmp_path: Path, disk_full_vfs: DiskFullVFS
) -> None:
    """A load balancer sends no turn to a node whose /health said 503, so the
    probe itself tries a write while writes are failing: degraded while the
    disk is full (that write fails too), ok once it is not, no turn needed."""
    vfs = disk_full_vfs
    async with (
        open_sqlite_storage(tmp_path / "db", vfs=DiskFullVFS.NAME) as storage,
        serving(storage, tmp_path) as client,
    ):
        vfs.fail = "write"
        assert (await turn(client, "a")).status_code == 503
        for _ in range(3):  # the probe's answer is reused for a second: ask past it
            assert (await client.get("/health")).status_code == 503
            await trio.sleep(0.6)
        vfs.fail = None
        with trio.fail_after(5):
            while (await client.get("/health")).status_code != 200:  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert "storage_error" not in (await client.get("/health")).json()
