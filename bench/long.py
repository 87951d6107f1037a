"""Long conversations (issue 16): what a turn costs, and what a conversation holds,
as its history grows, with a context policy (and without, for comparison).

Four figures, each a section (``--only`` runs one):

- ``cost``: turn cost with 100 vs 10,000 prior messages per conversation.
  C conversations are filled through the store, then warmed with one turn
  (which loads them and, with a policy, folds the history into summaries, as
  turns would have), then each runs T turns at once; CPU and wall time per
  turn. Target: 10,000 within 1.5x of 100.
- ``rss``: resident memory per idle conversation after 1 turn and after 1,000
  turns (run live, not filled), each in a fresh subprocess.
- ``many``: turns/s at N = 10,000 conversations x 5 turns on SQLite FULL
  **without** gc.freeze, next to the bare trio+apsw sketch
  (``../shared/bench/sketch_trio.py``, PERFORMANCE.md) run in the same
  invocation, interleaved, so the ratio is what to read on a loaded machine.
- ``flat``: one conversation, 5,000 turns: RSS (after a collection), what
  SQLite holds (``apsw.memory_used``: its page caches), the blocks Python
  has allocated, and the largest request, every 500 turns; none may grow
  with turns beyond SQLite's page caches.

Every turn makes one tool call (four stored messages), as bench/turns.py; the
model is ``bench_responder`` (instant, constant cost) answering summary
requests with a fixed 400-character summary. SQLite runs with
``synchronous=FULL``; the context budget is ``--budget`` tokens.

    python -m bench.long                          # everything, default sizes
    python -m bench.long --only cost --conversations 20 --measured-turns 50
    python -m bench.long --only many -n 10000 --repeat 2
    python -m bench.long --only rss --rss-conversations 2000 --rss-long 50
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import apsw
import trio

from agentik import ContextPolicy, Message, ModelRequest, ModelResponse, Role
from agentik.agent import ChatAgent, open_chat_agent
from agentik.agent._conversation import Conversation
from agentik.models import ScriptedModel, bench_responder
from agentik.storage import Pending, StorageBundle, open_sqlite_storage
from bench.turns import CLOCK, rss_bytes

ROOT = Path(__file__).resolve().parents[1]
SKETCH_PLACES = [up / "shared" / "bench" / "sketch_trio.py" for up in ROOT.parents[:2]]
"""Where ``../shared/bench/sketch_trio.py`` is, from a checkout or a worktree."""
SUMMARY_TEXT = ("the user asked for the time and got it; " * 10)[:400]
FILL_TEXT = "a question about something the user cares about, in a sentence or two. " * 2


def cached_messages(agent: ChatAgent) -> dict[str, int]:
    """Messages each live conversation caches, by id. The agent holds only
    handles; a conversation's state is in the frame of its task's coroutine."""
    out: dict[str, int] = {}
    for task in agent._nursery.child_tasks:
        frame = task.coro.cr_frame
        if frame is not None and frame.f_code.co_name == "run":
            conversation = frame.f_locals.get("self")
            if isinstance(conversation, Conversation):
                out[conversation.conversation_id] = len(conversation.history)
    return out


def responder() -> Callable[[ModelRequest], ModelResponse]:
    turn = bench_responder("clock")

    def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":
            return ModelResponse(text=SUMMARY_TEXT)
        response = turn(request)
        assert isinstance(response, ModelResponse)  # bench_responder is synchronous
        return response

    return respond


def open_agent(
    storage: StorageBundle, budget: int | None, **options: object
) -> AbstractAsyncContextManager[ChatAgent]:
    policy = None if budget is None else ContextPolicy(max_tokens=budget)
    return open_chat_agent(
        model=ScriptedModel(responder()),
        storage=storage,
        tools=[CLOCK],
        builtin_tools=False,
        context=policy,
        **options,  # type: ignore[arg-type]
    )


async def fill(storage: StorageBundle, cid: str, count: int) -> None:
    """``count`` prior messages, user and assistant by turns, through the writer."""
    pending: list[Pending[Message]] = []
    store = storage.message_store
    for i in range(count):
        role = Role.USER if i % 2 == 0 else Role.ASSISTANT
        pending.append(await store.submit(cid, Message(role, f"{i}: {FILL_TEXT}")))
    for p in pending:
        await p.wait()


async def turn_cost(
    path: str, conversations: int, prior: int, turns: int, budget: int | None
) -> dict[str, float]:
    """CPU and wall time per turn of ``conversations`` conversations running
    ``turns`` turns at once, each with ``prior`` messages before."""
    async with open_sqlite_storage(path) as storage:
        ids = [f"p{prior}-b{budget}-{i}" for i in range(conversations)]
        async with trio.open_nursery() as nursery:
            for cid in ids:
                nursery.start_soon(fill, storage, cid, prior)
        async with open_agent(storage, budget, idle_timeout=3600) as agent:
            for text in ("warm up", "again"):
                # The first loads (and folds the history into a summary after
                # its answer); the second waits behind that fold.
                async with trio.open_nursery() as nursery:
                    for cid in ids:
                        nursery.start_soon(agent.send, cid, text)
            sizes = cached_messages(agent)
            cached = statistics.mean(sizes[c] for c in ids)

            async def run(cid: str) -> None:
                for t in range(turns):
                    await agent.send(cid, f"turn {t}")

            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            async with trio.open_nursery() as nursery:
                for cid in ids:
                    nursery.start_soon(run, cid)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    done = conversations * turns
    return {
        "cpu_us_per_turn": 1e6 * cpu / done,
        "wall_us_per_turn": 1e6 * wall / done,
        "cached_messages": cached,
    }


async def cost_section(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for budget in (args.budget, None):
            label = f"budget={budget}" if budget else "no policy"
            rows = {}
            for prior in (100, 10_000):
                runs = [
                    await turn_cost(
                        f"{tmp}/cost-{prior}-{budget}-{r}.db",
                        args.conversations,
                        prior,
                        args.measured_turns,
                        budget,
                    )
                    for r in range(args.repeat)
                ]
                rows[prior] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                print(f"  cost {label} prior={prior}: {rows[prior]}", file=sys.stderr)
            out[label] = {
                "prior_100": rows[100],
                "prior_10000": rows[10_000],
                "cpu_ratio": rows[10_000]["cpu_us_per_turn"] / rows[100]["cpu_us_per_turn"],
                "wall_ratio": rows[10_000]["wall_us_per_turn"] / rows[100]["wall_us_per_turn"],
            }
    return out


async def idle_rss(conversations: int, turns: int, budget: int | None) -> dict[str, float]:
    """Resident memory per conversation that ran ``turns`` turns and now idles."""
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            open_sqlite_storage(f"{tmp}/rss.db") as storage,
            open_agent(storage, budget, idle_timeout=3600) as agent,
        ):
            await agent.send("warm-up", "hello")
            gc.collect()
            before = rss_bytes()

            async def run(i: int) -> None:
                for t in range(turns):
                    await agent.send(f"idle-{i}", f"turn {t}")

            async with trio.open_nursery() as nursery:
                for i in range(conversations):
                    nursery.start_soon(run, i)
            gc.collect()
            after = rss_bytes()
            live = [n for cid, n in cached_messages(agent).items() if cid != "warm-up"]
            cached = statistics.mean(live)
    return {
        "bytes_per_conversation": (after - before) / conversations,
        "conversations": conversations,
        "turns": turns,
        "cached_messages": cached,
    }


def in_subprocess(*extra: str) -> dict[str, object]:
    found = subprocess.run(
        [sys.executable, "-m", "bench.long", *extra],
        check=True,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    result: dict[str, object] = json.loads(found.stdout.splitlines()[-1])
    return result


def rss_section(args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {}
    for budget in (args.budget, None):
        label = f"budget={budget}" if budget else "no policy"
        policy = ["--budget", str(budget)] if budget else ["--no-policy"]
        one = in_subprocess(
            "--rss-child", "1", "--rss-conversations", str(args.rss_conversations), *policy
        )
        long = in_subprocess(
            "--rss-child", str(args.rss_turns), "--rss-conversations", str(args.rss_long), *policy
        )
        out[label] = {"after_1_turn": one, f"after_{args.rss_turns}_turns": long}
        print(f"  rss {label}: {out[label]}", file=sys.stderr)
    return out


async def agentik_many(path: str, n: int, turns: int, budget: int | None) -> dict[str, float]:
    async with (
        open_sqlite_storage(path) as storage,
        open_agent(storage, budget) as agent,
    ):

        async def run(i: int) -> None:
            for t in range(turns):
                await agent.send(f"bench-{i}", f"turn {t}")

        collections = sum(s["collections"] for s in gc.get_stats())
        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(run, i)
        elapsed = time.perf_counter() - began
        full = gc.get_stats()[2]["collections"]
    return {
        "turns_per_s": n * turns / elapsed,
        "gc_collections": sum(s["collections"] for s in gc.get_stats()) - collections,
        "gc_full_collections_total": full,
    }


def sketch_many(sketch: Path, tmp: str, n: int, turns: int) -> dict[str, object]:
    found = subprocess.run(
        [sys.executable, str(sketch), str(n), "--turns", str(turns), "--sync", "FULL"],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ | {"BENCH_DIR": tmp},
    )
    line = next(x for x in found.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, object] = json.loads(line.removeprefix("RESULT "))
    return result


def many_section(args: argparse.Namespace) -> dict[str, object]:
    """Each agentik run in its own subprocess (a fresh heap, as a server has),
    interleaved with the sketch's."""
    runs: dict[str, list[float]] = {"sketch": [], f"budget={args.budget}": [], "no policy": []}
    sketch_path = args.sketch or next((p for p in SKETCH_PLACES if p.exists()), None)
    if sketch_path is None:
        print("  no sketch_trio.py found (--sketch PATH); agentik only", file=sys.stderr)
        del runs["sketch"]
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            if sketch_path is not None:
                sketch = sketch_many(sketch_path, tmp, args.n, 5)
                runs["sketch"].append(float(sketch["turns_per_s"]))  # type: ignore[arg-type]
            for budget in (args.budget, None):
                policy = ["--budget", str(budget)] if budget else ["--no-policy"]
                result = in_subprocess("--many-child", str(args.n), *policy)
                label = f"budget={budget}" if budget else "no policy"
                runs[label].append(float(result["turns_per_s"]))  # type: ignore[arg-type]
            print(f"  many N={args.n}: {runs}", file=sys.stderr)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "conversations": args.n,
        "turns_per_s": medians,
        "spread": runs,
        "agentik_over_sketch_paired": {
            label: [a / b for a, b in zip(runs[label], runs["sketch"], strict=True)]
            for label in runs
            if label != "sketch"
        }
        if "sketch" in runs
        else None,
    }


