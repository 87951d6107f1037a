"""CPU instructions per turn, counted by valgrind's callgrind: repeatable on a
noisy machine, where turns/s move by 20 % from one run to the next.

Each backend runs the bench workload (one tool call per turn) twice in a fresh
interpreter under callgrind, with N and 5N conversations x 5 turns; the
difference of the two totals divided by the extra turns is the cost of a turn,
start-up and imports cancelled out. Compare two checkouts by running this in
each (the counts are the same run after run for the same code).

    python -m bench.turn_instructions                 # memory and sqlite, N = 100
    python -m bench.turn_instructions --backend memory -n 200
    python -m bench.turn_instructions --backend sqlite --sketch ../shared/bench/sketch_trio.py
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

TURNS = 5

_WORKLOAD = """
import os, sys, tempfile, trio
from agentik import in_memory_storage, open_chat_agent, open_sqlite_storage
from agentik.benchmark._scripted import bench_tool, workload_responder
from agentik.models import ScriptedModel

backend, n, turns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

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
                nursery.start_soon(conversation, i)

async def main():
    if backend == "memory":
        await run(in_memory_storage())
        return
    with tempfile.TemporaryDirectory() as folder:
        async with open_sqlite_storage(os.path.join(folder, "db")) as storage:
            await run(storage)

trio.run(main)
"""


def callgrind_total(command: list[str]) -> int:
    """Instructions valgrind's callgrind counts for one run of ``command``."""
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={os.path.join(folder, 'out')}",
                *command,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no total:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def instructions(backend: str, conversations: int) -> int:
    """Instructions callgrind counts for one run of the workload."""
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "workload.py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(_WORKLOAD)
        return callgrind_total([sys.executable, script, backend, str(conversations), str(TURNS)])


def sketch_instructions(sketch: str, conversations: int) -> int:
    """Instructions callgrind counts for one run of the bare sketch, same workload."""
    with tempfile.TemporaryDirectory() as folder:
        os.environ["BENCH_DIR"] = folder
        try:
            return callgrind_total(
                [sys.executable, sketch, str(conversations), "--turns", str(TURNS)]
            )
        finally:
            del os.environ["BENCH_DIR"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend", choices=["memory", "sqlite"], nargs="+", default=["memory", "sqlite"]
    )
    parser.add_argument("-n", type=int, default=100, help="conversations of the small run")
    parser.add_argument(
        "--sketch",
        metavar="PATH",
        help="also count the bare sketch (../shared/bench/sketch_trio.py) the same way,"
        " and print agentik's SQLite count over it",
    )
    args = parser.parse_args()
    counts: dict[str, float] = {}
    for backend in args.backend:
        small = instructions(backend, args.n)
        large = instructions(backend, 5 * args.n)
        counts[backend] = per_turn = (large - small) / (4 * args.n * TURNS)
        print(f"{backend}: {per_turn / 1e6:.3f} M instructions a turn")
    if args.sketch:
        small = sketch_instructions(args.sketch, args.n)
        large = sketch_instructions(args.sketch, 5 * args.n)
        per_turn = (large - small) / (4 * args.n * TURNS)
        print(f"sketch: {per_turn / 1e6:.3f} M instructions a turn")
        if "sqlite" in counts:
            print(f"sketch / agentik sqlite: {per_turn / counts['sqlite']:.2f}")


if __name__ == "__main__":
    main()
