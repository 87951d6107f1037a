"""The long crash run: ``agentik serve`` SIGKILLed at random moments under load.

Run: python bench/crash.py [--kills 25] [--conversations 40]
     [--seed N] [--max-delay 3.0] [--keep DIR]

The harness is ``tests/reliability/test_crash.py`` (``run_crash``), the one
the CI test runs with 4 kills and ``AGENTIK_LONG=1 pytest`` with 25: the
server in a child process on a temporary SQLite database with the harness's
tools (``tests/reliability/crash_tools.py``: a toolset tool, an idempotent
tool, one that requires approval, one that must never run twice), one client
task per conversation sending turns in sequence with a fresh idempotency key
each and deciding the calls that wait for approval over HTTP (a quarter of
the conversations leave one waiting across all later kills), a SIGKILL after
a random delay, a restart on the same database, and so on; then every
unknown turn and decision retried, and the checks (every acknowledged turn
stored exactly once with the messages its response carried, every
interrupted turn finished once, seqs gapless, every tool call answered,
``PRAGMA integrity_check``, the parked calls still waiting and decidable,
tool runs counted through their side channel: a call that is not idempotent
ran at most once, the API agreeing with the file, one more turn per
conversation).

It prints one line per kill, then the figures as JSON, then any problem
found; the exit code is 0 only when there is none.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script: the repository root (for ``tests``), not bench/, on the path.
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
sys.path.insert(0, str(_ROOT))

import argparse  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402

import trio  # noqa: E402

from tests.reliability.test_crash import Report, run_crash  # noqa: E402


async def until_terminated(run: Callable[[], Awaitable[Report]]) -> Report | None:
    """``run()``, cancelled on SIGTERM (Ctrl-C also unwinds): either way the
    server child is killed on the way out."""
    report: Report | None = None
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        report = await run()
        nursery.cancel_scope.cancel()
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--seed", type=int, default=None, help="default: drawn and printed")
    parser.add_argument("--max-delay", type=float, default=3.0, help="longest round, seconds")
    parser.add_argument("--keep", help="run in this directory and keep the database")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"seed {seed}", flush=True)
    with tempfile.TemporaryDirectory(prefix="agentik-crash-") as scratch:
        directory = Path(args.keep) if args.keep else Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        report = trio.run(
            until_terminated,
            lambda: run_crash(
                directory,
                kills=args.kills,
                conversations=args.conversations,
                seed=seed,
                max_delay=args.max_delay,
                progress=True,
            ),
        )
    if report is None:
        print("terminated", file=sys.stderr)
        return 1
    print(report.figures.summary())
    for problem in report.problems:
        print("PROBLEM:", problem)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