async def flat(turns: int, budget: int, every: int) -> dict[str, object]:
    """One conversation, ``turns`` turns: RSS and the largest request, sampled."""
    largest = 0
    count = ContextPolicy(max_tokens=budget).count_tokens
    turn = responder()

    def respond(request: ModelRequest) -> ModelResponse:
        nonlocal largest
        largest = max(largest, sum(count(m.content) for m in request.messages))
        return turn(request)

    samples = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            open_sqlite_storage(f"{tmp}/flat.db") as storage,
            open_chat_agent(
                model=ScriptedModel(respond),
                storage=storage,
                tools=[CLOCK],
                builtin_tools=False,
                context=ContextPolicy(max_tokens=budget),
            ) as agent,
        ):
            began = time.perf_counter()
            for t in range(1, turns + 1):
                await agent.send("long", f"turn {t}: what time is it?")
                if t % every == 0 or t == 1:
                    gc.collect()
                    samples.append(
                        {
                            "turn": t,
                            "rss_mib": round(rss_bytes() / 2**20, 2),
                            "sqlite_mib": round(apsw.memory_used() / 2**20, 2),
                            "python_blocks": sys.getallocatedblocks(),
                            "largest_request_tokens": largest,
                            "cached_messages": cached_messages(agent)["long"],
                            "seconds": round(time.perf_counter() - began, 1),
                        }
                    )
                    largest = 0
                    print(f"  flat: {samples[-1]}", file=sys.stderr)
    later = samples[1:]
    rss = later[-1]["rss_mib"] - later[0]["rss_mib"]
    sqlite = later[-1]["sqlite_mib"] - later[0]["sqlite_mib"]
    return {
        "samples": samples,
        "rss_growth_mib_after_first_sample": rss,
        "sqlite_growth_mib_after_first_sample": sqlite,
        "python_blocks_growth_after_first_sample": later[-1]["python_blocks"]
        - later[0]["python_blocks"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=["cost", "rss", "many", "flat"], action="append")
    parser.add_argument("--budget", type=int, default=4000, help="context max_tokens")
    parser.add_argument("--no-policy", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--conversations", type=int, default=20, help="cost: conversations")
    parser.add_argument("--measured-turns", type=int, default=50, help="cost: turns measured")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--rss-conversations", type=int, default=2000, help="rss: after 1 turn")
    parser.add_argument("--rss-long", type=int, default=50, help="rss: conversations, long")
    parser.add_argument("--rss-turns", type=int, default=1000)
    parser.add_argument("-n", type=int, default=10_000, help="many: conversations")
    parser.add_argument("--flat-turns", type=int, default=5000)
    parser.add_argument("--sketch", type=Path, help="many: the bare trio+apsw sketch to run beside")
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--many-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    budget = None if args.no_policy else args.budget
    if args.rss_child is not None:
        print(json.dumps(trio.run(idle_rss, args.rss_conversations, args.rss_child, budget)))
        return
    if args.many_child is not None:
        with tempfile.TemporaryDirectory() as tmp:
            result = trio.run(agentik_many, f"{tmp}/many.db", args.many_child, 5, budget)
        print(json.dumps(result))
        return
    sections = args.only or ["cost", "rss", "many", "flat"]
    report: dict[str, object] = {"budget": args.budget}
    for section in sections:
        began = time.perf_counter()
        if section == "cost":
            report["cost"] = trio.run(cost_section, args)
        elif section == "rss":
            report["rss"] = rss_section(args)
        elif section == "many":
            report["many"] = many_section(args)
        else:
            report["flat"] = trio.run(flat, args.flat_turns, args.budget, 500)
        print(f"  {section}: {time.perf_counter() - began:.0f} s", file=sys.stderr)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
