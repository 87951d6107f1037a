"""``agentik bench``: the load benchmark from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys

import trio

from agentik._serde import converter
from agentik.cli._failures import REPORTED, first_reportable, report


def add_bench_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``bench`` and its flags."""
    bench = commands.add_parser(
        "bench",
        help="N concurrent conversations x M turns, in process or against a server",
        description=(
            "Run N concurrent conversations of M turns each (closed loop) and report"
            " turns/s, latency percentiles, model vs framework time, writer batches and RSS."
        ),
    )
    bench.add_argument(
        "--conversations", "-n", type=int, default=100, help="concurrent conversations (N)"
    )
    bench.add_argument("--turns", "-m", type=int, default=5, help="turns per conversation (M)")
    bench.add_argument("--url", help="a running server's base URL (default: in process)")
    bench.add_argument("--token", help="bearer token for --url (default: $AGENTIK_AUTH_TOKEN)")
    bench.add_argument(
        "--prefix",
        help="conversation ids are PREFIX-0 .. PREFIX-(N-1); give each bench client sharing"
        " a server its own (default: bench- and six random hex digits, printed)",
    )
    bench.add_argument(
        "--storage",
        choices=["sqlite", "memory"],
        default="sqlite",
        help="in-process storage backend (default: sqlite)",
    )
    bench.add_argument("--database", help="SQLite file to use (default: a temporary one)")
    bench.add_argument(
        "--synchronous",
        choices=["FULL", "NORMAL"],
        default="FULL",
        help="SQLite durability of the in-process database (default: FULL)",
    )
    bench.add_argument("--latency", type=float, default=0.0, help="scripted model seconds per call")
    bench.add_argument("--tool-calls", type=int, default=1, help="tool calls per turn")
    bench.add_argument("--reply-chars", type=int, default=64, help="characters per answer")
    bench.add_argument("--model-base-url", help="benchmark a real OpenAI-compatible endpoint")
    bench.add_argument("--model", help="model name at --model-base-url")
    bench.add_argument(
        "--api-key-env",
        default="AGENTIK_MODEL_API_KEY",
        help="environment variable holding the model's API key",
    )
    bench.add_argument("--gc-freeze", action="store_true", help="gc.freeze() before the run")
    bench.add_argument("--json", action="store_true", help="print the result as JSON")
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")


_BENCH_ERRORS: tuple[type[Exception], ...] = (ValueError, *REPORTED)
"""ValueError: a setting ``run_bench`` refused (exit 2); the rest as every command."""


def run_bench_command(args: argparse.Namespace) -> int:
    from agentik.benchmark import BenchConfig, format_table, run_bench

    if args.gc_freeze:
        import gc

        gc.collect()
        gc.freeze()
    url_token = args.token or os.environ.get("AGENTIK_AUTH_TOKEN")
    try:
        config = BenchConfig(
            conversations=args.conversations,
            turns=args.turns,
            url=args.url,
            storage=args.storage,
            database=args.database,
            synchronous=args.synchronous,
            latency=args.latency,
            tool_calls=args.tool_calls,
            reply_chars=args.reply_chars,
            model_base_url=args.model_base_url,
            model_name=args.model,
            api_key=os.environ.get(args.api_key_env),
            auth_token=url_token,
            prefix=args.prefix,
            progress=not args.no_progress and sys.stderr.isatty(),
        )
    except ValueError as error:
        print(f"agentik bench: {error}", file=sys.stderr)
        return 2
    failure: BaseException | None = None
    try:
        result = trio.run(run_bench, config)
    except* _BENCH_ERRORS as group:
        failure = first_reportable(group, _BENCH_ERRORS)
    if failure is not None:
        return report("bench", str(failure), code=2 if isinstance(failure, ValueError) else 1)
    if args.json:
        print(json.dumps(converter.unstructure(result), indent=2))
    else:
        print(format_table(result))
    return 0 if result.turns_failed == 0 else 1
