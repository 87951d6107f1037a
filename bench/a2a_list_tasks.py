"""A2A ListTasks with ``pageSize=1`` in a context of N finished tasks, over HTTP.

The tasks are written straight into a SQLite file (each a user message keyed
with its task id and an assistant answer, as a SendMessage turn leaves them),
then ``agentik serve``'s app runs on that file and one client asks for the
first page, and the page after it, several times. Reported: the median time
of one call, and the spread.

    python -m bench.a2a_list_tasks --tasks 1000 3000 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx2
import trio

from agentik import Message, Role
from agentik.server import ServerConfig, serve_agentik
from agentik.server.a2a._rpc import make_task_id
from agentik.storage import MessageStore, open_sqlite_storage


async def add_tasks(store: MessageStore, context_id: str, count: int) -> list[str]:
    """``count`` finished tasks in ``context_id``, oldest first; their ids.
    Submitted all at once, so the writer commits them in a few batches."""
    ids = [make_task_id(context_id, f"m{i}") for i in range(count)]
    pending = []
    for i, task_id in enumerate(ids):
        question = Message(role=Role.USER, content=f"question {i}")
        answer = Message(role=Role.ASSISTANT, content=f"answer {i}")
        pending.append(await store.submit(context_id, question, idempotency_key=task_id))
        pending.append(await store.submit(context_id, answer))
    for each in pending:
        await each.wait()
    return ids


def list_tasks(context_id: str, size: int, token: str = "") -> dict[str, object]:
    params: dict[str, object] = {"contextId": context_id, "pageSize": size}
    if token:
        params["pageToken"] = token
    return {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params}


async def measure(tasks: int, repeat: int) -> list[float]:
    with tempfile.TemporaryDirectory() as folder:
        database = Path(folder) / "tasks.db"
        async with open_sqlite_storage(database) as bundle:
            await add_tasks(bundle.message_store, "bench", tasks)
        config = ServerConfig(port=0, database=str(database))
        stop = trio.Event()
        times: list[float] = []
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                lambda task_status: serve_agentik(
                    config, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            async with httpx2.AsyncClient(base_url=url, timeout=600) as client:
                headers = {"A2A-Version": "1.0"}
                token = ""
                for _ in range(repeat):
                    began = time.perf_counter()
                    reply = await client.post(
                        "/a2a", json=list_tasks("bench", 1, token), headers=headers
                    )
                    times.append(time.perf_counter() - began)
                    result = reply.json()["result"]
                    assert len(result["tasks"]) == 1, result
                    assert result["totalSize"] == tasks, result
                    token = result["nextPageToken"]
            stop.set()
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for tasks in args.tasks:
        times = trio.run(measure, tasks, args.repeat)
        print(
            f"tasks={tasks:>6} pageSize=1 median={statistics.median(times) * 1000:9.1f} ms"
            f" min={min(times) * 1000:9.1f} ms max={max(times) * 1000:9.1f} ms"
        )


if __name__ == "__main__":
    main()
