"""The cluster harness (tests/cluster.py) leaves no ``agentik serve`` behind:
a node dies with the nursery that started it, so a test or benchmark that
fails before ``stop_nodes`` does not leave a server holding its port and its
database connections (one kept ``bench.cluster_nodes``' shell waiting on its
pipe after the benchmark itself had crashed)."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.cluster import Node, start_node
from tests.postgres import fresh_database


class Failed(Exception):
    pass


async def test_a_node_dies_with_the_nursery_that_started_it(
    postgres_dsn: str, tmp_path: Path
) -> None:
    database = await trio.to_thread.run_sync(fresh_database, postgres_dsn)
    started: list[Node] = []
    failed = False
    try:
        async with trio.open_nursery() as nursery:
            started.append(await start_node(nursery, database, "", cwd=tmp_path, model=False))
            raise Failed  # the test body fails before stop_nodes
    except* Failed:
        failed = True
    assert failed
    (node,) = started
    with trio.fail_after(10):
        await node.process.wait()
    assert node.process.returncode is not None
