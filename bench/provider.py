"""Thousands of conversations against one rate-limited provider, with and without ``ModelLimits``.

    python -m bench.provider                      # the three runs, N = 2,000 x 5 turns
    python -m bench.provider -n 500 --runs limits owners --json

The provider is ``bench.fake_openai`` in its own process, started afresh for
each run with a hosted provider's budget (``--rpm``, ``--tpm``: continuous
token buckets holding a second's refill, 429 with ``Retry-After`` and
``x-ratelimit-*`` headers past them) and a log-normal latency (median
``--median`` s). agentik drives it through ``OpenAICompatibleModel`` (its
defaults: 300 connections, 2 retries honouring Retry-After) on in-memory
storage, every conversation started at once:

- ``none``: no limits configured; N conversations x ``--turns`` turns.
- ``limits``: ``ModelLimits`` set to the provider's budget; the same turns.
- ``owners``: the limits; ten owners, owner 0 running ten times the
  conversations of each other owner (N in all), every conversation sending
  turn after turn for ``--seconds``; what each owner got is measured after
  the first ``--warmup`` seconds.
- ``owners-none``: the same without limits (for comparison).

Reported per run: turns finished and failed; wall time; goodput (tokens the
provider served per minute / ``--tpm``, and requests per minute / ``--rpm``;
the budget that binds is the one near 1); the provider's 429s (of all
requests it got); p50/p99 turn latency (finished turns); Jain's fairness
index across conversations (turns each had finished by half the run) or,
for the owner runs, across owners (tokens each was served), and owner 0's
share; the client's CPU. Targets, with limits: goodput >= 0.90, 429s <= 1 %,
no turn failed, Jain's index across owners >= 0.95 with owner 0 sending 10x.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

from agentik import ModelLimits, OverloadedError, TurnError
from agentik.agent import open_chat_agent
from agentik.models import OpenAICompatibleModel
from agentik.storage import in_memory_storage
from bench.model_client import percentile, server_stats

SEP = "\x1f"


@contextmanager
def provider(rpm: int, tpm: int, median: float) -> Iterator[str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.fake_openai",
            "--median",
            str(median),
            "--rpm",
            str(rpm),
            "--tpm",
            str(tpm),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip()
    finally:
        process.kill()
        process.wait()


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one has everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 1.0


async def run(
    name: str, url: str, args: argparse.Namespace, *, limited: bool, owners: bool
) -> dict[str, Any]:
    limits = ModelLimits(requests_per_minute=args.rpm, tokens_per_minute=args.tpm)
    if owners:
        base = max(1, args.n // (10 + args.owners - 1))
        conversations = [
            f"owner{o}{SEP}c{i}"
            for o in range(args.owners)
            for i in range(base * (10 if o == 0 else 1))
        ]
        turns = 1_000_000
    else:
        conversations = [f"c{i}" for i in range(args.n)]
        turns = args.turns
    finished: list[tuple[str, float, float, int]] = []  # conversation, began, ended, tokens
    failed: dict[str, int] = defaultdict(int)
    refused_at_edge = 0
    before = server_stats(url)
    model = OpenAICompatibleModel(url, "fake")
    async with (
        model,
        open_chat_agent(
            model=model,
            storage=in_memory_storage(),
            builtin_tools=False,
            max_queued_turns=8,
            model_limits=limits if limited else None,
        ) as agent,
    ):
        began = time.perf_counter()

        async def converse(conversation: str) -> None:
            nonlocal refused_at_edge
            turn = 0
            while turn < turns:
                start = time.perf_counter()
                try:
                    result = await agent.send(
                        conversation, f"turn {turn} of {conversation} ({name})"
                    )
                except OverloadedError as error:  # nothing stored: send it again later
                    refused_at_edge += 1
                    await trio.sleep(error.retry_after)
                    continue
                except TurnError as error:
                    failed[error.code] += 1
                    turn += 1
                    continue
                turn += 1
                usage = result.usage
                finished.append(
                    (
                        conversation,
                        start - began,
                        time.perf_counter() - began,
                        usage.prompt_tokens + usage.completion_tokens,
                    )
                )

        cpu = time.process_time()
        after: dict[str, float] = {}
        async with trio.open_nursery() as nursery:
            for conversation in conversations:
                nursery.start_soon(converse, conversation)
            if owners:  # what was served until now; turns under way finish unmeasured
                await trio.sleep(args.seconds)
                after = await trio.to_thread.run_sync(server_stats, url)
                nursery.cancel_scope.cancel()
        wall = time.perf_counter() - began
        cpu = time.process_time() - cpu
    if not after:
        after = server_stats(url)
    return summarize(
        name,
        args,
        conversations=conversations,
        finished=finished,
        failed=dict(failed),
        refused_at_edge=refused_at_edge,
        wall=wall,
        cpu=cpu,
        served=after["calls"] - before["calls"],
        refused=after["rate_limited"] - before["rate_limited"],
        tokens=after["served_tokens"] - before["served_tokens"],
        owners=owners,
    )


def summarize(
    name: str,
    args: argparse.Namespace,
    *,
    conversations: list[str],
    finished: list[tuple[str, float, float, int]],
    failed: dict[str, int],
    refused_at_edge: int,
    wall: float,
    cpu: float,
    served: float,
    refused: float,
    tokens: float,
    owners: bool,
) -> dict[str, Any]:
    latencies = [ended - start for _, start, ended, _ in finished]
    row: dict[str, Any] = {
        "run": name,
        "conversations": len(conversations),
        "turns_ok": len(finished),
        "turns_failed": sum(failed.values()),
        "failed_by_code": failed,
        "refused_at_edge": refused_at_edge,
        "wall_s": wall,
        "goodput_tokens": tokens / (wall / 60) / args.tpm,
        "goodput_requests": served / (wall / 60) / args.rpm,
        "requests": served + refused,
        "provider_429s": refused,
        "share_429": refused / max(1, served + refused),
        "p50_s": percentile(latencies, 0.5),
        "p99_s": percentile(latencies, 0.99),
        "client_cpu_share": cpu / wall,
    }
    if owners:
        per_owner: dict[str, float] = defaultdict(float)
        for conversation, _, ended, used in finished:
            if args.warmup <= ended <= args.seconds:
                per_owner[conversation.split(SEP)[0]] += used
        values = [per_owner.get(f"owner{o}", 0.0) for o in range(args.owners)]
        row["jain"] = jain(values)
        row["owner0_share"] = values[0] / max(1.0, sum(values))
        window = (args.seconds - args.warmup) / 60
        row["goodput_tokens_window"] = sum(values) / window / args.tpm
    else:
        middle = wall / 2
        by_conversation: dict[str, float] = defaultdict(float)
        for conversation, _, ended, _ in finished:
            if ended <= middle:
                by_conversation[conversation] += 1
        row["jain"] = jain([by_conversation.get(c, 0.0) for c in conversations])
        row["owner0_share"] = None
    return row


def run_peer(name: str, url: str, args: argparse.Namespace, *, owners: bool) -> dict[str, Any]:
    """A peer framework on the same workload, in a child process (``provider_peers``)."""
    kind = name.split(" ")[0]
    before = server_stats(url)
    done = subprocess.run(
        [
            args.peer_python,
            "-m",
            "bench.provider_peers",
            kind,
            url,
            name,
            str(args.n),
            str(args.turns),
            str(args.owners if owners else 0),
            str(args.seconds),
        ],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind} did not run: {done.stderr.strip()[-500:]}")
    child = json.loads(done.stdout)
    after = server_stats(url)
    finished = [tuple(row) for row in child["finished"]]
    conversations = sorted({row[0] for row in finished})
    if owners:
        base = max(1, args.n // (10 + args.owners - 1))
        count = base * (10 + args.owners - 1)
    else:
        count = args.n
    conversations += [f"missing{i}" for i in range(count - len(conversations))]
    return summarize(
        name,
        args,
        conversations=conversations,
        finished=finished,  # type: ignore[arg-type]
        failed={"error": child["failed"]} if child["failed"] else {},
        refused_at_edge=0,
        wall=child["wall"],
        cpu=child["cpu"],
        served=after["calls"] - before["calls"],
        refused=after["rate_limited"] - before["rate_limited"],
        tokens=after["served_tokens"] - before["served_tokens"],
        owners=owners,
    )


COLUMNS = (
    ("run", "{}"),
    ("conversations", "{:,}"),
    ("turns_ok", "{:,}"),
    ("turns_failed", "{:,}"),
    ("refused_at_edge", "{:,}"),
    ("wall_s", "{:.0f}"),
    ("goodput_tokens", "{:.2f}"),
    ("goodput_requests", "{:.2f}"),
    ("provider_429s", "{:,}"),
    ("share_429", "{:.1%}"),
    ("p50_s", "{:.1f}"),
    ("p99_s", "{:.1f}"),
    ("jain", "{:.3f}"),
    ("owner0_share", "{}"),
    ("client_cpu_share", "{:.0%}"),
)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(n for n, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = []
        for name, fmt in COLUMNS:
            value = row.get(name)
            if name == "owner0_share":
                cells.append("-" if value is None else f"{value:.3f}")
            else:
                cells.append(fmt.format(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name in args.runs:
        with provider(args.rpm, args.tpm, args.median) as url:
            limited = name in ("limits", "owners")
            owners = name.startswith("owners")
            rows.append(await run(name, url, args, limited=limited, owners=owners))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    for peer in args.peers:
        for owners in (False, True):
            with provider(args.rpm, args.tpm, args.median) as url:
                name = f"{peer} {'owners' if owners else 'turns'}"
                row = await trio.to_thread.run_sync(
                    lambda name=name, url=url, owners=owners: run_peer(
                        name, url, args, owners=owners
                    )
                )
                rows.append(row)
                print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="conversations")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--rpm", type=int, default=20_000)
    parser.add_argument("--tpm", type=int, default=600_000)
    parser.add_argument("--median", type=float, default=0.5)
    parser.add_argument("--owners", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the owner runs")
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["none", "limits", "owners"],
        choices=["none", "limits", "owners", "owners-none"],
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        default=[],
        choices=["pydantic-ai", "openai-agents"],
        help="also run these (no limits: they have none), each as 'turns' and 'owners'",
    )
    parser.add_argument(
        "--peer-python", default=sys.executable, help="a Python with the peers installed"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    logging.getLogger("agentik").setLevel(logging.ERROR)  # a failed turn is counted, not logged
    load = os.getloadavg()[0]
    rows = trio.run(main_async, args)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(
        f"provider: {args.rpm:,} requests and {args.tpm:,} tokens a minute, latency median"
        f" {args.median} s; load average before {load:.1f}, after {os.getloadavg()[0]:.1f}"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
