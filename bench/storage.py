"""Storage benchmark: message appends per second through the SQLite writer.

Measures, in one process and one run, the path a turn takes through
``MessageStore`` (``submit`` four messages, then wait once for the last;
``--path append`` waits for every message instead) from 1, 100 and 1,000
concurrent trio tasks (each task its own conversation) with
synchronous=FULL and NORMAL, for messages of 2,000 and 500 characters,
against the raw ceiling: the same rows inserted with apsw ``executemany`` in
batches of 1,000, one transaction per batch, in one thread, on the same
schema and pragmas. Prints medians of several runs with their spread, the
ratio writer/raw, and (with ``--write-docs``) puts the table into the
"## Storage" section of docs/performance.md.

    python -m bench.storage [--runs 3] [--messages 20000] [--content-chars 2000 500]
                            [--path submit|append] [--write-docs]

(Run it as a module from the repository root: as a script, bench/ would come
first on sys.path, where a script named after a standard module would shadow it.)

Fair both ways: the raw baseline's rows (conversation, seq, content, the
timestamp) are built before its clock starts, so each writer task's
``Message`` values are built before the writer's clock starts too. Everything
else is timed on the writer's side, spawning the tasks included (~10 ms for
1,000): every message is one ``submit`` from one of the concurrent tasks,
which waits for the commit of every fourth (``--path append``: of each);
the writer assigns the seqs, builds the rows and the stored ``Message`` it
returns, and wakes each caller.

Also measured in the same run: raw apsw with the writer's own statements
(multi-row ``INSERT … VALUES``, chunks of at most 512 rows, one transaction
per 1,000 rows), the same writer with SQLite taken out (its trio side
alone), and the same tasks appending to the in-memory backend.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from unittest import mock

import apsw
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
from agentik.storage._writer import AppendRequest, Outcome
from agentik.storage.sqlite import _writer as sqlite_writer
from agentik.storage.sqlite._connect import open_write_connection
from agentik.storage.sqlite._migrate import migrate
from agentik.storage.sqlite._queries import _INSERT_ROWS, LARGEST_CHUNK

CONTENT_CHARS = (2000, 500)
"""Message sizes measured, the first one the headline. 2,000 characters puts
raw apsw at the scale the storage issue gives for an indexed message table
(about 33,000 rows/s on these machines; measured here 34,000); 500, a short
chat line, makes SQLite's share of each append small, so the writer's fixed
cost per append (a trio task switch, the stored ``Message``, the collector)
weighs most there."""

DOCS = Path(__file__).resolve().parent.parent / "docs" / "performance.md"


def content(task: int, i: int, chars: int) -> str:
    head = f"task {task} message {i}: "
    body = "lorem ipsum dolor sit amet " * ((chars - len(head)) // 27 + 1)
    return (head + body)[:chars]


def fresh(folder: Path, name: str) -> Path:
    path = folder / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def raw_setup(
    folder: Path, synchronous: Synchronous, tasks: int, total: int, chars: int
) -> tuple[apsw.Connection, list[tuple[object, ...]]]:
    """A fresh database on the writer's schema and pragmas, and the rows the
    tasks append, built before the clock starts (one round of all tasks after
    another, as the writer's batches take them)."""
    connection = open_write_connection(fresh(folder, "raw.db"), synchronous, 5.0)
    migrate(connection)
    now_us = time.time_ns() // 1000
    rows: list[tuple[object, ...]] = [
        (
            f"conversation-{t}",
            i + 1,
            "user",
            content(t, i, chars),
            None,
            None,
            None,
            None,
            now_us,
            None,
        )
        for i in range(total // tasks)
        for t in range(tasks)
    ]
    return connection, rows


def raw_rate(folder: Path, synchronous: Synchronous, tasks: int, total: int, chars: int) -> float:
    """Rows per second of apsw executemany, 1,000 rows per transaction."""
    connection, rows = raw_setup(folder, synchronous, tasks, total, chars)
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


def raw_multirow_rate(
    folder: Path, synchronous: Synchronous, tasks: int, total: int, chars: int
) -> float:
    """Rows per second of raw apsw with the writer's multi-row INSERT statements
    (chunks of 512, 256, … rows), 1,000 rows per transaction."""
    connection, rows = raw_setup(folder, synchronous, tasks, total, chars)
    start = time.perf_counter()
    for first in range(0, len(rows), 1000):
        batch = rows[first : first + 1000]
        connection.execute("BEGIN IMMEDIATE")
        position = 0
        while position < len(batch):
            left = len(batch) - position
            size = LARGEST_CHUNK if left >= LARGEST_CHUNK else 1 << (left.bit_length() - 1)
            chunk = batch[position : position + size]
            connection.execute(_INSERT_ROWS[size], list(chain.from_iterable(chunk)))
            position += size
        connection.execute("COMMIT")
    elapsed = time.perf_counter() - start
    connection.close()
    return len(rows) / elapsed


def messages(tasks: int, total: int, chars: int) -> list[list[Message]]:
    """The rows, built before the clock starts, as the raw baseline's are."""
    return [
        [Message(role=Role.USER, content=content(t, i, chars)) for i in range(total // tasks)]
        for t in range(tasks)
    ]


TURN_MESSAGES = 4
"""Messages a turn with one tool call stores (user, call, result, answer)."""

PATH = "submit"
"""``submit``: the path turns take (``main`` sets it from ``--path``)."""


async def _append_all(store: MessageStore, rows: list[list[Message]]) -> float:
    async def writer(task: int) -> None:
        conversation = f"conversation-{task}"
        if PATH == "append":
            for message in rows[task]:
                await store.append(conversation, message)
            return
        # What a turn does: submit each message as it happens, then wait once
        # for the last (writes commit in order), then read every result.
        messages = rows[task]
        for start in range(0, len(messages), TURN_MESSAGES):
            pending = [
                await store.submit(conversation, message)
                for message in messages[start : start + TURN_MESSAGES]
            ]
            await pending[-1].wait()
            for each in pending:
                each.result()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for task in range(len(rows)):
            nursery.start_soon(writer, task)
    return sum(map(len, rows)) / (time.perf_counter() - start)


def writer_rate(
    folder: Path, synchronous: Synchronous, tasks: int, total: int, chars: int
) -> tuple[float, float]:
    """Appends per second through the writer, and the mean batch size."""
    rows = messages(tasks, total, chars)

    async def main() -> tuple[float, float]:
        path = fresh(folder, "writer.db")
        async with open_sqlite_storage(path, synchronous=synchronous) as bundle:
            rate = await _append_all(bundle.message_store, rows)
            stats = writer_stats(bundle)
            assert stats is not None
            return rate, stats.writes / max(stats.batches, 1)

    return trio.run(main)


def _no_database(
    connection: object, seqs: object, clock: Clock, batch: list[AppendRequest]
) -> Outcome:
    """Stands in for the SQLite engine's batch function: acknowledges every
    append without touching SQLite, so what remains is the writer's trio side."""
    now = clock()
    for request in batch:
        request.stored_message = request.stored(now)
    return Outcome()


def no_database_rate(folder: Path, tasks: int, total: int, chars: int) -> float:
    """Appends per second through the writer with SQLite taken out."""
    with mock.patch.object(sqlite_writer, "_run_batch", _no_database):
        rate, _ = writer_rate(folder, "OFF", tasks, total, chars)
    return rate


def memory_rate(tasks: int, total: int, chars: int) -> float:
    """Appends per second to the in-memory backend: the trio side alone."""
    rows = messages(tasks, total, chars)
    return trio.run(_append_all, in_memory_storage().message_store, rows)


def median_spread(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), (max(values) - min(values)) / statistics.median(values)


@dataclass
class Figures:
    """One configuration's medians; ratios are medians of the per-run ratios
    (each run measures the writer and the baselines back to back)."""

    writer: float
    raw: float
    multirow: float
    bare: float
    memory: float
    ratio: float
    multirow_ratio: float


def measure(
    folder: Path, synchronous: Synchronous, tasks: int, total: int, chars: int, runs: int
) -> tuple[Figures, str]:
    writer_runs, batches, raw_runs, multi_runs, bare_runs, memory_runs = [], [], [], [], [], []
    for _ in range(runs):  # interleaved, so load drifts hit them all
        rate, batch = writer_rate(folder, synchronous, tasks, total, chars)
        writer_runs.append(rate)
        batches.append(batch)
        raw_runs.append(raw_rate(folder, synchronous, tasks, total, chars))
        multi_runs.append(raw_multirow_rate(folder, synchronous, tasks, total, chars))
        bare_runs.append(no_database_rate(folder, tasks, total, chars))
        memory_runs.append(memory_rate(tasks, total, chars))
    w, w_spread = median_spread(writer_runs)
    r, r_spread = median_spread(raw_runs)
    x, x_spread = median_spread(multi_runs)
    n, n_spread = median_spread(bare_runs)
    m, m_spread = median_spread(memory_runs)
    ratio = statistics.median(a / b for a, b in zip(writer_runs, raw_runs, strict=True))
    multirow_ratio = statistics.median(a / b for a, b in zip(writer_runs, multi_runs, strict=True))
    line = (
        f"| {chars:,} | {synchronous} | {tasks:,} | {w:,.0f} (±{w_spread / 2:.0%})"
        f" | {statistics.median(batches):,.0f} | {r:,.0f} (±{r_spread / 2:.0%})"
        f" | **{ratio:.0%}** | {x:,.0f} (±{x_spread / 2:.0%}) | {multirow_ratio:.0%}"
        f" | {n:,.0f} (±{n_spread / 2:.0%}) | {m:,.0f} (±{m_spread / 2:.0%}) |"
    )
    return Figures(w, r, x, n, m, ratio, multirow_ratio), line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument(
        "--content-chars",
        type=int,
        nargs="+",
        default=list(CONTENT_CHARS),
        help="message sizes to measure, the first one the headline",
    )
    parser.add_argument("--folder", type=Path, default=None, help="where the databases go")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--path",
        choices=["submit", "append"],
        default="submit",
        help="submit: what a turn does, 4 submits then one wait (default);"
        " append: submit and wait for every message",
    )
    args = parser.parse_args()
    global PATH
    PATH = args.path
    folder = Path(tempfile.mkdtemp(prefix="agentik-bench-", dir=args.folder))
    figures: dict[tuple[int, str, int], Figures] = {}
    args.load = [os.getloadavg()[0]]
    lines = [
        "| message chars | synchronous | tasks | writer appends/s | mean batch | raw apsw rows/s"
        " | writer/raw | raw multi-row rows/s | writer/multi-row | writer without SQLite"
        " | in-memory appends/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    try:
        for chars in args.content_chars:
            for synchronous in ("FULL", "NORMAL"):
                for tasks in (1, 100, 1000):
                    total = args.messages if tasks > 1 else min(args.messages, 2000)
                    figures[(chars, synchronous, tasks)], line = measure(
                        folder, synchronous, tasks, total, chars, args.runs
                    )
                    print(line, flush=True)
                    lines.append(line)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    args.load.append(os.getloadavg()[0])
    table = "\n".join(lines)
    print(table)
    if args.write_docs:
        write_docs(table, figures, args)


MARKER = "<!-- bench.storage output ends here; what follows is kept -->"


def write_docs(
    table: str, figures: dict[tuple[int, str, int], Figures], args: argparse.Namespace
) -> None:
    """Replace the generated part of docs/performance.md's "## Storage" section
    (up to ``MARKER``, which keeps the hand-written profile notes after it)."""
    sizes: list[int] = args.content_chars
    chars = sizes[0]
    full = figures[(chars, "FULL", 1000)]
    full_1, normal_1 = figures[(chars, "FULL", 1)].writer, figures[(chars, "NORMAL", 1)].writer
    normal_1000 = figures[(chars, "NORMAL", 1000)].writer
    others = "; ".join(
        f"with messages of {size:,} characters {other.ratio:.0%} ({other.writer:,.0f} against"
        f" {other.raw:,.0f} rows/s)"
        for size in sizes[1:]
        for other in (figures[(size, "FULL", 1000)],)
    )
    load = " → ".join(f"{value:.1f}" for value in args.load)
    command = (
        f"python -m bench.storage --runs {args.runs} --messages {args.messages} --path {args.path}"
        f" --content-chars {' '.join(map(str, sizes))} --write-docs"
    )
    generated = (
        "## Storage\n\n"
        f"`{command}` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; each task appends"
        " to its own conversation; medians of the runs (± half the spread), the measurements"
        f" interleaved; load average {load}. Ratios are medians of the per-run ratios."
        " *message chars* is the length of each message's content, the bulk of its row;"
        f" the first size, {chars:,}, is the headline. The storage issue gives about 33,000"
        " rows/s for raw inserts into an indexed message table; raw apsw ran at"
        f" {full.raw:,.0f} rows/s here with {chars:,}-character messages, 1,000 tasks, FULL."
        " The shorter the message, the less SQLite has to do per row and the more the"
        " writer's fixed cost per append (a trio task switch, the stored `Message`, the"
        " garbage collector) weighs. *raw apsw* inserts"
        " the same rows into the same schema with `executemany`, 1,000 rows per transaction,"
        " in one thread, rows built beforehand: the ceiling for SQLite the goal is set"
        " against. *raw multi-row* is the same with the writer's own statements (multi-row"
        " `INSERT … VALUES`, chunks of at most 512 rows). The writer's `Message` values are"
        " built before its clock starts too; every message is one `submit` from one of the"
        " tasks, which waits for the commit of every fourth, as a turn with one tool call"
        f" does (`--path {args.path}`). *writer without SQLite* is the same writer with"
        " its batch function replaced by one that acknowledges every request at once: the"
        " writer's trio side alone (queue, thread hop, waking each caller). *in-memory* runs"
        " the same tasks against `in_memory_storage()`.\n\n"
        f"{table}\n\n"
        "Reading it: group commit works: one transaction per batch, each batch as large as"
        " the number of waiting tasks. A lone task pays one sync per append (FULL ran at"
        f" {full_1 / normal_1:.0%} of NORMAL with one task, {full.writer / normal_1000:.0%}"
        " with 1,000, where one sync covers a whole batch). With 1,000 tasks at FULL and"
        f" messages of {chars:,} characters the writer ran at {full.ratio:.0%} of raw apsw"
        f" ({full.writer:,.0f} against {full.raw:,.0f} rows/s; the goal is 50 %) and at"
        f" {full.multirow_ratio:.0%} of raw apsw with the writer's own statements"
        f" ({full.multirow:,.0f} rows/s){'; ' + others if others else ''}. With SQLite"
        f" taken out the same writer ran at {full.bare:,.0f} appends/s, and the in-memory"
        f" backend at {full.memory:,.0f}.\n\n"
        f"{MARKER}\n"
    )
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else "# Performance\n"
    whole = re.compile(r"^## Storage\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    found = whole.search(text)
    if found is None:
        text = text.rstrip("\n") + "\n\n" + generated
    elif MARKER in found.group(0):
        end = text.index(MARKER, found.start()) + len(MARKER) + 1
        text = text[: found.start()] + generated + text[end:]
    else:
        text = text[: found.start()] + generated + "\n" + text[found.end() :]
    DOCS.write_text(text.rstrip("\n") + "\n", encoding="utf-8")
    print(f"wrote the table into {DOCS}")


if __name__ == "__main__":
    main()
