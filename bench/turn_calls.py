"""Python calls per turn, counted by cProfile: agentik's own the same run
after run for the same code (trio's move by a few: its scheduler shuffles),
in seconds (``bench.turn_instructions`` needs valgrind and
minutes), so it can walk a range of commits and say which one added work to
a turn.

The bench workload (one tool call per turn) runs N conversations x 5 turns
after a warm-up turn each (conversations spawned, histories loaded); only the
measured turns are profiled. "all" counts every Python-level call (trio's and
the standard library's too), "agentik" only those of functions in agentik's
own files. Compare two checkouts by running this with each on ``PYTHONPATH``
(the workload runs from a temporary folder, so the tree it measures is the
one ``PYTHONPATH`` names, not the current directory)::

    python -m bench.turn_calls                         # memory and sqlite, N = 200
    PYTHONPATH=/work/wt/base python -m bench.turn_calls --backend memory
    python -m bench.turn_calls --top 20                # the functions called most
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

TURNS = 5

_WORKLOAD = """
import cProfile, json, os, pstats, sys, tempfile, trio
import agentik
from agentik import in_memory_storage, open_chat_agent, open_sqlite_storage
from agentik.benchmark._scripted import bench_tool, workload_responder
from agentik.models import ScriptedModel

backend, n, turns, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
profile = cProfile.Profile()

async def run(storage):
    model = ScriptedModel(workload_responder(1, 40))
    async with open_chat_agent(
        model=model, storage=storage, tools=[bench_tool()], builtin_tools=False
    ) as agent:
        async def conversation(i):
            for t in range(turns):
                await agent.send(f"c{i}", f"hello {t}")
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(agent.send, f"c{i}", "warm")
        profile.enable()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(conversation, i)
        profile.disable()

async def main():
    if backend == "memory":
        await run(in_memory_storage())
        return
    with tempfile.TemporaryDirectory() as folder:
        async with open_sqlite_storage(os.path.join(folder, "db")) as storage:
            await run(storage)

trio.run(main)
ours = os.path.dirname(agentik.__file__) + os.sep
stats = pstats.Stats(profile).stats
per = {
    f"{os.path.relpath(file, os.path.dirname(ours[:-1])) if file.startswith(ours) else file}"
    f":{line}({name})": calls
    for (file, line, name), (_, calls, _, _, _) in stats.items()
}
mine = sum(calls for (file, _, _), (_, calls, _, _, _) in stats.items() if file.startswith(ours))
print(json.dumps({
    "tree": ours,
    "all": sum(per.values()) / (n * turns),
    "agentik": mine / (n * turns),
    "top": sorted(per.items(), key=lambda kv: -kv[1])[:top],
}))
"""


def count(backend: str, conversations: int, top: int) -> dict[str, object]:
    """The calls a turn of one run of the workload, in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "workload.py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(_WORKLOAD)
        done = subprocess.run(
            [sys.executable, script, backend, str(conversations), str(TURNS), str(top)],
            capture_output=True,
            text=True,
            check=True,
            cwd=folder,
        )
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend", choices=["memory", "sqlite"], nargs="+", default=["memory", "sqlite"]
    )
    parser.add_argument("-n", type=int, default=200, help="conversations")
    parser.add_argument("--top", type=int, default=0, help="list the N functions called most")
    args = parser.parse_args()
    for backend in args.backend:
        result = count(backend, args.n, args.top)
        print(
            f"{backend}: {result['all']:.1f} Python calls a turn,"
            f" {result['agentik']:.1f} of them agentik's ({result['tree']})"
        )
        top: list[tuple[str, int]] = result["top"]  # type: ignore[assignment]
        for name, calls in top:
            print(f"  {calls / (args.n * TURNS):7.2f}  {name}")


if __name__ == "__main__":
    main()
