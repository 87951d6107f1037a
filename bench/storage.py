"""Storage benchmark: message appends per second through the SQLite writer.

Measures, in one process and one run, ``MessageStore.append`` from 1, 100 and
1,000 concurrent trio tasks (each task its own conversation) with
synchronous=FULL and NORMAL, against the raw ceiling: the same rows inserted
with apsw ``executemany`` in batches of 1,000, one transaction per batch, in
one thread, on the same schema and pragmas. Prints medians of several runs
with their spread, the ratio writer/raw, and (with ``--write-docs``) puts the
table into the "## Storage" section of docs/performance.md.

    python -m bench.storage [--runs 3] [--messages 20000] [--write-docs]

(Run it as a module from the repository root: as a script, bench/ would come
first on sys.path, where a script named after a standard module would shadow it.)

Also measured in the same run: the same tasks appending to the in-memory
backend, i.e. what the trio side alone (task switches, the benchmark's own
loop) costs; the writer cannot beat it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import trio

from agentik import Message, Role
from agentik.storage import (
    MessageStore,
    Synchronous,
    in_memory_storage,
    open_sqlite_storage,
    writer_stats,
)
from agentik.storage._common import Clock
from agentik.storage.sqlite import _writer
from agentik.storage.sqlite._connect import open_write_connection
from agentik.storage.sqlite._migrate import migrate
from agentik.storage.sqlite._queries import Session

CONTENT_CHARS = 500
"""A typical chat message; the content is the bulk of each row."""

DOCS = Path(__file__).resolve().parent.parent / "docs" / "performance.md"


def content(task: int, i: int) -> str:
    head = f"task {task} message {i}: "
    return head + "lorem ipsum dolor sit amet " * ((CONTENT_CHARS - len(head)) // 27 + 1)


def fresh(folder: Path, name: str) -> Path:
    path = folder / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def raw_rate(folder: Path, synchronous: Synchronous, tasks: int, total: int) -> float:
    """Rows per second of apsw executemany, 1,000 rows per transaction."""
    connection = open_write_connection(fresh(folder, "raw.db"), synchronous, 5.0)
    migrate(connection)
    per_task = total // tasks
    now_us = time.time_ns() // 1000
    rows = [
        (f"conversation-{t}", i + 1, "user", content(t, i), None, None, None, None, now_us, None)
        for i in range(per_task)
        for t in range(tasks)
    ]
    sql = (
        "INSERT INTO message (conversation_id, seq, role, content, tool_calls, tool_call_id,"
        " prompt_tokens, completion_tokens, created_us, idempotency_key)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    start = time.perf_counter()
    for first in range(0, len(rows), 1000):
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany(sql, rows[first : first + 1000])
        connection.execute("COMMIT")
    elapsed = time.perf_counter() - start
    connection.close()
    return len(rows) / elapsed


def messages(tasks: int, total: int) -> list[list[Message]]:
    """The rows, built before the clock starts, as the raw baseline's are."""
    return [
        [Message(role=Role.USER, content=content(t, i)) for i in range(total // tasks)]
        for t in range(tasks)
    ]


async def _append_all(store: MessageStore, rows: list[list[Message]]) -> float:
    async def writer(task: int) -> None:
        conversation = f"conversation-{task}"
        for message in rows[task]:
            await store.append(conversation, message)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for task in range(len(rows)):
            nursery.start_soon(writer, task)
    return sum(map(len, rows)) / (time.perf_counter() - start)


def writer_rate(
    folder: Path, synchronous: Synchronous, tasks: int, total: int
) -> tuple[float, float]:
    """Appends per second through the writer, and the mean batch size."""
    rows = messages(tasks, total)

    async def main() -> tuple[float, float]:
        path = fresh(folder, "writer.db")
        async with open_sqlite_storage(path, synchronous=synchronous) as bundle:
            rate = await _append_all(bundle.message_store, rows)
            stats = writer_stats(bundle)
            assert stats is not None
            return rate, stats.writes / max(stats.batches, 1)

    return trio.run(main)


def _no_database(
    connection: object, seqs: object, clock: Clock, batch: list[_writer._AppendRequest]
) -> int:
    """Stands in for the writer's batch function: acknowledges every append
    without touching SQLite, so what remains is the writer's trio side."""
    session = Session(connection=connection, seqs=seqs, now_us=0, now=clock())  # type: ignore[arg-type]
    for request in batch:
        request.succeed(session)
    return 0


def no_database_rate(folder: Path, tasks: int, total: int) -> float:
    """Appends per second through the writer with SQLite taken out."""
    with mock.patch.object(_writer, "_run_batch", _no_database):
        rate, _ = writer_rate(folder, "OFF", tasks, total)
    return rate


def memory_rate(tasks: int, total: int) -> float:
    """Appends per second to the in-memory backend: the trio side alone."""
    rows = messages(tasks, total)
    return trio.run(_append_all, in_memory_storage().message_store, rows)


def median_spread(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--folder", type=Path, default=None, help="where the databases go")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="agentik-bench-", dir=args.folder))
    figures: dict[tuple[str, int], tuple[float, float, float, float]] = {}
    args.load = [os.getloadavg()[0]]
    lines = [
        "| synchronous | tasks | writer appends/s | mean batch | raw apsw rows/s | writer/raw"
        " | writer without SQLite | writer/without | in-memory appends/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    try:
        for synchronous in ("FULL", "NORMAL"):
            for tasks in (1, 100, 1000):
                total = args.messages if tasks > 1 else min(args.messages, 2000)
                writer_runs, batches, raw_runs, bare_runs, memory_runs = [], [], [], [], []
                for _ in range(args.runs):  # interleaved, so load drifts hit them all
                    rate, batch = writer_rate(folder, synchronous, tasks, total)
                    writer_runs.append(rate)
                    batches.append(batch)
                    raw_runs.append(raw_rate(folder, synchronous, tasks, total))
                    bare_runs.append(no_database_rate(folder, tasks, total))
                    memory_runs.append(memory_rate(tasks, total))
                w, w_spread = median_spread(writer_runs)
                r, r_spread = median_spread(raw_runs)
                n, n_spread = median_spread(bare_runs)
                m, m_spread = median_spread(memory_runs)
                line = (
                    f"| {synchronous} | {tasks:,} | {w:,.0f} (±{w_spread / 2:.0%})"
                    f" | {statistics.median(batches):,.0f} | {r:,.0f} (±{r_spread / 2:.0%})"
                    f" | **{w / r:.0%}** | {n:,.0f} (±{n_spread / 2:.0%}) | {w / n:.0%}"
                    f" | {m:,.0f} (±{m_spread / 2:.0%}) |"
                )
                print(line, flush=True)
                lines.append(line)
                figures[(synchronous, tasks)] = (w, r, n, m)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    args.load.append(os.getloadavg()[0])
    table = "\n".join(lines)
    print(table)
    if args.write_docs:
        write_docs(table, figures, args)


def write_docs(
    table: str,
    figures: dict[tuple[str, int], tuple[float, float, float, float]],
    args: argparse.Namespace,
) -> None:
    writer, raw, bare, memory = figures[("FULL", 1000)]
    full_1, full_1000 = figures[("FULL", 1)][0], writer
    normal_1, normal_1000 = figures[("NORMAL", 1)][0], figures[("NORMAL", 1000)][0]
    load = " → ".join(f"{value:.1f}" for value in args.load)
    section = (
        "## Storage\n\n"
        f"`python -m bench.storage --runs {args.runs} --messages {args.messages} --write-docs`"
        f" on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; messages of {CONTENT_CHARS}"
        " characters, each task appending to its own conversation; medians of the runs"
        f" (± half the spread), the four measurements interleaved; load average {load}."
        " *raw apsw* inserts the"
        " same rows into the same schema with `executemany`, 1,000 rows per transaction,"
        " in one thread, rows built beforehand: the ceiling for SQLite. *writer without"
        " SQLite* is the same writer with its batch function replaced by one that"
        " acknowledges every request at once: the writer's trio side alone (channel, thread"
        " hop, waking each caller). *in-memory* runs the same tasks against"
        " `in_memory_storage()`.\n\n"
        f"{table}\n\n"
        "Reading it: group commit works: one transaction per batch, each batch as large as"
        " the number of waiting tasks. A lone task pays one sync per append (FULL ran at"
        f" {full_1 / normal_1:.0%} of NORMAL with one task, {full_1000 / normal_1000:.0%} with"
        " 1,000, where one sync covers a whole batch). With 1,000 tasks at FULL the"
        f" writer ran at {writer / raw:.0%} of raw apsw ({writer:,.0f} against {raw:,.0f}"
        " rows/s; the goal is 50 %). With SQLite taken out the same writer ran at"
        f" {bare:,.0f} appends/s ({bare / raw:.0%} of raw apsw), and the in-memory backend,"
        f" which does no I/O at all, at {memory:,.0f} ({memory / raw:.0%}): waking one"
        " waiting task per append is the larger cost, and it does not shrink when SQLite"
        f" is fast (raw apsw here is {raw / 33_000:.1f}x the ~33,000 rows/s the goal was set"
        " against). The writer loses to its SQLite-free rate about the time of its SQLite"
        " work, because the event loop and the writer thread mostly alternate: every"
        " caller waits for its commit. Smaller batches (so callers run while the next"
        " batch commits) and a single-statement insert from JSON (so the thread holds the"
        " GIL less) were both measured and were no faster.\n"
    )
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else "# Performance\n"
    pattern = re.compile(r"^## Storage\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    DOCS.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    print(f"wrote the table into {DOCS}")


if __name__ == "__main__":
    main()
